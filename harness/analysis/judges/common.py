"""What every judge shares: the registry of judges bound to the declared gate kinds, the one
drop verdict, a gate's result, its task score and its stored baseline.

A judge is registered for one declared spec class (:data:`harness.config.gates.DECLARATIONS`)
with :func:`judges`; the registry fails closed: a judge for a class that is not a declared
gate kind, or a second judge for one class, is refused when it is registered, and
:func:`check_judged` (run when :mod:`harness.analysis.judges` is imported) refuses a
declared kind without a judge.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from harness.analysis.measurements import Measurements
from harness.analysis.scoring import TaskScore
from harness.config import gates as G
from harness.records.baselines import BaselineTask
from harness.records.run_record import GateResult

#: A judge: ``(gate, measurements, Holm-adjusted p-value or None) -> GateResult``.
Judge = Callable[[Any, Measurements, "float | None"], GateResult]

#: gate class -> its judge, filled by :func:`judges`; every declared kind's class has
#: one (:func:`check_judged`).
JUDGES: dict[type, Judge] = {}

_J = TypeVar("_J", bound=Callable[..., GateResult])


def judges(gate_class: type) -> Callable[[_J], _J]:
    """Decorator: register the decorated function as the judge of ``gate_class``.

    Raises:
        TypeError: ``gate_class`` is not the spec class of a declared gate kind
            (:func:`harness.config.gates.gate`), or already has a judge (one judge per
            gate class).
    """
    declared = {d.spec for d in G.DECLARATIONS.values()}

    def register(fn: _J) -> _J:
        if gate_class not in declared:
            raise TypeError(f"{fn.__name__} judges {gate_class.__name__}, which is not a declared gate kind "
                            "(declare it with @gate in a family module of harness.config.gates)")
        if gate_class in JUDGES:
            raise TypeError(f"gate class {gate_class.__name__} already judged by {JUDGES[gate_class].__name__}; "
                            f"cannot register {fn.__name__} too")
        JUDGES[gate_class] = fn
        return fn
    return register


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


def result(g: G.Gate, observed: float | None, limit: float | None, passed: bool | None, detail: str,
           questions: Any = (), baseline: str | None = None) -> GateResult:
    """The record of a judged gate: the gate's identity, ``observed`` against ``limit``, the
    verdict (``passed`` None: not run), ``detail`` and the questions it names; ``baseline``
    replaces the gate's baseline variant (a stored baseline's ``baseline:<run id>``)."""
    return GateResult(
        id=g.id, kind=g.kind.value, config=g.config, variant=g.variant, task=g.task,
        baseline=baseline if baseline is not None else g.baseline, op=g.op, observed=observed,
        limit=limit, passed=passed, detail=detail, questions=tuple(questions),
    )


def task_score(g: G.Gate, m: Measurements) -> tuple[TaskScore | None, GateResult | None]:
    """The gate's task score, or the NOT RUN result when there is none."""
    sc = m.task(g.variant, g.task).score
    return sc, (result(g, None, g.limit, None, "not run: no score") if sc is None else None)


def stored_task(g: G.Gate, m: Measurements) -> tuple[BaselineTask | None, str | None]:
    """The stored baseline's task of the gate's variant and task (None when absent) and
    the label ``baseline:<run id>`` a baseline gate reports as its baseline."""
    b = m.baseline
    if b is None:
        return None, None
    return b.task(g.variant, g.task), f"baseline:{b.source_run.run_id}"


def no_stored(g: G.Gate, label: str | None) -> GateResult:
    """NOT RUN: the stored baseline has no entry for the gate's variant and task."""
    return result(g, None, g.limit, None, "not run: no stored baseline for this variant and task", baseline=label)


def check_judged(judged: Mapping[type, Judge] | None = None) -> None:
    """Fail closed on a declared gate kind without a judge.

    Raises:
        TypeError: a declared kind's spec class has no judge in ``judged`` (default
            :data:`JUDGES`).
    """
    judged = JUDGES if judged is None else judged
    missing = [f"{d.kind.value} ({d.spec.__name__}, {d.module})" for d in G.DECLARATIONS.values()
               if d.spec not in judged]
    if missing:
        raise TypeError("declared gate kinds without a judge (register one with @judges in the family's module "
                        f"of harness.analysis.judges): {', '.join(missing)}")
