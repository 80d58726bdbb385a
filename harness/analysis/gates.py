"""Gate verdicts: each planned gate (:mod:`harness.config.gates`) judged against what was measured.

Every gate result (:class:`harness.records.run_record.GateResult`) carries its id, the
observed value, the limit and a verdict (``passed``: True, False, or None when it could
not be judged because its task or variant did not run). A gate that cannot be judged is
never reported as passed. The evaluator reads only the planned gate and the
measurements: every setting a gate needs (pipeline, alpha, limits) is on the gate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from harness.config import gates as G
from harness.engine.info import Effectiveness, ModelRunnerFact
from harness.analysis.divergence import DivergenceReport
from harness.engine.metrics import SpecDecodeMetrics
from harness.records.baselines import BaselineDoc, BaselineTask
from harness.records.run_record import GateResult
from harness.records.samples import Sample
from harness.analysis.scoring import AnswerAgreement, OutputMatch, TaskScore, committed_divergence, correctness
from harness.analysis.stats import PairedComparison, floor_margin, mcnemar_exact, paired_comparison


@dataclass(frozen=True)
class OutputNoise:
    """A candidate's greedy-output mismatches judged against baseline-vs-baseline noise.

    Attributes:
        source: ``"rerun"`` (the baseline ran twice in this run, ``noise_runs: 2``) or
            ``"stored"`` (the comparison's ``noise_mismatch_rate``).
        noise_compared: questions compared baseline pass 1 vs pass 2 (rerun), else None.
        noise_mismatched: of those, questions whose token ids differ (rerun), else None.
        noise_rate: baseline-vs-baseline mismatch rate (fraction of questions).
        noise_first_divergences: ``(question id, first differing token index)`` per
            noise mismatch (rerun), else empty.
        compared: questions compared for the test (for a rerun: compared in both the
            candidate comparison and the noise comparison).
        candidate_mismatched: candidate-vs-baseline mismatches among ``compared``.
        candidate_rate: ``candidate_mismatched / compared``.
        candidate_only: ids mismatched by the candidate but not by the noise (rerun).
        noise_only: ids mismatched by the noise but not by the candidate (rerun).
        test: ``"mcnemar_exact_one_sided"`` (rerun: paired over the same questions,
            H1 "the candidate mismatches more often than the noise"; b =
            |candidate_only|, c = |noise_only|, p = P(Binomial(b + c, 1/2) >= b),
            McNemar 1947 exact form) or ``"binomial_one_sided"`` (stored rate r0:
            p = P(Binomial(compared, r0) >= candidate_mismatched), the exact binomial
            test, ``scipy.stats.binomtest``; r0 is treated as known).
        p_value: the one-sided p-value of ``test``.
    """

    source: str
    noise_compared: int | None
    noise_mismatched: int | None
    noise_rate: float
    noise_first_divergences: tuple[tuple[str, int], ...]
    compared: int
    candidate_mismatched: int
    candidate_rate: float | None
    candidate_only: tuple[str, ...]
    noise_only: tuple[str, ...]
    test: str
    p_value: float


def output_noise_rerun(
    baseline: Sequence[Sample], rerun: Sequence[Sample], candidate: Sequence[Sample]
) -> OutputNoise:
    """Judge the candidate's output mismatches against a rerun of the baseline.

    Args:
        baseline: the baseline variant's samples (pass 1), one task.
        rerun: the same variant's samples of the same task from pass 2.
        candidate: the candidate variant's samples of the same task.

    Returns:
        :class:`OutputNoise`. Only questions that succeeded with token ids in all
        three are compared; per question, "candidate mismatch" = candidate token ids
        differ from pass 1, "noise mismatch" = pass 2 differs from pass 1; the paired
        exact one-sided McNemar test is then taken over those questions (see
        :class:`OutputNoise` ``test``). ``noise_*`` counts are over the questions
        compared between pass 1 and pass 2.
    """
    def usable(x: Sample | None) -> bool:
        return x is not None and x.ok and x.token_ids is not None

    r2 = {x.question_id: x for x in rerun}
    cd = {x.question_id: x for x in candidate}
    noise_cmp, noise_div = 0, []
    both, cand_only, noise_only, cand_mm = 0, [], [], 0
    for a in baseline:
        b2, c = r2.get(a.question_id), cd.get(a.question_id)
        if not (usable(a) and usable(b2)):
            continue
        noise_cmp += 1
        dn = committed_divergence(a, b2)
        if dn is not None:
            noise_div.append((a.question_id, dn))
        if not usable(c):
            continue
        both += 1
        dc = committed_divergence(a, c)
        cand_mm += dc is not None
        if dc is not None and dn is None:
            cand_only.append(a.question_id)
        elif dc is None and dn is not None:
            noise_only.append(a.question_id)
    return OutputNoise(
        source="rerun",
        noise_compared=noise_cmp,
        noise_mismatched=len(noise_div),
        noise_rate=len(noise_div) / noise_cmp if noise_cmp else 0.0,
        noise_first_divergences=tuple(noise_div),
        compared=both,
        candidate_mismatched=cand_mm,
        candidate_rate=cand_mm / both if both else None,
        candidate_only=tuple(cand_only),
        noise_only=tuple(noise_only),
        test="mcnemar_exact_one_sided",
        p_value=mcnemar_exact(len(cand_only), len(noise_only), alternative="greater"),
    )


def output_noise_stored(candidate: OutputMatch, rate: float) -> OutputNoise:
    """Judge the candidate's output mismatches against a stored noise rate ``rate``
    (fraction in [0, 1]): exact one-sided binomial test, ``P(Binomial(compared, rate)
    >= mismatched)`` by ``scipy.stats.binomtest(..., alternative="greater")``.

    Raises:
        ValueError: ``rate`` outside [0, 1].
    """
    from scipy import stats as _st

    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"noise rate must be in [0, 1], got {rate!r}")
    k, n = len(candidate.mismatches), candidate.compared
    p = float(_st.binomtest(k, n, rate, alternative="greater").pvalue) if n else 1.0
    return OutputNoise(
        source="stored", noise_compared=None, noise_mismatched=None, noise_rate=rate,
        noise_first_divergences=(), compared=n, candidate_mismatched=k,
        candidate_rate=k / n if n else None, candidate_only=(), noise_only=(),
        test="binomial_one_sided", p_value=p,
    )


@dataclass
class Measurements:
    """What a run measured for one config, keyed for the gates.

    Attributes:
        scores: ``(variant, task)`` -> :class:`TaskScore`.
        samples: ``(variant, task)`` -> that task's samples (paired gates read them
            under their own pipeline).
        spec: ``(variant, task)`` -> :class:`SpecDecodeMetrics` (speculative variants).
        spec_errors: ``(variant, task)`` -> why speculative metrics are missing.
        effectiveness: variant -> :class:`Effectiveness`.
        engine_facts_errors: variant -> why its effective configuration could not be
            read (``/server_info`` or ``/version`` unreadable); fails ``variant_effective``.
        matches: ``(baseline, candidate, task)`` -> :class:`OutputMatch`.
        not_run: ``(variant, task)`` or ``(variant, None)`` -> reason it did not run.
        noise: ``(baseline, candidate, task)`` -> :class:`OutputNoise` when the
            comparison has a noise reference (rerun or stored rate).
        baseline: the stored baseline of the config, for the baseline gates.
        answers: ``(baseline, candidate, task)`` -> :class:`AnswerAgreement` (same
            extracted answer), reported beside output match.
        prompt_only: task -> why it generates nothing (an lm_eval ``multiple_choice``
            / ``loglikelihood`` task scores prompts): its gates of :data:`PROMPT_ONLY_KINDS`
            are NOT RUN with that reason, never passed or failed.
        divergences: ``(baseline, candidate, task)`` -> :class:`DivergenceReport` when
            the comparison's divergences were judged by a reference's distribution.
        runners: variant -> :class:`ModelRunnerFact`; None when runner facts were not
            collected (the runner always collects them; then ``variant_effective``
            also requires a known runner, the one asked for, and the same runner as
            every variant it is compared with).
    """

    scores: dict[tuple[str, str], TaskScore] = field(default_factory=dict)
    samples: dict[tuple[str, str], Sequence[Sample]] = field(default_factory=dict)
    spec: dict[tuple[str, str], SpecDecodeMetrics] = field(default_factory=dict)
    spec_errors: dict[tuple[str, str], str] = field(default_factory=dict)
    effectiveness: dict[str, Effectiveness] = field(default_factory=dict)
    engine_facts_errors: dict[str, str] = field(default_factory=dict)
    matches: dict[tuple[str, str, str], OutputMatch] = field(default_factory=dict)
    not_run: dict[tuple[str, str | None], str] = field(default_factory=dict)
    noise: dict[tuple[str, str, str], OutputNoise] = field(default_factory=dict)
    baseline: BaselineDoc | None = None
    baseline_error: str | None = None
    answers: dict[tuple[str, str, str], AnswerAgreement] = field(default_factory=dict)
    prompt_only: dict[str, str] = field(default_factory=dict)
    divergences: dict[tuple[str, str, str], DivergenceReport] = field(default_factory=dict)
    runners: dict[str, ModelRunnerFact] | None = None

    def paired(self, baseline: str, candidate: str, task: str, pipeline: str) -> PairedComparison | None:
        """Paired accuracy of ``baseline`` vs ``candidate`` on ``task`` under ``pipeline``
        over the questions both scored (None when they share none)."""
        a, b = self.samples.get((baseline, task)), self.samples.get((candidate, task))
        if a is None or b is None:
            return None
        ca, cb = correctness(a, pipeline), correctness(b, pipeline)
        return paired_comparison(ca, cb) if set(ca) & set(cb) else None


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979, "A simple sequentially
    rejective multiple test procedure", Scand. J. Statist. 6:65-70).

    With p-values sorted ascending p_(1) <= ... <= p_(m), the adjusted value of the
    i-th is ``max_{j <= i} min(1, (m - j + 1) p_(j))``; rejecting where it is below
    alpha keeps the family-wise error at most alpha under any dependence.

    Args:
        p_values: m p-values in [0, 1], any order.

    Returns:
        The adjusted p-values, in the input order.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out


def holm_p_values(gates: Sequence[G.Gate], m: Measurements) -> dict[str, float]:
    """Holm-adjusted one-sided McNemar p-values of the ``max_accuracy_drop`` gates that
    ask for it (``multiple_testing: holm``) and have paired data.

    The family is those gates of one config (one call per config). Returns gate id ->
    adjusted p-value; gates outside the family are absent.
    """
    fam, raw = [], []
    for g in gates:
        if isinstance(g, G.MaxAccuracyDrop) and g.multiple_testing == "holm":
            pc = m.paired(g.baseline, g.variant, g.task, g.pipeline)
            if pc is not None:
                fam.append(g)
                raw.append(pc.one_sided_p_value)
    return {g.id: p for g, p in zip(fam, holm_adjust(raw))}


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
    for key in ((g.variant, None), (g.variant, g.task), (g.baseline, None), (g.baseline, g.task)):
        if key[0] is not None and key in m.not_run:
            return m.not_run[key]
    return None


#: Gates that read generated tokens or speculative decoding: NOT RUN on a task that
#: only scores prompts (:attr:`Measurements.prompt_only`).
PROMPT_ONLY_KINDS = (G.DraftsObserved, G.MinAcceptanceLength, G.MaxAcceptanceLengthDrop, G.MinOutputMatch,
                     G.BaselineAcceptanceLengthDrop, G.MaxTruncationRate)


def evaluate_gate(g: G.Gate, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """Judge one planned gate against the measurements.

    Semantics (docs/gates.md; each gate class in :mod:`harness.config.gates` says its own):

    * ``accuracy_floor``: accuracy >= threshold - tolerance - margin, where margin is
      :func:`harness.analysis.stats.floor_margin` when the gate gives
      ``calibration_questions`` larger than the run, else 0.
    * ``min_acceptance_length``: mean acceptance length >= limit; no drafts fails.
    * ``drafts_observed``: a speculative variant reported at least one draft.
    * ``max_error_rate``: failed requests / requests <= limit.
    * ``variant_effective``: every requested setting took effect, or every mismatch is
      declared expected on this platform (``expected_effective``). Facts that could
      not be read fail it (the check that the variant ran as asked must not vanish),
      unless the variant declares ``engine_facts: not_reported``: then NOT RUN.
    * ``max_accuracy_drop``: one-sided: fails when baseline - candidate accuracy on the
      paired questions (under the gate's pipeline) exceeds the limit, or when the
      candidate is significantly worse (exact one-sided McNemar p < alpha; with
      ``adjusted_p`` given, the Holm-adjusted p-value of :func:`holm_p_values` is
      compared instead). An improvement never fails.
    * ``variant_effective`` also requires (when ``m.runners`` is collected) a known
      model runner, the one asked for, and the runner of every compared variant
      (:func:`runner_check`).
    * ``min_output_match`` with ``near_tie_nats`` and a :class:`DivergenceReport`:
      share of questions without an unexplained divergence >= limit
      (:func:`_output_match_classified`); the noise test below is then not used.
    * ``min_output_match`` otherwise: share of identical completion token ids >= limit. With a
      noise reference (:class:`OutputNoise`) whose noise is above zero, the limit is
      replaced by a test: fails when the candidate mismatches significantly more
      often than the noise (one-sided p < alpha). Zero observed noise means the
      engine is deterministic on these prompts, so the limit applies unchanged.
    * ``max_acceptance_length_drop``: baseline - candidate mean acceptance length <= limit.
    * ``max_truncation_rate``: completions cut by ``max_tokens`` / successful
      completions <= limit. A failing accuracy gate also names the truncated share
      when it is above :data:`TRUNCATION_NOTE_RATE`.
    * ``baseline_accuracy_drop`` / ``baseline_acceptance_length_drop``: the same
      against the stored baseline (:func:`_baseline_accuracy`).
    * On a task that only scores prompts (:attr:`Measurements.prompt_only`), the gates
      of :data:`PROMPT_ONLY_KINDS` are NOT RUN with the reason (output match also
      names the chosen-answer agreement, for information).

    Returns:
        :class:`GateResult`; ``passed`` None when its variant or task did not run.

    Raises:
        TypeError: a gate class this evaluator does not know.
    """
    reason = _not_run(g, m)
    if reason is not None:
        return _result(g, None, g.limit, None, f"not run: {reason}")
    if g.task is not None and g.task in m.prompt_only and isinstance(g, PROMPT_ONLY_KINDS):
        detail = f"not run: {m.prompt_only[g.task]}"
        ag = m.answers.get((g.baseline, g.variant, g.task)) if isinstance(g, G.MinOutputMatch) else None
        if ag is not None and ag.agreement_rate is not None:
            detail += (f"; for information (not gated): chosen answers ({ag.pipeline}) agree on "
                       f"{ag.agreed}/{ag.compared} ({ag.agreement_rate:.4f})")
        return _result(g, None, g.limit, None, detail, ag.disagreements if ag is not None else ())
    key = (g.variant, g.task)
    if isinstance(g, G.VariantEffective):
        eff = m.effectiveness.get(g.variant)
        if eff is None:
            why = m.engine_facts_errors.get(g.variant, "the effective configuration was not read")
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
    if isinstance(g, (G.AccuracyFloor, G.MaxErrorRate, G.MaxTruncationRate)):
        sc = m.scores.get(key)
        if sc is None:
            return _result(g, None, g.limit, None, "not run: no score")
        if isinstance(g, G.MaxTruncationRate):
            if sc.truncated_rate is None:
                return _result(g, None, g.limit, False, "no request succeeded: truncation cannot be computed")
            ok = sc.truncated_rate <= g.limit
            n = sc.num_requests - sc.error_count
            return _result(
                g, sc.truncated_rate, g.limit, ok,
                f"{sc.truncated} of {n} completions cut by max_tokens (truncated share {sc.truncated_rate:.3f}, limit {g.limit})",
                sc.truncated_ids if not ok else (),
            )
        if isinstance(g, G.MaxErrorRate):
            ok = sc.error_rate <= g.limit
            return _result(
                g, sc.error_rate, g.limit, ok,
                f"{sc.error_count} of {sc.num_requests} requests failed (error rate {sc.error_rate:.3f}, limit {g.limit})",
            )
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
        extra = f" (floor {g.limit} widened by {margin:.4f} for {ps.scored} of {cal} calibration questions)" if margin else ""
        return _result(
            g, ps.accuracy, limit, ok,
            f"{g.pipeline} accuracy {ps.accuracy:.4f} ({ps.correct}/{ps.scored}) vs floor {limit:.4f}{extra}"
            + ("" if ok else truncation_note(sc, g.variant)),
        )
    if isinstance(g, (G.DraftsObserved, G.MinAcceptanceLength)):
        sm = m.spec.get(key)
        if sm is None:
            err = m.spec_errors.get(key, "no speculative-decoding metrics")
            return _result(g, None, g.limit, False, f"speculative metrics missing: {err}")
        if sm.drafts <= 0:
            return _result(g, 0.0, g.limit, False, "no drafts observed: speculative decoding did not run")
        if isinstance(g, G.DraftsObserved):
            # counters are integral counts (prometheus gives floats): report an integer
            return _result(g, int(round(sm.drafts)), g.limit, True, f"{sm.drafts:.0f} drafts, {sm.draft_tokens:.0f} draft tokens")
        mal = sm.mean_acceptance_length
        ok = mal >= g.limit
        return _result(
            g, mal, g.limit, ok,
            f"mean acceptance length {mal:.3f} (1 + {sm.accepted_tokens:.0f}/{sm.drafts:.0f}) vs minimum {g.limit}",
        )
    pkey = (g.baseline, g.variant, g.task)
    if isinstance(g, G.MaxAccuracyDrop):
        pc = m.paired(g.baseline, g.variant, g.task, g.pipeline)
        if pc is None:
            return _result(g, None, g.limit, None, "not run: no paired questions")
        drop = pc.accuracy_a - pc.accuracy_b
        p_used = pc.one_sided_p_value if adjusted_p is None else adjusted_p
        signif = p_used < g.alpha
        ok = drop <= g.limit and not signif
        why = []
        if drop > g.limit:
            why.append(f"drop {drop:.4f} > {g.limit}")
        if signif:
            why.append(f"significantly worse (one-sided McNemar {'Holm-adjusted ' if adjusted_p is not None else ''}"
                       f"p={p_used:.4g} < {g.alpha})")
        detail = (
            f"{g.pipeline}: {g.baseline} {pc.accuracy_a:.4f} -> {g.variant} {pc.accuracy_b:.4f} on {pc.n} paired questions; "
            f"{len(pc.a_only)} right only in {g.baseline}, {len(pc.b_only)} right only in {g.variant}; "
            f"one-sided p={pc.one_sided_p_value:.4g}"
            + (f" (Holm-adjusted {adjusted_p:.4g})" if adjusted_p is not None else "")
        )
        if why:
            detail += "; FAILED: " + "; ".join(why)
            detail += truncation_note(m.scores.get((g.variant, g.task)), g.variant)
        return _result(g, drop, g.limit, ok, detail, pc.a_only if not ok else ())
    if isinstance(g, G.MinOutputMatch):
        om = m.matches.get(pkey)
        if om is None or om.output_match_rate is None:
            return _result(g, None, g.limit, False if om is not None else None, "no question could be compared")
        dv = m.divergences.get(pkey) if g.near_tie_nats is not None else None
        if dv is not None:
            return _output_match_classified(g, om, dv, m.answers.get(pkey))
        ok = om.output_match_rate >= g.limit
        detail = f"{om.matched}/{om.compared} completions identical (output match {om.output_match_rate:.4f})"
        if om.past_stop:
            ex = om.past_stop[0]
            detail += (f"; {len(om.past_stop)} of them identical only up to the stop (ids past the stop "
                       f"differ, not a divergence; e.g. {ex.question_id}: {ex.side} has {ex.extra_ids} extra ids)")
        nz = m.noise.get(pkey)
        limit = g.limit
        if nz is not None and nz.noise_rate > 0:
            ok = nz.p_value >= g.alpha
            limit = None
            src = (f"{g.baseline} rerun: {nz.noise_mismatched}/{nz.noise_compared} differ"
                   if nz.source == "rerun" else f"stored noise_mismatch_rate {nz.noise_rate:.4f}")
            detail += (
                f"; judged against noise ({src}, rate {nz.noise_rate:.4f}) instead of the limit {g.limit}: "
                f"candidate mismatch rate {'-' if nz.candidate_rate is None else f'{nz.candidate_rate:.4f}'}, one-sided p={nz.p_value:.4g} "
                f"({nz.test}) {'>=' if ok else '<'} alpha {g.alpha}"
            )
        elif nz is not None:
            detail += f"; noise reference shows no mismatch ({nz.source}), so exact limit {g.limit} applies"
        ag = m.answers.get(pkey)
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
    if isinstance(g, G.MaxAcceptanceLengthDrop):
        a = m.spec.get((g.baseline, g.task))
        b = m.spec.get((g.variant, g.task))
        if a is None or b is None or a.mean_acceptance_length is None or b.mean_acceptance_length is None:
            return _result(g, None, g.limit, False, "mean acceptance length missing on one side (no drafts?)")
        drop = a.mean_acceptance_length - b.mean_acceptance_length
        ok = drop <= g.limit
        return _result(
            g, drop, g.limit, ok,
            f"mean acceptance length {g.baseline} {a.mean_acceptance_length:.3f} -> {g.variant} {b.mean_acceptance_length:.3f}",
        )
    if isinstance(g, (G.BaselineAccuracyDrop, G.BaselineAcceptanceLengthDrop)):
        return _baseline_gate(g, m)
    if isinstance(g, G.BaselineReadable):
        ok = m.baseline_error is None
        return _result(g, None, None, ok, "the stored baseline was read" if ok else m.baseline_error)
    raise TypeError(f"unknown gate kind {g.kind!r} in gate {g.id}")


def runner_check(g: G.VariantEffective, m: Measurements) -> tuple[str, str]:
    """``(failure, note)`` of the model-runner part of ``variant_effective``.

    Fails (a non-empty ``failure``) when the variant's runner is ``unknown`` (fails
    closed like any unreadable engine fact), differs from its ``model_runner``, or
    differs from the runner of a variant it is compared with (``same_runner_as``; a
    comparison with ``allow_mixed_runners`` is not listed there). ``note`` names the
    runner for the passing detail. Nothing is checked when ``m.runners`` is None.
    """
    if m.runners is None:
        return "", ""
    f = m.runners.get(g.variant)
    if f is None or f.runner == "unknown":
        return (f"model runner unknown: {f.detail if f else 'not recorded'} (a variant whose runner is not "
                "known cannot be compared with another; load evalrun's plugin in the server's environment)", "")
    if g.model_runner is not None and f.runner != g.model_runner:
        return (f"model runner: requested {g.model_runner} (VLLM_USE_V2_MODEL_RUNNER), the engine ran "
                f"{f.runner} ({f.source}: {f.detail})", "")
    bad = [(peer, m.runners[peer]) for peer in g.same_runner_as
           if peer in m.runners and m.runners[peer].runner not in ("unknown", f.runner)]
    if bad:
        others = "; ".join(f"{peer} ran {pf.runner} ({pf.source}: {pf.detail})" for peer, pf in bad)
        return (f"model runners differ between compared variants: {g.variant} ran {f.runner} ({f.source}: "
                f"{f.detail}); {others}: their differences are two code paths, not speculative decoding "
                "(set allow_mixed_runners: true on the comparison to accept it)", "")
    return "", f"; model runner {f.runner} ({f.source})"


def _output_match_classified(g: G.MinOutputMatch, om: OutputMatch, dv: DivergenceReport,
                             ag: AnswerAgreement | None) -> GateResult:
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
        out.append(evaluate_gate(g, m))
    return out


def _baseline_gate(g: G.Gate, m: Measurements) -> GateResult:
    """Judge a gate against the stored baseline ``m.baseline`` (module
    :mod:`harness.records.baselines` for the semantics).

    Accuracy: with b = questions right in the baseline and wrong now, c = the reverse,
    over the question ids present in both with the same prompt hash, drop = (b - c)/n
    and the one-sided exact McNemar p = P(Binomial(b + c, 1/2) >= b) (McNemar 1947);
    without paired data drop = p_base - p_now and p is Fisher's exact one-sided p of
    the 2x2 table [[correct_base, wrong_base], [correct_now, wrong_now]] (alternative:
    the baseline's odds of a right answer are greater; Fisher 1935,
    ``scipy.stats.fisher_exact``).
    """
    b = m.baseline
    label = f"baseline:{b.source_run.run_id}" if b is not None else None
    bt = b.task(g.variant, g.task) if b is not None else None
    if bt is None:
        return _result(g, None, g.limit, None, "not run: no stored baseline for this variant and task", baseline=label)
    if isinstance(g, G.BaselineAccuracyDrop):
        cur = m.samples.get((g.variant, g.task))
        if cur is None:
            return _result(g, None, g.limit, None, "not run: no samples", baseline=label)
        return _baseline_accuracy(g, bt, cur, label)
    base_mal = bt.spec_decode.mean_acceptance_length if bt.spec_decode else None
    sm = m.spec.get((g.variant, g.task))
    if base_mal is None:
        return _result(g, None, g.limit, None, "not run: the baseline has no mean acceptance length", baseline=label)
    if sm is None or sm.mean_acceptance_length is None:
        return _result(g, None, g.limit, False, f"mean acceptance length missing now (baseline {base_mal:.3f})",
                       baseline=label)
    drop = base_mal - sm.mean_acceptance_length
    ok = drop <= g.limit
    ci = bt.mean_acceptance_length_ci
    return _result(
        g, drop, g.limit, ok,
        f"mean acceptance length baseline {base_mal:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
        + f" -> now {sm.mean_acceptance_length:.3f}: drop {drop:.3f} " + ("<=" if ok else ">") + f" {g.limit}",
        baseline=label,
    )


def _baseline_accuracy(g: G.BaselineAccuracyDrop, bt: BaselineTask, cur: Sequence[Sample], label: str) -> GateResult:
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
        how = f"unpaired (baseline has no per-question data for these prompts): {cb}/{nb} vs {cn}/{nn}; one-sided Fisher exact p={p:.4g}"
        lost = ()
    signif = p < g.alpha
    ok = drop <= g.limit and not signif
    detail = f"{pipe} accuracy baseline {a_acc:.4f} -> now {b_acc:.4f} (drop {drop:.4f}); {how}"
    if changed_prompt:
        detail += f"; {changed_prompt} question(s) have a different prompt than in the baseline and are not paired"
    why = []
    if drop > g.limit:
        why.append(f"drop {drop:.4f} > {g.limit}")
    if signif:
        why.append(f"significantly lower (p={p:.4g} < alpha {g.alpha})")
    if why:
        detail += "; FAILED: " + "; ".join(why)
    return _result(g, drop, g.limit, ok, detail, lost if not ok else (), baseline=label)
