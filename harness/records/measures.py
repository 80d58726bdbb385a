"""The measured nouns: one frozen pydantic type each, built by analysis and engine and stored as is.

The engine (:mod:`harness.engine.info`, :mod:`harness.engine.metrics`) and analysis
(:mod:`harness.analysis.scoring`, :mod:`harness.analysis.stats`,
:mod:`harness.analysis.divergence`) construct and return these types; the run record
(:mod:`harness.records.run_record`) holds them unchanged, so a measured field is declared
once. The engine's nouns live in :mod:`harness.records.engine_measures` (re-exported here),
the base type in :mod:`harness.records.measure`. Sequences are tuples (the values are
immutable); they are JSON arrays in ``run.json``.
Every type takes its fields by keyword, or positionally in declaration order.
"""

from __future__ import annotations

from typing import Final, Literal, Protocol

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from harness.config.schema import JsonValue
from harness.records.engine_measures import (  # noqa: F401 - the engine's measures, re-exported
    ACCEPTED_PER_POS,
    ACCEPTED_TOKENS,
    DRAFT_TOKENS,
    DRAFTS,
    ENGINE_COUNTERS,
    CountersJson,
    EffectivenessRecord,
    EngineCountersRecord,
    EngineFactsRecord,
    MetricsError,
    ModelRunnerRecord,
    SpecDecodeCountersRecord,
    SpecDecodeJson,
    SpecDecodeRecord,
)
from harness.records.measure import Interval, Measure


class _Measure(Measure, BaseModel):
    """:class:`Measure` with BaseModel named directly, so linters see a pydantic model."""

Verdict = Literal["explained", "unexplained", "noise"]
#: The verdicts of a judged divergence (:class:`DivergenceRecord`).
EXPLAINED: Final = "explained"
UNEXPLAINED: Final = "unexplained"
NOISE: Final = "noise"


# --------------------------------------------------------------------------- scores


class PipelineScore(_Measure):
    """One answer pipeline's score (:func:`harness.analysis.scoring.score_task`).

    Attributes:
        correct: number of scored samples judged right.
        scored: number of samples scored (successful requests).
        accuracy: correct / scored, None when nothing was scored.
        accuracy_ci: 95% Wilson score interval of ``accuracy`` (fractions).
        invalid_rate: share of scored samples where the pipeline found no answer.
    """

    correct: int
    scored: int
    accuracy: float | None
    accuracy_ci: Interval | None
    invalid_rate: float | None

    _RATES = ("accuracy", "accuracy_ci", "invalid_rate")
    _WITHIN = (("correct", "scored"),)


class ScoredResult(Protocol):
    """What :meth:`TaskScore.of_result` reads of a task's record entry
    (:class:`harness.records.run_record.TaskResult`): the counts, and each per-pipeline
    figure as a map pipeline -> value."""

    num_requests: int
    error_count: int
    error_rate: float
    accuracy: dict[str, float | None]
    accuracy_ci: dict[str, Interval | None]
    correct: dict[str, int]
    scored: dict[str, int]
    invalid_rate: dict[str, float | None]
    finish_reasons: dict[str, int]
    truncated: int
    truncated_rate: float | None
    truncated_ids: list[str]
    stop_reasons: dict[str, int]


class TaskScore(_Measure):
    """Scores of one task on one variant (:func:`harness.analysis.scoring.score_task`).

    Attributes:
        num_requests: samples in the task.
        error_count: requests that failed (not scored).
        error_rate: error_count / num_requests.
        accuracy: pipeline name -> :class:`PipelineScore`.
        finish_reasons: finish reason -> count over successful requests.
        truncated: successful requests cut by ``max_tokens`` (``finish_reason == "length"``).
        truncated_rate: truncated / successful requests (None when none succeeded).
        truncated_ids: their question ids, in sample order.
        stop_reasons: what ended each ``stop`` completion -> count: the stop string,
            ``"token <id>"`` for a stop token, ``"eos"`` when the server reported none.
    """

    num_requests: int
    error_count: int
    error_rate: float
    accuracy: dict[str, PipelineScore]
    finish_reasons: dict[str, int] = {}
    truncated: int = 0
    truncated_rate: float | None = None
    truncated_ids: tuple[str, ...] = ()
    stop_reasons: dict[str, int] = {}

    _RATES = ("error_rate", "truncated_rate")
    _WITHIN = (("error_count", "num_requests"), ("truncated", "num_requests"), ("finish_reasons", "num_requests"))

    def result_fields(self) -> dict[str, object]:
        """These scores as the keys of :class:`harness.records.run_record.TaskResult`:
        the counts, and ``accuracy`` / ``accuracy_ci`` / ``correct`` / ``scored`` /
        ``invalid_rate`` each a map pipeline -> value."""
        per = {k: {p: getattr(v, k) for p, v in self.accuracy.items()}
               for k in ("accuracy", "accuracy_ci", "correct", "scored", "invalid_rate")}
        return {"num_requests": self.num_requests, "error_count": self.error_count,
                "error_rate": self.error_rate, **per, "finish_reasons": dict(self.finish_reasons),
                "truncated": self.truncated, "truncated_rate": self.truncated_rate,
                "truncated_ids": list(self.truncated_ids), "stop_reasons": dict(self.stop_reasons)}

    @classmethod
    def of_result(cls, result: ScoredResult) -> TaskScore:
        """The inverse of :meth:`result_fields`: the scores a task's record entry
        (:class:`harness.records.run_record.TaskResult`) holds, per pipeline again. The
        record is where a score is written; this is how the gates' view
        (:class:`harness.analysis.measurements.Measurements`) reads it."""
        r = result
        accuracy = {p: PipelineScore(correct=r.correct[p], scored=r.scored[p], accuracy=a,
                                     accuracy_ci=r.accuracy_ci.get(p), invalid_rate=r.invalid_rate.get(p))
                    for p, a in r.accuracy.items()}
        return cls(num_requests=r.num_requests, error_count=r.error_count, error_rate=r.error_rate,
                   accuracy=accuracy, finish_reasons=dict(r.finish_reasons), truncated=r.truncated,
                   truncated_rate=r.truncated_rate, truncated_ids=tuple(r.truncated_ids),
                   stop_reasons=dict(r.stop_reasons))


# --------------------------------------------------------------------------- comparisons


class MismatchRecord(_Measure):
    """One question whose completions differ between two variants.

    Attributes:
        question_id: the question.
        first_divergence: index of the first differing completion token.
        baseline_text / candidate_text: both completions.
        baseline_tokens / candidate_tokens: number of completion tokens of each.
    """

    question_id: str
    first_divergence: int
    baseline_text: str
    candidate_text: str
    baseline_tokens: int
    candidate_tokens: int


class PastStopRecord(_Measure):
    """A matched question whose two completions have the same text and whose token ids
    differ only after the shorter one ends: ids past the stop, not a divergence.

    Attributes:
        question_id: the question.
        side: the side with the extra ids.
        extra_ids: how many ids that side has past the other's end.
        common_ids: the ids both share (the committed output).
    """

    question_id: str
    side: Literal["baseline", "candidate"]
    extra_ids: int
    common_ids: int


class OutputMatchRecord(_Measure):
    """Greedy output match between a baseline and a candidate variant, up to the stop
    (:func:`harness.analysis.scoring.output_match`).

    Attributes:
        compared: questions that succeeded on both variants and have token ids.
        matched: questions whose completions are identical up to the stop: equal token
            ids, or equal text with one side's ids a prefix of the other's (:attr:`past_stop`).
        output_match_rate: matched / compared (None when nothing was compared).
        mismatches: one :class:`MismatchRecord` per differing question, in question order.
        skipped: question ids not compared (an error on either side, or no token ids).
        past_stop: the matched questions whose ids differ only past the stop, in
            question order.
    """

    compared: int
    matched: int
    output_match_rate: float | None = None

    _RATES = ("output_match_rate",)
    _WITHIN = (("matched", "compared"),)
    mismatches: tuple[MismatchRecord, ...] = ()
    skipped: tuple[str, ...] = ()
    past_stop: tuple[PastStopRecord, ...] = ()


class NoiseRecord(_Measure):
    """A candidate's greedy-output mismatches judged against baseline-vs-baseline noise
    (:func:`harness.analysis.noise.output_noise_rerun` / ``output_noise_stored``).

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

    source: Literal["rerun", "stored"]
    noise_compared: int | None = None
    noise_mismatched: int | None = None
    noise_rate: float
    noise_first_divergences: tuple[tuple[str, int], ...] = ()
    compared: int
    candidate_mismatched: int
    candidate_rate: float | None = None
    candidate_only: tuple[str, ...] = ()
    noise_only: tuple[str, ...] = ()
    test: str
    p_value: float

    _RATES = ("noise_rate", "candidate_rate", "p_value")
    _WITHIN = (("noise_mismatched", "noise_compared"), ("candidate_mismatched", "compared"))


class PairedRecord(_Measure):
    """Paired comparison of two variants on the same questions
    (:func:`harness.analysis.stats.paired_comparison`, which states the formulas).

    Attributes:
        n: number of question ids present in both A and B.
        accuracy_a, accuracy_b: fraction correct over those n questions.
        diff: ``accuracy_b - accuracy_a`` (negative = B is worse).
        diff_ci: ``(low, high)`` Wald interval for ``diff`` at ``confidence``.
        a_only: ids right in A and wrong in B, sorted (count = McNemar's b).
        b_only: ids wrong in A and right in B, sorted (count = McNemar's c).
        both_correct, both_wrong: counts of the concordant pairs.
        p_value: two-sided McNemar p-value (H0: equal accuracy).
        test: ``"mcnemar_exact"`` (binomial, when b + c < 25), ``"mcnemar_chi2_cc"``
            (chi-square with continuity correction) or ``"none"`` (b + c == 0, p = 1).
        one_sided_p_value: exact one-sided McNemar p-value for H1 "B is worse than A"
            (``binomtest(b, b + c, 0.5, alternative="greater")``; 1.0 when b + c == 0).
        confidence: the confidence level of ``diff_ci``.
    """

    n: int
    accuracy_a: float
    accuracy_b: float
    diff: float
    diff_ci: Interval
    a_only: tuple[str, ...] = ()
    b_only: tuple[str, ...] = ()
    both_correct: int
    both_wrong: int
    p_value: float
    test: str
    one_sided_p_value: float
    confidence: float

    _RATES = ("accuracy_a", "accuracy_b", "p_value", "one_sided_p_value", "confidence")
    _WITHIN = (("both_correct", "n"), ("both_wrong", "n"))


class AnswerAgreementRecord(_Measure):
    """Answer-level agreement between two variants: same extracted answer, whatever the
    tokens around it (:func:`harness.analysis.scoring.answer_agreement`).

    Attributes:
        pipeline: the extraction pipeline compared (e.g. ``flexible-numeric``).
        compared: questions that succeeded on both variants.
        agreed: questions whose extracted answers are equal as numbers (both None
            counts as agreement: neither found an answer).
        agreement_rate: agreed / compared (None when nothing was compared).
        disagreements: question ids whose answers differ, in question order.
    """

    pipeline: str
    compared: int
    agreed: int
    agreement_rate: float | None

    _RATES = ("agreement_rate",)
    _WITHIN = (("agreed", "compared"),)
    disagreements: tuple[str, ...] = ()


class DivergenceRecord(_Measure):
    """The first divergence of one question, judged by the reference's distribution
    (:func:`harness.analysis.divergence.classify_divergences`).

    Attributes:
        question_id: the question.
        position: index of the first differing completion token (``d``).
        baseline_token / candidate_token: token ids at ``d`` (None: that side ended there).
        reference_token: the reference's token at ``d`` (None when its distribution does
            not apply).
        gap_nats: ``lp_ref(reference_token) - lp_ref(candidate_token)`` in nats; when the
            candidate's token is outside the reference's top k, the lower bound
            ``lp_ref(reference_token) - lp_ref(k-th token)`` (``in_top_k`` False); None
            when the distribution does not apply or the candidate ended.
        in_top_k: whether the candidate's token is among the reference's top k at ``d``.
        candidate_rank: its 1-based rank there (None outside the top k).
        verdict: ``explained`` / ``unexplained`` / ``noise``.
        source: ``reference`` (the baseline is the reference), ``reference_prefix``
            (the reference shares the baseline's prefix), ``rerun`` (fallback to the
            baseline's rerun), ``none`` (no distribution, no rerun), ``reference_at_prefix``
            (scored on the reference's server at the baseline's prefix,
            :mod:`harness.analysis.prefix_gap`; ``gap_nats`` is then exact).
        reason: one sentence for people.
    """

    question_id: str
    position: int
    baseline_token: int | None = None
    candidate_token: int | None = None
    reference_token: int | None = None
    gap_nats: float | None = None
    in_top_k: bool = False
    candidate_rank: int | None = None
    verdict: Verdict
    source: str
    reason: str


_VERDICT_COUNTS = (UNEXPLAINED, EXPLAINED, NOISE)


class DivergenceReportRecord(_Measure):
    """Every divergent question of one comparison and task, judged.

    Attributes:
        reference: the variant whose top-k log-probabilities judged (None: no variant
            carries them, every divergence falls back).
        near_tie_nats: the threshold used (nats).
        compared: questions compared (as :class:`OutputMatchRecord`).
        rerun_available: whether a rerun of the baseline was there for the fallback.
        near_tie_widening_nats: the part of ``near_tie_nats`` added for the run's numerics
            noise (:func:`harness.analysis.divergence.near_tie_bound`); absent without it.
        divergences: one :class:`DivergenceRecord` per mismatched question, worst first
            (unexplained by decreasing gap, then noise, then explained by decreasing gap).

    :attr:`unexplained`, :attr:`explained` and :attr:`noise` are the divergences with
    that verdict; ``run.json`` stores their counts under those keys (after ``compared``),
    and reading checks the stored counts against the divergences.
    """

    reference: str | None = None
    near_tie_nats: float
    compared: int
    rerun_available: bool = False
    divergences: tuple[DivergenceRecord, ...] = ()
    near_tie_widening_nats: float | None = Field(default=None, ge=0, exclude_if=lambda v: v is None)

    @model_validator(mode="before")
    @classmethod
    def _drop_counts(cls, data: JsonValue) -> JsonValue:
        """Accept the stored counts, each equal to the number of divergences with that verdict."""
        if not isinstance(data, dict) or not any(k in data for k in _VERDICT_COUNTS):
            return data
        data = dict(data)
        counts = {k: data.pop(k) for k in _VERDICT_COUNTS if k in data}
        verdicts = [d.verdict if isinstance(d, DivergenceRecord) else (d or {}).get("verdict")
                    for d in data.get("divergences") or ()]
        for k, n in counts.items():
            if n != verdicts.count(k):
                raise ValueError(f"{k}: {n!r} stored, but {verdicts.count(k)} divergences say {k}")
        return data

    @model_serializer(mode="wrap")
    def _with_counts(self, handler: SerializerFunctionWrapHandler) -> dict[str, JsonValue]:
        out = handler(self)
        counts = {k: len(self.of(k)) for k in _VERDICT_COUNTS}
        keys = list(out)
        at = keys.index("compared") + 1 if "compared" in keys else len(keys)
        return {**{k: out[k] for k in keys[:at]}, **counts, **{k: out[k] for k in keys[at:]}}

    def of(self, verdict: str) -> tuple[DivergenceRecord, ...]:
        """The divergences with ``verdict``, worst first."""
        return tuple(d for d in self.divergences if d.verdict == verdict)

    @property
    def unexplained(self) -> tuple[DivergenceRecord, ...]:
        return self.of(UNEXPLAINED)

    @property
    def explained(self) -> tuple[DivergenceRecord, ...]:
        return self.of(EXPLAINED)

    @property
    def noise(self) -> tuple[DivergenceRecord, ...]:
        return self.of(NOISE)


class SampledRecord(_Measure):
    """The sampled verdict of one comparison and task: the target's mean log-probability
    per completion token of both variants' sampled completions, paired by question
    (:func:`harness.analysis.sampled.sampled_test`, which states the test).

    Attributes:
        n: questions scored on both sides.
        mean_a, mean_b: mean over questions of the per-question mean log-probability per
            token (nats) of the baseline's / the candidate's completions.
        sum_a, sum_b: mean over questions of the completions' total log-probability (nats).
        shift: ``mean_b - mean_a`` (nats per token; negative: the target finds the
            candidate's completions less likely).
        sd: standard deviation of the per-question difference (nats per token).
        t: paired t statistic ``shift / (sd / sqrt(n))`` (0 when sd is 0).
        p_value: the gate's sign-flip permutation p-value (H0: both variants sample from
            the target's distribution, so each difference is symmetric about 0): of
            ``shift`` alone (two-sided) when no ranks were scored, else the maxT test of
            ``shift`` and ``top1_shift`` together (:mod:`harness.analysis.sampled`).
        t_p_value: the paired t-test's two-sided p-value, for reference (not gated).
        resamples: sign flips drawn (0: every flip enumerated, exact).
        scorer: the non-speculative variant whose server scored both sides.
        unscored: question ids left out (failed on a side or not scored), sorted.
        worst: up to 5 question ids with the most negative difference, most negative first.
        top1_a, top1_b: mean over questions of the share of completion tokens that are the
            target's most likely token (rank 1); None when the scorer reported no ranks.
        top1_shift: ``top1_b - top1_a`` (None without ranks).
        top1_p_value, logprob_p_value: the two-sided sign-flip p-values of ``top1_shift``
            and of ``shift`` alone, for reference (None without ranks; then ``p_value``
            is the latter).
        past_stop_a, past_stop_b: ids returned past the stop string and left out of the
            scores (baseline's / candidate's, summed over the questions).
    """

    n: int
    mean_a: float
    mean_b: float
    sum_a: float
    sum_b: float
    shift: float
    sd: float
    t: float
    p_value: float
    t_p_value: float
    resamples: int
    scorer: str
    unscored: tuple[str, ...] = ()
    worst: tuple[str, ...] = ()
    top1_a: float | None = None
    top1_b: float | None = None
    top1_shift: float | None = None
    top1_p_value: float | None = None
    logprob_p_value: float | None = None
    past_stop_a: int = 0
    past_stop_b: int = 0

    _RATES = ("p_value", "t_p_value", "top1_a", "top1_b", "top1_p_value", "logprob_p_value")
