"""Gate verdicts: each planned gate (:mod:`harness.config.gates`) judged against what was measured.

One judge per gate class, registered by type in :data:`JUDGES` with :func:`judges`;
:func:`evaluate_gate` dispatches by the gate's class and fails closed on a class with no
judge. Every gate result (:class:`harness.records.run_record.GateResult`) carries its id,
the observed value, the limit and a verdict (``passed``: True, False, or None when it
could not be judged because its task or variant did not run). A gate that cannot be
judged is never reported as passed. A judge reads only the planned gate and the typed
measurements (:mod:`harness.analysis.measurements`): every setting a gate needs
(pipeline, alpha, limits) is on the gate. The verdict of every drop gate (the drop
within its limit and, where tested, not significant) is :func:`drop_verdict`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from harness.analysis.familywise import holm_adjust
from harness.analysis.measurements import Measurements
from harness.analysis.sampled import sampled_verdict
from harness.analysis.scoring import TaskScore, correctness
from harness.analysis.stats import floor_margin, paired_comparison, two_proportion_p
from harness.config import gates as G
from harness.records.baselines import BaselineTask
from harness.records.measures import (
    AnswerAgreementRecord,
    DivergenceReportRecord,
    NoiseRecord,
    OutputMatchRecord,
    SpecDecodeRecord,
)
from harness.records.run_record import GateResult
from harness.records.samples import Sample

#: A judge: ``(gate, measurements, Holm-adjusted p-value or None) -> GateResult``.
Judge = Callable[[Any, Measurements, "float | None"], GateResult]

#: gate class -> its judge, filled by :func:`judges`; every class of the
#: :data:`harness.config.gates.Gate` union has one (a test walks the union).
JUDGES: dict[type, Judge] = {}

_J = TypeVar("_J", bound=Callable[..., GateResult])


def judges(gate_class: type) -> Callable[[_J], _J]:
    """Decorator: register the decorated function as the judge of ``gate_class``.

    Raises:
        TypeError: ``gate_class`` already has a judge (one judge per gate class).
    """
    def register(fn: _J) -> _J:
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


def _result(g: G.Gate, observed, limit, passed, detail, questions=(), baseline: str | None = None) -> GateResult:
    return GateResult(
        id=g.id, kind=g.kind.value, config=g.config, variant=g.variant, task=g.task,
        baseline=baseline if baseline is not None else g.baseline, op=g.op, observed=observed,
        limit=limit, passed=passed, detail=detail, questions=tuple(questions),
    )


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
PROMPT_ONLY_KINDS = (G.DraftsObserved, G.MinAcceptanceLength, G.MaxAcceptanceLengthDrop, G.MinOutputMatch,
                     G.BaselineAcceptanceLengthDrop, G.MaxTruncationRate, G.MaxPositionAcceptanceDrop,
                     G.BaselinePositionAcceptanceDrop, G.SampledEquivalence)


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
    return _result(g, None, g.limit, None, detail, ag.disagreements if ag is not None else ())


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
                        f"(kind {getattr(g, 'kind', None)!r}); register one with @judges in harness.analysis.gates")
    reason = _not_run(g, m)
    if reason is not None:
        return _result(g, None, g.limit, None, f"not run: {reason}")
    skipped = _prompt_only(g, m)
    if skipped is not None:
        return skipped
    return judge(g, m, adjusted_p)


# ---------------------------------------------------------------------- per variant


@judges(G.VariantEffective)
def judge_variant_effective(g: G.VariantEffective, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """``variant_effective``: every requested setting took effect, or every mismatch is
    declared expected on this platform (``expected_effective``), and the model runner
    passes :func:`runner_check`. Facts that could not be read fail it (the check that
    the variant ran as asked must not vanish), unless the variant declares
    ``engine_facts: not_reported``: then NOT RUN."""
    vm = m.variant(g.variant)
    eff = vm.effectiveness
    if eff is None:
        why = vm.engine_facts_error or "the effective configuration was not read"
        if g.engine_facts == "not_reported":
            return _result(g, None, None, None, f"not run: the config declares that the engine cannot "
                           f"report its effective configuration (engine_facts: not_reported); {why}")
        return _result(g, None, None, False, f"cannot tell whether the variant ran as asked: {why}")
    runner_fail, runner_note = runner_check(g, m)
    if runner_fail:
        return _result(g, 0.0, None, False, runner_fail)
    if eff.effective:
        return _result(g, 1.0, None, True, "every requested setting is effective" + runner_note)
    mism = ", ".join(
        f"{k}: requested {v['requested']}, effective {v['effective']}" for k, v in eff.mismatches.items()
    )
    if eff.expected_on_platform:
        return _result(g, 0.0, None, True, f"not effective, declared expected on this platform ({mism})"
                       + runner_note)
    return _result(g, 0.0, None, False, f"variant did not run as asked: {mism}")


def runner_check(g: G.VariantEffective, m: Measurements) -> tuple[str, str]:
    """``(failure, note)`` of the model-runner part of ``variant_effective``.

    Fails (a non-empty ``failure``) when the variant's runner is ``unknown`` (fails
    closed like any unreadable engine fact), differs from its ``model_runner``, or
    differs from the runner of a variant it is compared with (``same_runner_as``; a
    comparison with ``allow_mixed_runners`` is not listed there). ``note`` names the
    runner for the passing detail. Nothing is checked when runner facts were not
    collected (``m.runners_collected`` false).
    """
    if not m.runners_collected:
        return "", ""
    f = m.variant(g.variant).runner
    if f is None or f.runner == "unknown":
        return ((f"model runner unknown: {f.detail if f else 'not recorded'} (a variant whose runner is not "
                "known cannot be compared with another; load evalrun's plugin in the server's environment)"), "")
    if g.model_runner is not None and f.runner != g.model_runner:
        return ((f"model runner: requested {g.model_runner} (VLLM_USE_V2_MODEL_RUNNER), the engine ran "
                f"{f.runner} ({f.source}: {f.detail})"), "")
    peers = [(peer, m.variant(peer).runner) for peer in g.same_runner_as]
    bad = [(peer, pf) for peer, pf in peers if pf is not None and pf.runner not in ("unknown", f.runner)]
    if bad:
        others = "; ".join(f"{peer} ran {pf.runner} ({pf.source}: {pf.detail})" for peer, pf in bad)
        return ((f"model runners differ between compared variants: {g.variant} ran {f.runner} ({f.source}: "
                f"{f.detail}); {others}: their differences are two code paths, not speculative decoding "
                "(set allow_mixed_runners: true on the comparison to accept it)"), "")
    return "", f"; model runner {f.runner} ({f.source})"


# ---------------------------------------------------------------------- per (variant, task)


def _score(g: G.Gate, m: Measurements) -> tuple[TaskScore | None, GateResult | None]:
    """The gate's task score, or the NOT RUN result when there is none."""
    sc = m.task(g.variant, g.task).score
    return sc, (_result(g, None, g.limit, None, "not run: no score") if sc is None else None)


@judges(G.AccuracyFloor)
def judge_accuracy_floor(g: G.AccuracyFloor, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """``accuracy_floor``: accuracy >= threshold - tolerance - margin, where margin is
    :func:`harness.analysis.stats.floor_margin` when the gate gives
    ``calibration_questions`` larger than the run's scored questions, else 0. A pipeline
    that was not computed is NOT RUN; no successful request fails. A failing floor names
    the truncated share above :data:`TRUNCATION_NOTE_RATE`."""
    sc, none = _score(g, m)
    if sc is None:
        return none  # type: ignore[return-value]
    ps = sc.accuracy.get(g.pipeline)
    if ps is None:
        return _result(g, None, g.limit, None,
                       f"not run: answer pipeline {g.pipeline} was not computed "
                       f"(computed: {', '.join(sc.accuracy) or 'none'}; lm-eval's pipelines need "
                       "lm-eval, a dependency of evalrun, importable: see provenance.lm_eval.error)")
    if ps.accuracy is None:
        return _result(g, None, g.limit, False, "no request succeeded: accuracy cannot be computed")
    margin = 0.0
    cal = g.calibration_questions
    if cal is not None and ps.scored < cal:
        margin = floor_margin(ps.scored, cal, g.accuracy_threshold)
    limit = round(g.limit - margin, 6)
    ok = ps.accuracy >= limit
    extra = (f" (floor {g.limit} widened by {margin:.4f} for {ps.scored} of {cal} calibration questions)"
             if margin else "")
    return _result(
        g, ps.accuracy, limit, ok,
        f"{g.pipeline} accuracy {ps.accuracy:.4f} ({ps.correct}/{ps.scored}) vs floor {limit:.4f}{extra}"
        + ("" if ok else truncation_note(sc, g.variant)),
    )


@judges(G.MaxErrorRate)
def judge_max_error_rate(g: G.MaxErrorRate, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """``max_error_rate``: failed requests / requests <= limit."""
    sc, none = _score(g, m)
    if sc is None:
        return none  # type: ignore[return-value]
    ok = sc.error_rate <= g.limit
    return _result(
        g, sc.error_rate, g.limit, ok,
        f"{sc.error_count} of {sc.num_requests} requests failed (error rate {sc.error_rate:.3f}, limit {g.limit})",
    )


@judges(G.MaxTruncationRate)
def judge_max_truncation_rate(g: G.MaxTruncationRate, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """``max_truncation_rate``: completions cut by ``max_tokens`` / successful
    completions <= limit; no successful request fails."""
    sc, none = _score(g, m)
    if sc is None:
        return none  # type: ignore[return-value]
    if sc.truncated_rate is None:
        return _result(g, None, g.limit, False, "no request succeeded: truncation cannot be computed")
    ok = sc.truncated_rate <= g.limit
    n = sc.num_requests - sc.error_count
    return _result(
        g, sc.truncated_rate, g.limit, ok,
        f"{sc.truncated} of {n} completions cut by max_tokens (truncated share {sc.truncated_rate:.3f}, limit "
        f"{g.limit})",
        sc.truncated_ids if not ok else (),
    )


def _drafts(g: G.Gate, m: Measurements):
    """The gate's speculative metrics with at least one draft, or the failing result."""
    tm = m.task(g.variant, g.task)
    sm = tm.spec
    if sm is None:
        err = tm.spec_error or "no speculative-decoding metrics"
        return None, _result(g, None, g.limit, False, f"speculative metrics missing: {err}")
    if sm.drafts <= 0:
        return None, _result(g, 0.0, g.limit, False, "no drafts observed: speculative decoding did not run")
    return sm, None


@judges(G.DraftsObserved)
def judge_drafts_observed(g: G.DraftsObserved, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """``drafts_observed``: a speculative variant reported at least one draft."""
    sm, failed = _drafts(g, m)
    if sm is None:
        return failed
    # counters are integral counts (prometheus gives floats): report an integer
    return _result(g, round(sm.drafts), g.limit, True, f"{sm.drafts:.0f} drafts, {sm.draft_tokens:.0f} draft tokens")


@judges(G.ShapeProven)
def judge_shape_proven(g: G.ShapeProven, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """``shape_proven``: the task's shape proof exists and names no problem."""
    proof = m.task(g.variant, g.task).shape
    if proof is None:
        return _result(g, None, None, False, "no shape proof recorded: the shape cannot be shown to have happened")
    return _result(g, None, None, not proof.problems, proof.describe())


@judges(G.MinAcceptanceLength)
def judge_min_acceptance_length(g: G.MinAcceptanceLength, m: Measurements,
                                adjusted_p: float | None = None) -> GateResult:
    """``min_acceptance_length``: mean acceptance length >= limit; no drafts fails."""
    sm, failed = _drafts(g, m)
    if sm is None:
        return failed
    mal = sm.mean_acceptance_length
    ok = mal >= g.limit
    return _result(
        g, mal, g.limit, ok,
        f"mean acceptance length {mal:.3f} (1 + {sm.accepted_tokens:.0f}/{sm.drafts:.0f}) vs minimum {g.limit}",
    )


# ---------------------------------------------------------------------- per comparison


@judges(G.MaxAccuracyDrop)
def judge_max_accuracy_drop(g: G.MaxAccuracyDrop, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """``max_accuracy_drop``, one-sided (:func:`drop_verdict`): fails when baseline -
    candidate accuracy on the paired questions (under the gate's pipeline) exceeds the
    limit, or when the candidate is significantly worse (exact one-sided McNemar p <
    alpha; with ``adjusted_p`` given, the Holm-adjusted p-value of :func:`holm_p_values`
    is compared instead). An improvement never fails. No paired question: NOT RUN."""
    pc = m.paired(g.baseline, g.variant, g.task, g.pipeline)
    if pc is None:
        return _result(g, None, g.limit, None, "not run: no paired questions")
    drop = pc.accuracy_a - pc.accuracy_b
    holm = adjusted_p is not None
    v = drop_verdict(drop, g.limit, pc.one_sided_p_value if adjusted_p is None else adjusted_p, g.alpha,
                     worse="significantly worse", test="one-sided McNemar " + ("Holm-adjusted " if holm else ""))
    detail = (
        f"{g.pipeline}: {g.baseline} {pc.accuracy_a:.4f} -> {g.variant} {pc.accuracy_b:.4f} on {pc.n} paired "
        "questions; "
        f"{len(pc.a_only)} right only in {g.baseline}, {len(pc.b_only)} right only in {g.variant}; "
        f"one-sided p={pc.one_sided_p_value:.4g}"
        + (f" (Holm-adjusted {adjusted_p:.4g})" if holm else "")
    )
    if not v.passed:
        detail += v.failure + truncation_note(m.task(g.variant, g.task).score, g.variant)
    return _result(g, drop, g.limit, v.passed, detail, pc.a_only if not v.passed else ())


@judges(G.MinOutputMatch)
def judge_min_output_match(g: G.MinOutputMatch, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """``min_output_match``. With ``near_tie_nats`` and a :class:`DivergenceReportRecord`: share
    of questions without an unexplained divergence >= limit
    (:func:`_output_match_classified`); the noise test is then not used. Otherwise the
    share of identical completion token ids >= limit; with a noise reference
    (:class:`NoiseRecord`) whose noise is above zero, the limit is replaced by a test:
    fails when the candidate mismatches significantly more often than the noise
    (one-sided p < alpha). Zero observed noise means the engine is deterministic on
    these prompts, so the limit applies unchanged. Nothing comparable: NOT RUN when no
    match was measured, failed when one was but compared no question."""
    cm = m.comparison(g.baseline, g.variant, g.task)
    om = cm.match
    if om is None or om.output_match_rate is None:
        return _result(g, None, g.limit, False if om is not None else None, "no question could be compared")
    dv = cm.divergences if g.near_tie_nats is not None else None
    if dv is not None:
        return _output_match_classified(g, om, dv, cm.answers)
    return _output_match_exact(g, om, cm.noise, cm.answers)


def _output_match_exact(g: G.MinOutputMatch, om: OutputMatchRecord, nz: NoiseRecord | None,
                        ag: AnswerAgreementRecord | None) -> GateResult:
    """``min_output_match`` on identical token ids, judged against the noise when it shows any
    (``om.output_match_rate`` is not None: the caller judged that case)."""
    rate = om.output_match_rate if om.output_match_rate is not None else 0.0
    ok = rate >= g.limit
    detail = f"{om.matched}/{om.compared} completions identical (output match {om.output_match_rate:.4f})"
    if om.past_stop:
        ex = om.past_stop[0]
        detail += (f"; {len(om.past_stop)} of them identical only up to the stop (ids past the stop "
                   f"differ, not a divergence; e.g. {ex.question_id}: {ex.side} has {ex.extra_ids} extra ids)")
    limit: float | None = g.limit
    if nz is not None and nz.noise_rate > 0:
        ok = nz.p_value >= g.alpha
        limit = None
        src = (f"{g.baseline} rerun: {nz.noise_mismatched}/{nz.noise_compared} differ"
               if nz.source == "rerun" else f"stored noise_mismatch_rate {nz.noise_rate:.4f}")
        detail += (
            f"; judged against noise ({src}, rate {nz.noise_rate:.4f}) instead of the limit {g.limit}: "
            f"candidate mismatch rate {'-' if nz.candidate_rate is None else f'{nz.candidate_rate:.4f}'}, one-sided "
            f"p={nz.p_value:.4g} "
            f"({nz.test}) {'>=' if ok else '<'} alpha {g.alpha}"
        )
    elif nz is not None:
        detail += f"; noise reference shows no mismatch ({nz.source}), so exact limit {g.limit} applies"
    if ag is not None and ag.agreement_rate is not None:
        detail += (f"; answer-level agreement ({ag.pipeline}) {ag.agreed}/{ag.compared} "
                   f"({ag.agreement_rate:.4f})")
    if om.mismatches:
        firsts = ", ".join(f"{x.question_id}@{x.first_divergence}" for x in om.mismatches[:5])
        detail += f"; first divergences: {firsts}" + (" ..." if len(om.mismatches) > 5 else "")
    qs = [x.question_id for x in om.mismatches]
    if nz is not None and nz.source == "rerun" and nz.noise_rate > 0:
        qs = list(nz.candidate_only)
    return _result(g, om.output_match_rate, limit, ok, detail, qs)


def _output_match_classified(g: G.MinOutputMatch, om: OutputMatchRecord, dv: DivergenceReportRecord,
                             ag: AnswerAgreementRecord | None) -> GateResult:
    """``min_output_match`` judged on unexplained divergences: observed = (compared -
    unexplained) / compared >= limit. Explained near-ties (and, for questions the
    reference cannot judge, divergences the baseline's rerun shows too) are reported
    beside it; the failing questions are the unexplained ones, worst first."""
    un, ex, nz = dv.unexplained, dv.explained, dv.noise
    n = om.compared
    rate = (n - len(un)) / n
    ok = rate >= g.limit
    detail = (f"{n - len(un)}/{n} questions without an unexplained divergence ({rate:.4f}); "
              f"{om.matched}/{n} identical (output match {om.output_match_rate:.4f}); "
              f"judged by {dv.reference}'s top-k log-probabilities, near-tie <= {dv.near_tie_nats:g} nats: "
              f"{len(un)} unexplained, {len(ex)} explained")
    if nz:
        detail += f", {len(nz)} explained by the baseline's rerun (no reference distribution there)"
    if un:
        detail += "; unexplained (worst first): " + ", ".join(
            f"{d.question_id}@{d.position} " + ("gap " + (">" if not d.in_top_k else "") + f"{d.gap_nats:.2f}"
                                                  if d.gap_nats is not None else "(" + d.reason.split(';')[0] + ")")
            for d in un[:5]) + (" ..." if len(un) > 5 else "")
    if ex:
        detail += "; explained: " + ", ".join(f"{d.question_id}@{d.position} gap {d.gap_nats:.2f}" for d in ex[:5]) \
            + (" ..." if len(ex) > 5 else "")
    if ag is not None and ag.agreement_rate is not None:
        detail += f"; answer-level agreement ({ag.pipeline}) {ag.agreed}/{ag.compared} ({ag.agreement_rate:.4f})"
    return _result(g, rate, g.limit, ok, detail, [d.question_id for d in un])


@judges(G.MaxAcceptanceLengthDrop)
def judge_max_acceptance_length_drop(g: G.MaxAcceptanceLengthDrop, m: Measurements,
                                     adjusted_p: float | None = None) -> GateResult:
    """``max_acceptance_length_drop``: baseline - candidate mean acceptance length <= limit
    (:func:`drop_verdict`, no significance test); missing on either side fails."""
    a, b = m.task(g.baseline, g.task).spec, m.task(g.variant, g.task).spec
    if a is None or b is None or a.mean_acceptance_length is None or b.mean_acceptance_length is None:
        return _result(g, None, g.limit, False, "mean acceptance length missing on one side (no drafts?)")
    drop = a.mean_acceptance_length - b.mean_acceptance_length
    return _result(
        g, drop, g.limit, drop_verdict(drop, g.limit).passed,
        f"mean acceptance length {g.baseline} {a.mean_acceptance_length:.3f} -> {g.variant} "
        f"{b.mean_acceptance_length:.3f}" + rise_note(drop, g.limit),
    )


def rise_note(drop: float, limit: float) -> str:
    """``"; note: ..."`` when the mean acceptance length ROSE by more than the gate's band
    (``-drop > limit``): reported beside the drop gate, never failing it (an improved
    drafter rises too), because a rise can be a bug as well (miscounted drafts or accepted
    tokens, a variant that should accept alike); else ``""``."""
    if -drop <= limit:
        return ""
    return (f"; note: mean acceptance length ROSE by {-drop:.3f} tokens, beyond the band +-{limit}: a rise can be a "
            "bug too (drafts or accepted tokens miscounted, or variants that should accept alike); not failed")


def _spec_counts(sd: SpecDecodeRecord) -> tuple[float, list[float]]:
    """Drafts and accepted_per_pos counts of a record (rates x drafts, rounded: counters
    are integral)."""
    return sd.drafts, [float(round((r or 0.0) * sd.drafts)) for r in sd.per_position_acceptance]


def _p_or_one(p: float | None) -> float:
    return 1.0 if p is None else p


def position_verdict(base: SpecDecodeRecord, cand: SpecDecodeRecord, rtol: float, alpha: float,
                     names: tuple[str, str]) -> tuple[float | None, bool, str]:
    """The per-position acceptance verdict of ``cand`` against ``base`` (both with drafts > 0).

    For each draft position i with rates r_b = accepted_per_pos_b[i] / drafts_b and r_c
    likewise: the position FAILS when ``r_c < (1 - rtol) r_b`` (vLLM's per-position floor)
    and the drop is significant: the one-sided pooled two-proportion z p-value
    (:func:`harness.analysis.stats.two_proportion_p`), Holm-adjusted over the positions
    (:func:`holm_adjust`), is below ``alpha``. A position with ``r_b = 0`` cannot drop. A
    rise beyond ``(1 + rtol) r_b``, significant the same way, is reported beside (never
    failing). Positions missing on one side count 0.

    Returns:
        ``(worst relative drop (r_b - r_c) / r_b over positions with r_b > 0, or None;
        passed; detail naming every failing position with both rates)``.
    """
    (db, ab), (dc, ac) = _spec_counts(base), _spec_counts(cand)
    k = max(len(ab), len(ac))
    if k == 0:
        return None, False, "no per-position acceptance counters on either side"
    ab, ac = ab + [0.0] * (k - len(ab)), ac + [0.0] * (k - len(ac))
    adj_drop = holm_adjust([_p_or_one(two_proportion_p(ab[i], db, ac[i], dc)) for i in range(k)])
    adj_rise = holm_adjust([_p_or_one(two_proportion_p(ac[i], dc, ab[i], db)) for i in range(k)])
    rates = [(ab[i] / db, ac[i] / dc) for i in range(k)]
    rel = [(rb - rc) / rb for rb, rc in rates if rb > 0]
    failed = [f"position {i}: {rb:.4f} -> {rc:.4f} (below {(1 - rtol) * rb:.4f} = (1 - {rtol:g}) x {rb:.4f}; "
              f"Holm-adjusted one-sided p={adj_drop[i]:.3g} < alpha {alpha:g})"
              for i, (rb, rc) in enumerate(rates) if rb > 0 and rc < (1 - rtol) * rb and adj_drop[i] < alpha]
    rose = [f"position {i} rose {rb:.4f} -> {rc:.4f} (Holm-adjusted p={adj_rise[i]:.3g})"
            for i, (rb, rc) in enumerate(rates) if rc > (1 + rtol) * rb and adj_rise[i] < alpha]
    detail = (f"per-position acceptance {names[0]} -> {names[1]}: "
              + ", ".join(f"pos {i} {rb:.4f} -> {rc:.4f}" for i, (rb, rc) in enumerate(rates))
              + f" ({db:.0f} and {dc:.0f} drafts; band {rtol:g} relative)")
    if failed:
        detail += "; FAILED: " + "; ".join(failed)
    if rose:
        detail += ("; note: beyond the band upwards, a rise can be a bug too (not failed): " + "; ".join(rose))
    return (max(rel) if rel else None), not failed, detail


@judges(G.MaxPositionAcceptanceDrop)
def judge_max_position_acceptance_drop(g: G.MaxPositionAcceptanceDrop, m: Measurements,
                                       adjusted_p: float | None = None) -> GateResult:
    """``max_position_acceptance_drop``: :func:`position_verdict` of the candidate against the
    baseline variant; speculative metrics missing or without drafts on either side fail."""
    a, b = m.task(g.baseline, g.task).spec, m.task(g.variant, g.task).spec
    if a is None or b is None or a.drafts <= 0 or b.drafts <= 0:
        return _result(g, None, g.limit, False, "per-position acceptance missing on one side (no drafts?)")
    observed, ok, detail = position_verdict(a, b, g.limit, g.alpha, (g.baseline or "", g.variant))
    return _result(g, observed, g.limit, ok, detail)


@judges(G.SampledEquivalence)
def judge_sampled_equivalence(g: G.SampledEquivalence, m: Measurements,
                              adjusted_p: float | None = None) -> GateResult:
    """``sampled_equivalence``: :func:`harness.analysis.sampled.sampled_verdict`."""
    return _result(g, *sampled_verdict(g, m, adjusted_p))


# ---------------------------------------------------------------------- against the stored baseline


def _stored(g: G.Gate, m: Measurements) -> tuple[BaselineTask | None, str | None]:
    """The stored baseline's task of the gate's variant and task (None when absent) and
    the label ``baseline:<run id>`` a baseline gate reports as its baseline."""
    b = m.baseline
    if b is None:
        return None, None
    return b.task(g.variant, g.task), f"baseline:{b.source_run.run_id}"


def _no_stored(g: G.Gate, label: str | None) -> GateResult:
    return _result(g, None, g.limit, None, "not run: no stored baseline for this variant and task", baseline=label)


@judges(G.BaselineAccuracyDrop)
def judge_baseline_accuracy_drop(g: G.BaselineAccuracyDrop, m: Measurements,
                                 adjusted_p: float | None = None) -> GateResult:
    """``baseline_accuracy_drop``: the accuracy drop since the stored baseline
    (:mod:`harness.records.baselines`) <= limit and not significantly lower
    (:func:`drop_verdict`; the test is :func:`_baseline_accuracy`'s)."""
    bt, label = _stored(g, m)
    if bt is None:
        return _no_stored(g, label)
    cur = m.task(g.variant, g.task).samples
    if cur is None:
        return _result(g, None, g.limit, None, "not run: no samples", baseline=label)
    return _baseline_accuracy(g, bt, cur, label)


def _baseline_accuracy(g: G.BaselineAccuracyDrop, bt: BaselineTask, cur: Sequence[Sample],
                       label: str | None) -> GateResult:
    """Accuracy against the stored baseline. With b = questions right in the baseline and
    wrong now, c = the reverse, over the question ids present in both with the same
    prompt hash, drop = (b - c)/n and the one-sided exact McNemar p = P(Binomial(b + c,
    1/2) >= b) (McNemar 1947); without paired data drop = p_base - p_now and p is
    Fisher's exact one-sided p of the 2x2 table [[correct_base, wrong_base],
    [correct_now, wrong_now]] (alternative: the baseline's odds of a right answer are
    greater; Fisher 1935, ``scipy.stats.fisher_exact``)."""
    from scipy import stats as _st

    pipe = g.pipeline
    base = bt.correctness(pipe)
    now_ok = [s for s in cur if s.ok]
    now_hash = {s.question_id: s.prompt_hash for s in now_ok}
    now = correctness(now_ok, pipe)
    same = {q for q in set(base) & set(now) if base[q][0] == now_hash[q]}
    changed_prompt = len((set(base) & set(now)) - same)
    if same:
        pc = paired_comparison({q: base[q][1] for q in same}, {q: now[q] for q in same})
        drop = pc.accuracy_a - pc.accuracy_b
        p = pc.one_sided_p_value
        how = (f"paired on {pc.n} questions: {len(pc.a_only)} right only in the baseline, "
               f"{len(pc.b_only)} right only now; one-sided exact McNemar p={p:.4g}")
        a_acc, b_acc, lost = pc.accuracy_a, pc.accuracy_b, pc.a_only
    else:
        cb, nb = int(bt.correct.get(pipe) or 0), int(bt.scored.get(pipe) or 0)
        cn, nn = sum(now.values()), len(now)
        if nb == 0 or nn == 0:
            return _result(g, None, g.limit, False,
                           "no scored question on one side: accuracy cannot be compared with the baseline",
                           baseline=label)
        a_acc, b_acc = cb / nb, cn / nn
        drop = a_acc - b_acc
        p = float(_st.fisher_exact([[cb, nb - cb], [cn, nn - cn]], alternative="greater")[1])
        how = (f"unpaired (baseline has no per-question data for these prompts): {cb}/{nb} vs {cn}/{nn}; "
               f"one-sided Fisher exact p={p:.4g}")
        lost = ()
    v = drop_verdict(drop, g.limit, p, g.alpha, worse="significantly lower")
    detail = f"{pipe} accuracy baseline {a_acc:.4f} -> now {b_acc:.4f} (drop {drop:.4f}); {how}"
    if changed_prompt:
        detail += f"; {changed_prompt} question(s) have a different prompt than in the baseline and are not paired"
    return _result(g, drop, g.limit, v.passed, detail + v.failure, lost if not v.passed else (), baseline=label)


@judges(G.BaselineAcceptanceLengthDrop)
def judge_baseline_acceptance_length_drop(g: G.BaselineAcceptanceLengthDrop, m: Measurements,
                                          adjusted_p: float | None = None) -> GateResult:
    """``baseline_acceptance_length_drop``: stored - current mean acceptance length <=
    limit (:func:`drop_verdict`); a baseline without one is NOT RUN, none now fails."""
    bt, label = _stored(g, m)
    if bt is None:
        return _no_stored(g, label)
    base_mal = bt.spec_decode.mean_acceptance_length if bt.spec_decode else None
    sm = m.task(g.variant, g.task).spec
    if base_mal is None:
        return _result(g, None, g.limit, None, "not run: the baseline has no mean acceptance length", baseline=label)
    if sm is None or sm.mean_acceptance_length is None:
        return _result(g, None, g.limit, False, f"mean acceptance length missing now (baseline {base_mal:.3f})",
                       baseline=label)
    drop = base_mal - sm.mean_acceptance_length
    ok = drop_verdict(drop, g.limit).passed
    ci = bt.mean_acceptance_length_ci
    return _result(
        g, drop, g.limit, ok,
        f"mean acceptance length baseline {base_mal:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
        + f" -> now {sm.mean_acceptance_length:.3f}: drop {drop:.3f} " + ("<=" if ok else ">") + f" {g.limit}"
        + rise_note(drop, g.limit),
        baseline=label,
    )


@judges(G.BaselinePositionAcceptanceDrop)
def judge_baseline_position_acceptance_drop(g: G.BaselinePositionAcceptanceDrop, m: Measurements,
                                            adjusted_p: float | None = None) -> GateResult:
    """``baseline_position_acceptance_drop``: :func:`position_verdict` of the variant now
    against its stored baseline; a baseline without drafts is NOT RUN, none now fails."""
    bt, label = _stored(g, m)
    if bt is None:
        return _no_stored(g, label)
    base = bt.spec_decode
    if base is None or base.drafts <= 0 or not base.per_position_acceptance:
        return _result(g, None, g.limit, None, "not run: the baseline has no per-position acceptance", baseline=label)
    sm = m.task(g.variant, g.task).spec
    if sm is None or sm.drafts <= 0:
        return _result(g, None, g.limit, False, "per-position acceptance missing now (no drafts?)", baseline=label)
    observed, ok, detail = position_verdict(base, sm, g.limit, g.alpha, ("baseline", "now"))
    return _result(g, observed, g.limit, ok, detail, baseline=label)


@judges(G.BaselineReadable)
def judge_baseline_readable(g: G.BaselineReadable, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """``baseline_readable``: the stored baseline file was read (``m.baseline_error`` None)."""
    ok = m.baseline_error is None
    return _result(g, None, None, ok, "the stored baseline was read" if ok else m.baseline_error)


# ---------------------------------------------------------------------- a config's gates


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


def _has_positions(bt: BaselineTask) -> bool:
    """The stored task has drafts and per-position acceptance to judge against."""
    sd = bt.spec_decode
    return sd is not None and sd.drafts > 0 and bool(sd.per_position_acceptance)


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
