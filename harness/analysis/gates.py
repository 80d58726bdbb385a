"""Gate verdicts: each planned gate (:mod:`harness.config.gates`) judged against what was measured.

Every declared gate kind has one judge, in the module of its family in
:mod:`harness.analysis.judges`, registered by class with :func:`judges` in :data:`JUDGES`
(a judge for an undeclared class, or a declared kind without a judge, is an import
error); :func:`evaluate_gate` dispatches by the gate's class and fails closed on a class
with no judge. Every gate result (:class:`harness.records.run_record.GateResult`) carries
its id, the observed value, the limit and a verdict (``passed``: True, False, or None when
it could not be judged because its task or variant did not run). A gate that cannot be
judged is never reported as passed. A judge reads only the planned gate and the typed
measurements (:mod:`harness.analysis.measurements`): every setting a gate needs
(pipeline, alpha, limits) is on the gate. The verdict of every drop gate (the drop
within its limit and, where tested, not significant) is :func:`drop_verdict`.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.analysis.familywise import holm_adjust
from harness.analysis.judges import check_judged
from harness.analysis.judges.acceptance import (
    judge_baseline_acceptance_length_drop,
    judge_drafts_observed,
    judge_max_acceptance_length_drop,
    judge_min_acceptance_length,
    rise_note,
)
from harness.analysis.judges.accuracy import (
    _baseline_accuracy,
    judge_accuracy_floor,
    judge_baseline_accuracy_drop,
    judge_max_accuracy_drop,
)
from harness.analysis.judges.baseline import judge_baseline_readable
from harness.analysis.judges.common import (
    JUDGES,
    TRUNCATION_NOTE_RATE,
    DropVerdict,
    Judge,
    drop_verdict,
    judges,
    result,
    truncation_note,
)
from harness.analysis.judges.engine import judge_variant_effective, runner_check
from harness.analysis.judges.output_match import judge_min_output_match
from harness.analysis.judges.position import (
    _has_positions,
    judge_baseline_position_acceptance_drop,
    judge_max_position_acceptance_drop,
    position_verdict,
)
from harness.analysis.judges.requests import judge_max_error_rate, judge_max_truncation_rate
from harness.analysis.judges.sampled import judge_sampled_equivalence
from harness.analysis.judges.shape import judge_shape_proven
from harness.analysis.measurements import Measurements
from harness.config import gates as G
from harness.records.run_record import GateResult

__all__ = [
    "JUDGES", "PROMPT_ONLY_KINDS", "TRUNCATION_NOTE_RATE", "DropVerdict", "Judge", "_baseline_accuracy",
    "baseline_notes", "check_judged", "drop_verdict", "evaluate_gate", "evaluate_gates", "holm_p_values",
    "judge_accuracy_floor", "judge_baseline_acceptance_length_drop", "judge_baseline_accuracy_drop",
    "judge_baseline_position_acceptance_drop", "judge_baseline_readable", "judge_drafts_observed",
    "judge_max_acceptance_length_drop", "judge_max_accuracy_drop", "judge_max_error_rate",
    "judge_max_position_acceptance_drop", "judge_max_truncation_rate", "judge_min_acceptance_length",
    "judge_min_output_match", "judge_sampled_equivalence", "judge_shape_proven", "judge_variant_effective",
    "judged_baseline_gates", "judges", "position_verdict", "rise_note", "runner_check", "truncation_note",
]


def holm_p_values(gates: Sequence[G.Gate], m: Measurements) -> dict[str, float]:
    """Holm-adjusted p-values of one config's gates that ask for it (``multiple_testing:
    holm``), one family: ``max_accuracy_drop`` (one-sided McNemar, with paired data) and
    ``sampled_equivalence`` (two-sided sign-flip, with a test). Returns gate id ->
    adjusted p-value; gates outside the family are absent."""
    fam: list[tuple[G.Gate, float]] = []
    for g in gates:
        if isinstance(g, G.MaxAccuracyDrop) and g.multiple_testing == "holm":
            pc = m.paired(g.baseline, g.variant, g.task, g.pipeline)
            fam += [(g, pc.one_sided_p_value)] if pc is not None else []
        elif isinstance(g, G.SampledEquivalence) and g.multiple_testing == "holm" and g.independent:
            st = m.comparison(g.baseline, g.variant, g.task).sampled
            fam += [(g, st.p_value)] if st is not None else []
    return {g.id: p for (g, _), p in zip(fam, holm_adjust([p for _, p in fam]))}



def _not_run(g: G.Gate, m: Measurements) -> str | None:
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


#: Gates that read generated tokens or speculative decoding: NOT RUN on a task that
#: only scores prompts (:attr:`Measurements.prompt_only`).
#: The declared kinds that say so (:attr:`harness.config.gates.Declaration.reads_generation`).
PROMPT_ONLY_KINDS = G.generation_kinds()


def _prompt_only(g: G.Gate, m: Measurements) -> GateResult | None:
    """NOT RUN for a gate of :data:`PROMPT_ONLY_KINDS` on a task that only scores prompts
    (output match names the chosen-answer agreement, for information); else None."""
    if g.task is None or g.task not in m.prompt_only or not isinstance(g, PROMPT_ONLY_KINDS):
        return None
    detail = f"not run: {m.prompt_only[g.task]}"
    ag = m.comparison(g.baseline, g.variant, g.task).answers if isinstance(g, G.MinOutputMatch) else None
    if ag is not None and ag.agreement_rate is not None:
        detail += (f"; for information (not gated): chosen answers ({ag.pipeline}) agree on "
                   f"{ag.agreed}/{ag.compared} ({ag.agreement_rate:.4f})")
    return result(g, None, g.limit, None, detail, ag.disagreements if ag is not None else ())


def evaluate_gate(g: G.Gate, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """Judge one planned gate against the measurements.

    A gate whose variant, baseline variant or task did not run is NOT RUN with the
    reason; a gate of :data:`PROMPT_ONLY_KINDS` on a task that only scores prompts
    (:attr:`Measurements.prompt_only`) is NOT RUN too. Otherwise the judge registered
    for the gate's class in :data:`JUDGES` decides (each judge's docstring, and each
    gate class in :mod:`harness.config.gates`, says its semantics; docs/gates.md).

    Args:
        g: a planned gate.
        m: the config's measurements.
        adjusted_p: the Holm-adjusted p-value of a ``max_accuracy_drop`` gate in a
            Holm family (:func:`holm_p_values`), else None.

    Returns:
        :class:`GateResult`; ``passed`` None when its variant or task did not run.

    Raises:
        TypeError: no judge is registered for the gate's class (fails closed: a gate
            this evaluator does not know is never skipped).
    """
    judge = JUDGES.get(type(g))
    if judge is None:
        raise TypeError(f"gate {getattr(g, 'id', g)!r}: no judge for gate class {type(g).__name__} "
                        f"(kind {getattr(g, 'kind', None)!r}); register one with @judges in its family's module of "
                        "harness.analysis.judges")
    reason = _not_run(g, m)
    if reason is not None:
        return result(g, None, g.limit, None, f"not run: {reason}")
    skipped = _prompt_only(g, m)
    if skipped is not None:
        return skipped
    return judge(g, m, adjusted_p)



def evaluate_gates(gates: Sequence[G.Gate], m: Measurements) -> list[GateResult]:
    """Judge every gate of one config, in plan order (the ``max_accuracy_drop`` gates
    that ask for it with Holm-adjusted p-values, :func:`holm_p_values`)."""
    adj = holm_p_values(gates, m)
    return [evaluate_gate(g, m, adj.get(g.id)) for g in gates]


def baseline_notes(gates: Sequence[G.Gate], m: Measurements) -> list[str]:
    """Why some planned baseline gates are not judged against ``m.baseline``: variants or
    tasks the baseline does not have (a new variant must not fail a run), or a
    baseline without a mean acceptance length; and a change of config pipeline."""
    b = m.baseline
    if b is None:
        return []
    notes = []
    seen = set()
    for g in gates:
        if isinstance(g, G.BaselineReadable):
            continue
        bt = b.task(g.variant, g.task)
        if bt is None and (g.variant, g.task) not in seen:
            seen.add((g.variant, g.task))
            notes.append(f"{g.variant}/{g.task}: not in the baseline, not gated against it")
        elif bt is not None and isinstance(g, G.BaselineAcceptanceLengthDrop) and (
                bt.spec_decode is None or bt.spec_decode.mean_acceptance_length is None):
            notes.append(f"{g.variant}/{g.task}: the baseline has no mean acceptance length, not gated")
        elif bt is not None and isinstance(g, G.BaselinePositionAcceptanceDrop) and not _has_positions(bt):
            notes.append(f"{g.variant}/{g.task}: the baseline has no per-position acceptance, not gated")
    return notes



def judged_baseline_gates(gates: Sequence[G.Gate], m: Measurements) -> list[GateResult]:
    """Judge the planned baseline gates that the stored baseline can judge (see
    :func:`baseline_notes` for the ones it cannot). No baseline: no verdicts."""
    b = m.baseline
    if b is None:
        return [evaluate_gate(g, m) for g in gates if isinstance(g, G.BaselineReadable) and m.baseline_error]
    out = []
    for g in gates:
        if isinstance(g, G.BaselineReadable):
            continue
        bt = b.task(g.variant, g.task)
        if bt is None:
            continue
        if isinstance(g, G.BaselineAcceptanceLengthDrop) and (
                bt.spec_decode is None or bt.spec_decode.mean_acceptance_length is None):
            continue
        if isinstance(g, G.BaselinePositionAcceptanceDrop) and not _has_positions(bt):
            continue
        out.append(evaluate_gate(g, m))
    return out
