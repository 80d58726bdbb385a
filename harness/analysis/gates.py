"""Gate verdicts: each planned gate (:mod:`harness.config.gates`) judged against what was measured.

Every declared gate kind judges its gates itself: the ``judge`` of its spec class, in its
own module of :mod:`harness.analysis.gatekinds` (:func:`harness.config.gates.gate` refuses
a declaration without one). :func:`evaluate_gate` dispatches by the gate's exact class and
fails closed on a class that is not a declared kind. Every gate result
(:class:`harness.records.run_record.GateResult`) carries its id, the observed value, the
limit and a verdict (``passed``: True, False, or None when it could not be judged because
its task or variant did not run). A gate that cannot be judged is never reported as
passed. A judge reads only the planned gate and the typed measurements
(:mod:`harness.analysis.measurements`): every setting a gate needs (pipeline, alpha,
limits) is on the gate. The verdict of every drop gate (the drop within its limit and,
where tested, not significant) is :func:`harness.analysis.gatekinds._common.drop_verdict`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from harness.analysis.budget import split_family
from harness.analysis.familywise import holm_adjust
from harness.analysis.gatekinds._common import Budgeted, result
from harness.analysis.gatekinds._position import has_positions
from harness.analysis.gatekinds.baseline_acceptance_length_drop import BaselineAcceptanceLengthDrop
from harness.analysis.gatekinds.baseline_position_acceptance_drop import BaselinePositionAcceptanceDrop
from harness.analysis.gatekinds.baseline_readable import BaselineReadable
from harness.analysis.gatekinds.max_accuracy_drop import MaxAccuracyDrop
from harness.analysis.gatekinds.min_output_match import MinOutputMatch
from harness.analysis.gatekinds.sampled_equivalence import SampledEquivalence
from harness.analysis.measurements import Measurements
from harness.config.gates import declarations, generation_kinds
from harness.records.run_record import GateResult

if TYPE_CHECKING:
    from harness.config.gates import Gate

__all__ = ["baseline_notes", "budget_family", "evaluate_gate", "evaluate_gates", "holm_p_values",
           "judge_config", "judged_baseline_gates"]


def holm_p_values(gates: Sequence[Gate], m: Measurements) -> dict[str, float]:
    """Holm-adjusted p-values of one config's gates that ask for it (``multiple_testing:
    holm``), one family: ``max_accuracy_drop`` (one-sided McNemar, with paired data) and
    ``sampled_equivalence`` (two-sided sign-flip, with a test). Returns gate id ->
    adjusted p-value; gates outside the family are absent."""
    fam: list[tuple[Gate, float]] = []
    for g in gates:
        if isinstance(g, MaxAccuracyDrop) and g.multiple_testing == "holm":
            pc = m.paired(g.baseline, g.variant, g.task, g.pipeline)
            fam += [(g, pc.one_sided_p_value)] if pc is not None else []
        elif isinstance(g, SampledEquivalence) and g.multiple_testing == "holm" and g.independent:
            st = m.comparison(g.baseline, g.variant, g.task).sampled
            fam += [(g, st.p_value)] if st is not None else []
    return {g.id: p for (g, _), p in zip(fam, holm_adjust([p for _, p in fam]))}



def _not_run(g: Gate, m: Measurements) -> str | None:
    """Why the gate's variant, its baseline variant, or their task did not run, or why
    the task's traffic shape cannot happen there (:attr:`harness.records.shape_proof.ShapeProofRecord.not_run`);
    None: it ran."""
    for v in (g.variant, g.baseline):
        if v is None:
            continue
        tm = m.task(v, g.task)
        reason = m.variant(v).not_run or tm.not_run or (tm.shape.not_run if tm.shape is not None else None)
        if reason is not None:
            return reason
    return None


def _prompt_only(g: Gate, m: Measurements) -> GateResult | None:
    """NOT RUN for a gate of a kind that reads generated tokens or speculative decoding
    (:func:`harness.config.gates.generation_kinds`) on a task that only scores prompts
    (output match names the chosen-answer agreement, for information); else None."""
    if g.task is None or g.task not in m.prompt_only or not isinstance(g, generation_kinds()):
        return None
    detail = f"not run: {m.prompt_only[g.task]}"
    ag = m.comparison(g.baseline, g.variant, g.task).answers if isinstance(g, MinOutputMatch) else None
    if ag is not None and ag.agreement_rate is not None:
        detail += (f"; for information (not gated): chosen answers ({ag.pipeline}) agree on "
                   f"{ag.agreed}/{ag.compared} ({ag.agreement_rate:.4f})")
    return result(g, None, g.limit, None, detail, ag.disagreements if ag is not None else ())


def evaluate_gate(g: Gate, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """Judge one planned gate against the measurements.

    A gate whose variant, baseline variant or task did not run is NOT RUN with the
    reason; a gate of a kind that reads generated tokens on a task that only scores
    prompts (:attr:`Measurements.prompt_only`) is NOT RUN too. Otherwise the gate's own
    judge decides (each kind's ``judge`` docstring says its semantics; docs/gates.md).

    Args:
        g: a planned gate.
        m: the config's measurements.
        adjusted_p: the Holm-adjusted p-value of a ``max_accuracy_drop`` gate in a
            Holm family (:func:`holm_p_values`), else None.

    Returns:
        :class:`GateResult`; ``passed`` None when its variant or task did not run.

    Raises:
        TypeError: the gate's class is not the spec class of a declared kind, so no judge
            is declared for it (fails closed: a gate this evaluator does not know is never
            skipped).
    """
    d = declarations().get(getattr(g, "kind", ""))
    if d is None or type(g) is not d.spec:
        raise TypeError(f"gate {getattr(g, 'id', g)!r}: no judge for gate class {type(g).__name__} "
                        f"(kind {getattr(g, 'kind', None)!r}): it is not the spec class of a declared gate kind "
                        "(declare one with @gate in its own module of harness.analysis.gatekinds)")
    reason = _not_run(g, m)
    if reason is not None:
        return result(g, None, g.limit, None, f"not run: {reason}")
    skipped = _prompt_only(g, m)
    if skipped is not None:
        return skipped
    verdict: GateResult = g.judge(m, adjusted_p)
    return verdict


def budget_family(gates: Sequence[Gate], m: Measurements) -> tuple[dict[str, float], dict[str, str]]:
    """The config's false-alarm budget spent (:mod:`harness.analysis.budget`): the family is
    decided as planned, from every budgeted gate given (:class:`~harness.analysis.gatekinds._common.Budgeted`
    whose planned rule is a test) and its smallest attainable p-value at its planned size
    (:func:`harness.analysis.budget.split_family`), so a run judges the family its dry run
    stated; the family's gates that ran and have a test get Holm-adjusted p-values (a gate
    that did not run leaves Holm with fewer hypotheses, which keeps its guarantee).

    Returns:
        ``(gate id -> Holm-adjusted p-value, gate id -> why it is report-only)``.
    """
    planned = [g for g in gates if isinstance(g, Budgeted) and g.planned_test()]
    if not planned:
        return {}, {}
    budget = min(g.budget for g in planned if g.budget is not None)
    mins = [g.planned_min_p(g.planned_n) for g in planned]
    inside = split_family(mins, budget)
    share = budget / max(sum(inside), 1)
    why = {g.id: (f"report-only: its test cannot reach its share of the false_alarm_budget at its planned size "
                  f"({g.planned_n}: smallest attainable p {p:.3g} > {share:.3g} = {budget:g} / {max(sum(inside), 1)} "
                  "gate(s))") for g, p, ok in zip(planned, mins, inside) if not ok}
    fam = []
    for g, ok in zip(planned, inside):
        if ok and _not_run(g, m) is None and _prompt_only(g, m) is None:
            t = g.test(m)
            if t is not None:
                fam.append((g, t.p_value))
    return {g.id: p for (g, _), p in zip(fam, holm_adjust([p for _, p in fam]))}, why


def evaluate_gates(gates: Sequence[Gate], m: Measurements) -> list[GateResult]:
    """Judge every gate of one config, in plan order. With the config's false-alarm budget
    (:func:`budget_family`) the budgeted gates are judged with their Holm-adjusted p-values
    and a gate that cannot reach its share is NOT RUN (report-only: its figures and reason in
    the detail, never a pass); without, the ``max_accuracy_drop`` gates that ask for it with
    Holm-adjusted p-values (:func:`holm_p_values`)."""
    adj, report_only = budget_family(gates, m)
    if not any(isinstance(g, Budgeted) and g.planned_test() for g in gates):  # the budget is off
        adj = holm_p_values(gates, m)
    out = []
    for g in gates:
        r = evaluate_gate(g, m, adj.get(g.id))
        if g.id in report_only:
            r = r.model_copy(update={"passed": None, "detail": f"{report_only[g.id]}; {r.detail}"})
        out.append(r)
    return out


def baseline_notes(gates: Sequence[Gate], m: Measurements) -> list[str]:
    """Why some planned baseline gates are not judged against ``m.baseline``: variants or
    tasks the baseline does not have (a new variant must not fail a run), or a
    baseline without a mean acceptance length; and a change of config pipeline."""
    b = m.baseline
    if b is None:
        return []
    notes = []
    seen = set()
    for g in gates:
        if isinstance(g, BaselineReadable):
            continue
        bt = b.task(g.variant, g.task)
        if bt is None and (g.variant, g.task) not in seen:
            seen.add((g.variant, g.task))
            notes.append(f"{g.variant}/{g.task}: not in the baseline, not gated against it")
        elif bt is not None and isinstance(g, BaselineAcceptanceLengthDrop) and (
                bt.spec_decode is None or bt.spec_decode.mean_acceptance_length is None):
            notes.append(f"{g.variant}/{g.task}: the baseline has no mean acceptance length, not gated")
        elif bt is not None and isinstance(g, BaselinePositionAcceptanceDrop) and not has_positions(bt):
            notes.append(f"{g.variant}/{g.task}: the baseline has no per-position acceptance, not gated")
    return notes



def judged_baseline_gates(gates: Sequence[Gate], m: Measurements) -> list[GateResult]:
    """Judge the planned baseline gates that the stored baseline can judge (see
    :func:`baseline_notes` for the ones it cannot). No baseline: no verdicts."""
    b = m.baseline
    if b is None:
        return [evaluate_gate(g, m) for g in gates if isinstance(g, BaselineReadable) and m.baseline_error]
    return evaluate_gates(_judgeable(gates, m), m)


def _judgeable(gates: Sequence[Gate], m: Measurements) -> list[Gate]:
    """The baseline gates the stored baseline ``m.baseline`` (not None) can judge."""
    b = m.baseline
    assert b is not None
    out = []
    for g in gates:
        if isinstance(g, BaselineReadable):
            continue
        bt = b.task(g.variant, g.task)
        if bt is None:
            continue
        if isinstance(g, BaselineAcceptanceLengthDrop) and (
                bt.spec_decode is None or bt.spec_decode.mean_acceptance_length is None):
            continue
        if isinstance(g, BaselinePositionAcceptanceDrop) and not has_positions(bt):
            continue
        out.append(g)
    return out


def judge_config(gates: Sequence[Gate], baseline_gates: Sequence[Gate] | None, m: Measurements) -> list[GateResult]:
    """Every verdict of one config: its gates and, with ``baseline_gates`` (a stored baseline
    was asked for), those the stored baseline can judge (:func:`judged_baseline_gates`), all
    in ONE false-alarm family (:func:`budget_family`), in plan order."""
    if baseline_gates is None:
        return evaluate_gates(gates, m)
    if m.baseline is None:
        return evaluate_gates(gates, m) + judged_baseline_gates(baseline_gates, m)
    return evaluate_gates([*gates, *_judgeable(baseline_gates, m)], m)
