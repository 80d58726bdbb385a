"""The dry run's false-alarm budget: how a config's ``false_alarm_budget`` is spent over its
planned gates (:mod:`harness.analysis.budget`), which gates are report-only and why, and the
per-config false-fail on an unchanged build that follows."""

from __future__ import annotations

from typing import TypedDict

from harness.analysis.budget import point_rule_false_fail, split_family
from harness.analysis.gatekinds._common import Budgeted
from harness.analysis.gatekinds.accuracy_floor import AccuracyFloor
from harness.config.gates import Gate, plan_gates
from harness.config.schema import VLLM_PIPELINE, ModelConfig
from harness.tasks import task_size


class BudgetGate(TypedDict):
    """One tested gate of the plan: its id, kind, units and smallest attainable p-value."""

    id: str
    kind: str
    n: int
    min_p: float


class BudgetPlan(TypedDict):
    """:func:`budget_plan`: the budget, the family (each at least ``share`` at Holm's first
    step), the report-only gates with their reason, the deterministic gates (per kind), the
    per-config false-fail bound on an unchanged build (the budget: Holm), and beside it the
    gates outside the budget that noise can move (``outside``: vLLM-form floors, kept as vLLM
    judges them) with their false-fail together at the threshold accuracy (``outside_false_fail``)."""

    false_alarm_budget: float
    procedure: str
    family: list[BudgetGate]
    share: float
    report_only: list[dict[str, str]]
    deterministic: dict[str, int]
    outside: list[dict[str, str | float]]
    false_fail_bound: float
    outside_false_fail: float


def _tested(g: Gate) -> bool:
    """A planned budgeted gate judges by a test (:meth:`Budgeted.planned_test`)."""
    return isinstance(g, Budgeted) and g.planned_test()


def budget_plan(config: ModelConfig) -> BudgetPlan | None:
    """How ``config``'s budget is spent over its in-run gates (None: the budget is off).

    Every tested gate's smallest attainable p-value at its task's planned size
    (:meth:`Budgeted.planned_min_p`; questions, or requests for the acceptance tests) decides
    the family (:func:`harness.analysis.budget.split_family`); the rest are report-only.
    Holm's procedure over the family keeps the chance that any gate of it fails an unchanged
    build at most the budget, under any dependence (Holm 1979), so that is the bound.
    vLLM-form floors keep vLLM's point rule, outside the budget: their false-fail at the
    threshold accuracy is stated beside the bound; deterministic gates add nothing on an
    unchanged build."""
    budget = config.false_alarm_budget
    if budget is None:
        return None
    gates = plan_gates(config)
    tested = [(g, g.planned_n if isinstance(g, Budgeted) else 0) for g in gates if _tested(g)]
    mins = [g.planned_min_p(n) for g, n in tested if isinstance(g, Budgeted)]
    inside = split_family(mins, budget)
    fam = [BudgetGate(id=g.id, kind=g.kind, n=n, min_p=p) for (g, n), p, ok in zip(tested, mins, inside) if ok]
    share = budget / max(len(fam), 1)
    report_only = [{"id": g.id, "why": f"its test cannot reach its share at {n} units: smallest attainable p "
                                      f"{p:.3g} > {share:.3g} (= {budget:g} / {len(fam)} gates); judged NOT RUN, "
                                      "its figures reported"}
                   for (g, n), p, ok in zip(tested, mins, inside) if not ok]
    outside = [_vllm_floor(config, g) for g in gates if isinstance(g, AccuracyFloor) and g.pipeline == VLLM_PIPELINE]
    det: dict[str, int] = {}
    ids = {g.id for g, _ in tested} | {str(o["id"]) for o in outside}
    for g in gates:
        if g.id not in ids:
            det[g.kind] = det.get(g.kind, 0) + 1
    rest = 1.0
    for o in outside:
        rest *= 1.0 - float(o["alpha"])
    return BudgetPlan(false_alarm_budget=budget,
                      procedure="Holm's step-down procedure over every tested gate of the config (Holm 1979)",
                      family=fam, share=share, report_only=report_only, deterministic=det, outside=outside,
                      false_fail_bound=budget, outside_false_fail=1.0 - rest)


def _vllm_floor(config: ModelConfig, g: AccuracyFloor) -> dict[str, str | float]:
    """A vLLM-form floor outside the budget: vLLM's point rule ``accuracy >= threshold -
    tolerance`` kept as vLLM judges it (docs/vllm-parity.md), with its false-fail on a build
    whose true accuracy is the threshold (:func:`point_rule_false_fail`, the planned
    questions; a widening by ``calibration_questions`` not counted, so an upper figure)."""
    assert g.task is not None, "a floor is planned per task"
    n = task_size(config.tasks[g.task])
    ff = point_rule_false_fail(n, g.accuracy_threshold, g.limit or 0.0)
    return {"id": g.id, "alpha": ff,
            "why": (f"vLLM's point rule (accuracy >= {g.accuracy_threshold:g} - {g.tolerance:g}, kept as vLLM's "
                    f"test judges it; no test): fails a build whose true accuracy is the threshold with probability "
                    f"{ff:.2g} at {n} questions")}


def render_budget(config: ModelConfig) -> list[str]:
    """Lines for ``--dry-run`` stating :func:`budget_plan` (none when the budget is off)."""
    b = budget_plan(config)
    if b is None:
        return []
    lines = [
        f"  false-alarm budget {b['false_alarm_budget']:g}: false-fail on an unchanged build at most "
        f"{b['false_fail_bound']:.3f} per night (Holm over {len(b['family'])} tested gate(s), each at least "
        f"{b['share']:.3g} at Holm's first step; every failing verdict among them is a test of a loss beyond its "
        "margin)",
    ]
    for r in b["report_only"]:
        lines.append(f"    report-only {r['id']}: {r['why']}")
    for o in b["outside"]:
        lines.append(f"    outside the budget {o['id']}: {o['why']}")
    if b["outside"]:
        lines.append(f"    vLLM's point-rule floors together: false-fail {b['outside_false_fail']:.2g} at their "
                     "threshold accuracy, beside the bound above (docs/gates.md, \"The false-alarm budget\")")
    if b["deterministic"]:
        lines.append("    fixed rules outside the budget (no test, so noise can still fail them: the bound above "
                     "does not cover them; docs/gates.md): "
                     + ", ".join(f"{k} x{n}" for k, n in sorted(b["deterministic"].items())))
    return lines
