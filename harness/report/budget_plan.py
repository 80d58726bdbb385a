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


#: Why each gate kind that is not a test stays outside the budget (docs/gates.md, "The
#: false-alarm budget"): a fact of the engine or the run, not a sample noise can move, or a
#: rule kept on purpose.
FIXED_RULES: dict[str, str] = {
    "variant_effective": "a fact of the engine's effective configuration, not a sample",
    "startup_rpc_check": "a worker's start-up check answers or fails; not a sample",
    "max_error_rate": "a failed request is the engine's failure, not sampling noise (limit 0 by default)",
    "max_truncation_rate": "a set limit on completions cut by max_tokens (off by default): the config's "
                           "max_tokens decides it, not a test",
    "shape_proven": "the engine's counters prove the traffic shape happened, or do not",
    "drafts_observed": "a speculative variant reports drafts, or does not",
    "baseline_readable": "the stored baseline file reads, or does not",
    "min_output_match": "identical token ids against the limit, or a divergence the reference was confident "
                        "about (a bug, not noise); tested only where it judges against a noise reference",
    "sampled_equivalence": "NOT RUN as planned: the seeding makes the draws dependent",
}


def fixed_rule_why(kind: str) -> str:
    """Why gate kind ``kind`` is outside the budget (:data:`FIXED_RULES`; a kind not listed
    there: its rule is not a test)."""
    return FIXED_RULES.get(kind, "its rule is not a test")


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
    kinds: dict[str, int] = {}
    for g in b["family"]:
        kinds[g["kind"]] = kinds.get(g["kind"], 0) + 1
    if kinds:
        lines.append("    tested, in the family: " + ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items())))
    for r in b["report_only"]:
        lines.append(f"    report-only {r['id']}: {r['why']}")
    for o in b["outside"]:
        lines.append(f"    outside the budget {o['id']}: {o['why']}")
    if b["outside"]:
        lines.append(f"    vLLM's point-rule floors together: false-fail {b['outside_false_fail']:.2g} at their "
                     "threshold accuracy, beside the bound above (docs/gates.md, \"The false-alarm budget\")")
    if b["deterministic"]:
        lines.append("    fixed rules outside the budget (no test; the bound above does not cover them; docs/gates.md, "
                     "\"The false-alarm budget\"):")
        lines += [f"      {k} x{n}: {fixed_rule_why(k)}" for k, n in sorted(b["deterministic"].items())]
    return lines
