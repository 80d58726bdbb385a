"""What several gate kinds share: the one drop verdict, a gate's result, its task score,
its stored baseline, the truncation note, and whether a place's variant speculates.

Not a kind module (its name starts with ``_``): :func:`harness.config.gates.registry.check_declared`
asks a declaration only of the other modules of :mod:`harness.analysis.gatekinds`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.analysis.budget import GateTest
from harness.analysis.measurements import Measurements
from harness.analysis.scoring import TaskScore
from harness.config.gates.registry import GateBase, Place
from harness.records.baselines import BaselineTask
from harness.records.run_record import GateResult
from harness.tasks import task_size


class Budgeted(GateBase):
    """A gate kind whose failing verdict is a test spent from the config's
    ``false_alarm_budget`` (:mod:`harness.analysis.budget`). ``budget`` is the config's budget
    (None: the budget is off and the kind keeps its own alpha and tolerance rule).

    A budgeted kind defines :meth:`test` (its p-value on the measurements, or None when it
    cannot be computed) and :meth:`planned_min_p` (the smallest p-value its test can reach
    with ``n`` units, for the plan's report-only decision)."""

    budget: float | None = None
    #: the units (questions, requests) its task plans (:func:`harness.tasks.task_size`)
    planned_n: int = 0

    def planned_test(self) -> bool:
        """Whether, as planned, its failing verdict is a test (the family's candidates)."""
        return self.budget is not None

    def test(self, m: Measurements) -> GateTest | None:
        """This gate's test on ``m`` (None: no test possible, the judge says why)."""
        raise NotImplementedError(f"{type(self).__name__}: a budgeted gate kind defines its test")

    def planned_min_p(self, n: int) -> float:
        """The smallest p-value the test can reach with ``n`` units (questions or requests);
        default: a test on a continuous statistic, any level from two units on."""
        return 0.0 if n >= 2 else 1.0


def budget_fields(at: Place) -> dict[str, Any]:
    """The plan's budget fields of a budgeted gate at ``at``: the config's
    ``false_alarm_budget`` and its task's planned size."""
    return {"budget": at.config.false_alarm_budget,
            "planned_n": task_size(at.config.tasks[at.task]) if at.task else 0}


def planned_level(at: Place, test: str, alpha: float) -> tuple[dict[str, float | int | None], str]:
    """A tested kind's plan fields and the closing words of its description: with the
    config's budget, :func:`budget_fields` and ``"(<test>; false_alarm_budget B, Holm over
    the config's tested gates)"``; without, no fields and ``"(<test>, alpha A)"`` (its own
    level)."""
    budget = at.config.false_alarm_budget
    if budget is None:
        return {}, f"({test}, alpha {alpha})"
    return budget_fields(at), f"({test}; false_alarm_budget {budget:g}, Holm over the config's tested gates)"


def budget_verdict(g: Budgeted, t: GateTest, adjusted_p: float | None) -> tuple[bool, str]:
    """The verdict of a budgeted gate under its budget: fails when the Holm-adjusted p-value
    over the config's family (``adjusted_p``; the gate's own when judged alone) is below the
    budget; and the phrase saying so."""
    assert g.budget is not None
    p = t.p_value if adjusted_p is None else adjusted_p
    ok = p >= g.budget
    how = (f"{t.what} p={t.p_value:.4g}" + (f", Holm-adjusted {adjusted_p:.4g}" if adjusted_p is not None else "")
           + f" {'>=' if ok else '<'} false_alarm_budget {g.budget:g}")
    return ok, how


def speculative(at: Place) -> bool:
    """The place's variant (a comparison's candidate) has a speculative config."""
    return at.variant_spec.speculative_config is not None


@dataclass(frozen=True)
class DropVerdict:
    """The verdict of a drop gate.

    Attributes:
        passed: drop <= limit and (when tested) not significant.
        reasons: why it failed, each a phrase (empty when passed).
    """

    passed: bool
    reasons: tuple[str, ...]

    @property
    def failure(self) -> str:
        """``"; FAILED: <reasons>"`` for a detail, ``""`` when passed."""
        return "; FAILED: " + "; ".join(self.reasons) if self.reasons else ""


def drop_verdict(drop: float, limit: float, p: float | None = None, alpha: float | None = None,
                 worse: str = "significantly worse", test: str = "") -> DropVerdict:
    """The one verdict of every drop gate (accuracy, acceptance length; in-run or against
    the stored baseline): fails when ``drop`` (baseline - candidate, the gate's unit)
    exceeds ``limit``, or, when a one-sided p-value ``p`` is given, when ``p < alpha``
    (the candidate is ``worse`` by ``test``). An improvement (negative drop, large p)
    never fails.

    Raises:
        ValueError: ``p`` given without ``alpha``.
    """
    if p is not None and alpha is None:
        raise ValueError("drop_verdict: a p-value needs its alpha")
    why = []
    if drop > limit:
        why.append(f"drop {drop:.4f} > {limit}")
    if p is not None and alpha is not None and p < alpha:
        why.append(f"{worse} ({test}p={p:.4g} < alpha {alpha})")
    return DropVerdict(passed=not why, reasons=tuple(why))


#: Share of truncated completions above which a failing accuracy gate says so in its
#: detail (a few percent: more than chance cuts of long answers).
TRUNCATION_NOTE_RATE = 0.02


def truncation_note(sc: TaskScore | None, variant: str) -> str:
    """``"; note: ..."`` when more than :data:`TRUNCATION_NOTE_RATE` of the variant's
    completions were cut by ``max_tokens``, else ``""``."""
    if sc is None or not sc.truncated_rate or sc.truncated_rate <= TRUNCATION_NOTE_RATE:
        return ""
    n = sc.num_requests - sc.error_count
    return (f"; note: {sc.truncated} of {n} {variant} completions ({sc.truncated_rate:.1%}) were cut by "
            "max_tokens (finish_reason length): raise max_tokens before reading this as lost accuracy")


def result(g: GateBase, observed: float | None, limit: float | None, passed: bool | None, detail: str,
           questions: Any = (), baseline: str | None = None) -> GateResult:
    """The record of a judged gate: the gate's identity, ``observed`` against ``limit``, the
    verdict (``passed`` None: not run), ``detail`` and the questions it names; ``baseline``
    replaces the gate's baseline variant (a stored baseline's ``baseline:<run id>``)."""
    return GateResult(
        id=g.id, kind=g.kind, config=g.config, variant=g.variant, task=g.task,
        baseline=baseline if baseline is not None else g.baseline, op=g.op, observed=observed,
        limit=limit, passed=passed, detail=detail, questions=tuple(questions),
    )


def task_score(g: GateBase, m: Measurements) -> tuple[TaskScore | None, GateResult | None]:
    """The gate's task score, or the NOT RUN result when there is none."""
    sc = m.task(g.variant, g.task).score
    return sc, (result(g, None, g.limit, None, "not run: no score") if sc is None else None)


def stored_task(g: GateBase, m: Measurements) -> tuple[BaselineTask | None, str | None]:
    """The stored baseline's task of the gate's variant and task (None when absent) and
    the label ``baseline:<run id>`` a baseline gate reports as its baseline."""
    b = m.baseline
    if b is None:
        return None, None
    return b.task(g.variant, g.task), f"baseline:{b.source_run.run_id}"


def no_stored(g: GateBase, label: str | None) -> GateResult:
    """NOT RUN: the stored baseline has no entry for the gate's variant and task."""
    return result(g, None, g.limit, None, "not run: no stored baseline for this variant and task", baseline=label)
