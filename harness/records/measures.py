"""The measured nouns: one frozen pydantic type each, built by analysis and engine and stored as is.

The engine (:mod:`harness.engine.info`, :mod:`harness.engine.metrics`) and analysis
(:mod:`harness.analysis.scoring`, :mod:`harness.analysis.stats`,
:mod:`harness.analysis.divergence`) construct and return these types; the run record
(:mod:`harness.records.run_record`) holds them unchanged, so a measured field is declared
once. Sequences are tuples (the values are immutable); they are JSON arrays in ``run.json``.
Every type takes its fields by keyword, or positionally in declaration order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, TypedDict

from pydantic import (
    BaseModel,
    ConfigDict,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from harness.config.schema import JsonValue
from harness.records.bounds import Bounded

#: A two-sided interval ``[low, high]`` (fractions or tokens, as the field says).
Interval = tuple[float, float]

Verdict = Literal["explained", "unexplained", "noise"]
#: The verdicts of a judged divergence (:class:`DivergenceRecord`).
EXPLAINED: Final = "explained"
UNEXPLAINED: Final = "unexplained"
NOISE: Final = "noise"

#: Speculative-decoding counter base names exactly as vLLM registers them
#: (``vllm/v1/spec_decode/metrics.py``).
DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


class CountersJson(TypedDict):
    """:meth:`SpecDecodeCountersRecord.to_json`: counter differences (counts, as floats)."""

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    accepted_per_pos: list[float]


class SpecDecodeJson(TypedDict):
    """:meth:`SpecDecodeRecord.to_json`: counts (floats), acceptance rate (fraction),
    mean acceptance length (tokens), per-position acceptance (fractions); None when
    there were no drafts."""

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    per_position_acceptance: list[float | None]


class MetricsError(Exception):
    """The metrics text is unusable: unparsable, a counter is missing or malformed,
    or a snapshot difference is negative (the counter was reset)."""


class Measure(Bounded, BaseModel):
    """Base of every measured type: frozen, unknown fields are errors (a foreign or newer
    file is refused), no number is NaN or infinite, fields by keyword or positionally in
    declaration order. A subclass names its shares (``_RATES``) and its counts bounded by
    totals (``_WITHIN``): a value outside them is refused wherever the type is built or
    read (:class:`harness.records.bounds.Bounded`).

    Raises:
        TypeError: more positional arguments than fields, or a field given twice.
        pydantic.ValidationError: a non-finite number, a share outside [0, 1], a count
            above its total.
    """

    model_config = ConfigDict(frozen=True)

    def __init__(self, *args: object, **data: object) -> None:
        if args:
            names = list(type(self).model_fields)
            if len(args) > len(names):
                raise TypeError(f"{type(self).__name__} takes at most {len(names)} positional arguments")
            for name, value in zip(names, args):
                if name in data:
                    raise TypeError(f"{type(self).__name__}: {name!r} given twice")
                data[name] = value
        super().__init__(**data)


# --------------------------------------------------------------------------- engine


class EngineFactsRecord(Measure):
    """What the engine actually runs with, read from ``/server_info`` and ``/version``
    (:func:`harness.engine.info.read_engine_facts`); None where the engine did not say.

    Attributes:
        vllm_version: from ``/version``.
        platform: ``cpu``, ``cuda``, ``rocm``, ... (``device_config.device`` or the
            platform named in ``system_env``).
        dtype: ``model_config.dtype`` (e.g. ``torch.float32``).
        async_scheduling: ``scheduler_config.async_scheduling``.
        speculative_method: ``speculative_config.method`` or None when off.
        num_speculative_tokens: ``speculative_config.num_speculative_tokens`` or None.
        max_model_len: ``model_config.max_model_len`` (tokens).
        enable_prefix_caching: ``cache_config.enable_prefix_caching``.
        mamba_cache_mode: ``cache_config.mamba_cache_mode`` (``none`` / ``align``; vLLM
            sets ``align`` for a Mamba/GDN hybrid when prefix caching is on), where reported.
        block_size: ``cache_config.block_size`` in tokens: the KV-cache block after the
            engine core's hybrid alignment (the front end copies it back at start-up).
        max_num_batched_tokens: ``scheduler_config.max_num_batched_tokens``: the tokens
            one engine step schedules, so the prefill chunk of a longer prompt.
        max_num_seqs: ``scheduler_config.max_num_seqs``: the most requests one engine
            step runs.
        num_gpu_blocks: ``cache_config.num_gpu_blocks``: the KV-cache blocks the engine
            cores allocated (summed over data-parallel engines; vLLM's
            ``core_client.py`` copies it back at start-up), ``--num-gpu-blocks-override``
            where set.
    """

    vllm_version: str | None = None
    platform: str | None = None
    dtype: str | None = None
    async_scheduling: bool | None = None
    speculative_method: str | None = None
    num_speculative_tokens: int | None = None
    max_model_len: int | None = None
    enable_prefix_caching: bool | None = None
    mamba_cache_mode: str | None = None
    block_size: int | None = None
    max_num_batched_tokens: int | None = None
    num_gpu_blocks: int | None = None
    max_num_seqs: int | None = None


class EffectivenessRecord(Measure):
    """Whether a variant really ran as asked (:func:`harness.engine.info.check_effective`).

    Attributes:
        effective: every requested setting took effect.
        mismatches: ``{"setting": {"requested": x, "effective": y}}`` for each that did
            not (``async_scheduling``, ``speculative_method``, ``num_speculative_tokens``).
        expected_on_platform: the mismatches are all the ones the config declares
            expected on this platform (``expected_effective``); the gate passes then.
    """

    effective: bool
    mismatches: dict[str, dict[str, Any]] = {}
    expected_on_platform: bool = False


class ModelRunnerRecord(Measure):
    """Which vLLM model runner a variant's engine workers used
    (:func:`harness.engine.info.model_runner_fact`).

    Attributes:
        runner: ``v1``, ``v2`` or ``unknown`` (fails ``variant_effective``).
        source: ``evalrun plugin`` (the class each worker built), ``server log``
            (vLLM's own line), or None when unknown.
        detail: the class path(s) or the log line, or why it is unknown.
    """

    runner: Literal["v1", "v2", "unknown"]
    source: str | None = None
    detail: str = ""


class SpecDecodeCountersRecord(Measure):
    """Speculative-decoding counters, summed over engines: a snapshot (cumulative since
    server start) or a difference of two (:meth:`minus`).

    Attributes (counts, floats because Prometheus values are floats):
        drafts: ``vllm:spec_decode_num_drafts`` (speculation rounds).
        draft_tokens: ``vllm:spec_decode_num_draft_tokens`` (tokens proposed).
        accepted_tokens: ``vllm:spec_decode_num_accepted_tokens`` (tokens accepted).
        accepted_per_pos: ``vllm:spec_decode_num_accepted_tokens_per_pos``; index i is
            draft position i; positions absent but below the highest present one are 0.
        per_engine: the same counters for each ``engine`` label (``{"0": ...}``), set by
            :func:`harness.engine.metrics.parse_spec_decode_counters` (:meth:`summed`); empty for counters
            built by hand. Not stored and not part of equality (two snapshots are equal
            when their sums are).
    """

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    accepted_per_pos: tuple[float, ...] = ()
    _per_engine: dict[str, "SpecDecodeCountersRecord"] = PrivateAttr(default_factory=dict)

    @property
    def per_engine(self) -> dict[str, "SpecDecodeCountersRecord"]:
        return self._per_engine

    def with_per_engine(self, parts: dict[str, "SpecDecodeCountersRecord"]) -> "SpecDecodeCountersRecord":
        """These sums carrying ``parts`` as :attr:`per_engine` (returns self)."""
        self._per_engine = dict(parts)
        return self

    @classmethod
    def summed(cls, parts: dict[str, "SpecDecodeCountersRecord"]) -> "SpecDecodeCountersRecord":
        """The sum over engines of per-engine counters, keeping them as :attr:`per_engine`;
        per-position tuples of different lengths are padded with 0."""
        width = max((len(c.accepted_per_pos) for c in parts.values()), default=0)
        pos = [0.0] * width
        for c in parts.values():
            for i, v in enumerate(c.accepted_per_pos):
                pos[i] += v
        return cls(
            drafts=sum(c.drafts for c in parts.values()),
            draft_tokens=sum(c.draft_tokens for c in parts.values()),
            accepted_tokens=sum(c.accepted_tokens for c in parts.values()),
            accepted_per_pos=tuple(pos),
        ).with_per_engine(parts)

    def minus(self, before: "SpecDecodeCountersRecord") -> "SpecDecodeCountersRecord":
        """Return ``self - before`` (``after.minus(before)``), taken per engine and summed.

        When both snapshots carry :attr:`per_engine` (parsed from ``/metrics``), the
        difference is taken on each ``engine`` label separately and then summed, so a
        restart of one engine cannot hide behind growth of another (before engine0=100,
        engine1=100, after engine0=10, engine1=250 is an error naming engine 0, not a
        difference of 60). An engine that appears only in ``after`` counts from 0;
        one that disappears is an error. Without per-engine data the sums are
        subtracted. Per-position tuples of different lengths are padded with 0; the
        result has the longer length.

        Raises:
            MetricsError: a counter went down (on the named engine) or an engine
                vanished: the server restarted or its counters were reset between
                the snapshots, so the difference over the task cannot be measured.
        """
        if self.per_engine and before.per_engine:
            parts = {}
            for e in sorted(set(self.per_engine) | set(before.per_engine)):
                if e not in self.per_engine:
                    raise MetricsError(
                        f"engine {e!r} reported speculative-decoding counters before the task and "
                        "none after it: the engine restarted or stopped between the snapshots"
                    )
                zero = SpecDecodeCountersRecord(drafts=0.0, draft_tokens=0.0, accepted_tokens=0.0)
                parts[e] = self.per_engine[e]._minus_flat(before.per_engine.get(e, zero), f"on engine {e!r} ")
            return SpecDecodeCountersRecord.summed(parts)
        return self._minus_flat(before, "")

    def _minus_flat(self, before: "SpecDecodeCountersRecord", where: str) -> "SpecDecodeCountersRecord":
        """``self - before`` of the sums, every difference checked to be >= 0."""
        diffs = {}
        for fld, name in (("drafts", DRAFTS), ("draft_tokens", DRAFT_TOKENS), ("accepted_tokens", ACCEPTED_TOKENS)):
            d = getattr(self, fld) - getattr(before, fld)
            if d < 0:
                raise MetricsError(
                    f"counter {name} went backwards {where}({getattr(before, fld):g} -> "
                    f"{getattr(self, fld):g}): the engine restarted or its counters were reset "
                    "between snapshots"
                )
            diffs[fld] = d
        width = max(len(self.accepted_per_pos), len(before.accepted_per_pos))
        after_pos = self.accepted_per_pos + (0.0,) * (width - len(self.accepted_per_pos))
        before_pos = before.accepted_per_pos + (0.0,) * (width - len(before.accepted_per_pos))
        per_pos = []
        for i, (a, b) in enumerate(zip(after_pos, before_pos)):
            if a - b < 0:
                raise MetricsError(
                    f"counter {ACCEPTED_PER_POS}{{position=\"{i}\"}} went backwards {where}"
                    f"({b:g} -> {a:g}): the engine restarted or its counters were reset between snapshots"
                )
            per_pos.append(a - b)
        return SpecDecodeCountersRecord(accepted_per_pos=tuple(per_pos), **diffs)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SpecDecodeCountersRecord):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable per_engine; equality by the sums

    def to_json(self) -> CountersJson:
        """JSON-serialisable dict: ``drafts``, ``draft_tokens``, ``accepted_tokens``
        (floats) and ``accepted_per_pos`` (list of floats)."""
        return CountersJson(drafts=self.drafts, draft_tokens=self.draft_tokens, accepted_tokens=self.accepted_tokens,
                            accepted_per_pos=list(self.accepted_per_pos))

    @classmethod
    def from_json(cls, data: Mapping[str, JsonValue]) -> "SpecDecodeCountersRecord":
        """Inverse of :meth:`to_json`. Raises KeyError on a missing key."""
        return cls(drafts=float(data["drafts"]), draft_tokens=float(data["draft_tokens"]),
                   accepted_tokens=float(data["accepted_tokens"]),
                   accepted_per_pos=tuple(float(v) for v in data["accepted_per_pos"]))


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


#: vLLM's engine counters a traffic shape proves itself with (``vllm/v1/metrics/loggers.py``,
#: ``PrometheusStatLogger``): field name -> counter name.
ENGINE_COUNTERS: dict[str, str] = {
    "prompt_tokens": "vllm:prompt_tokens",
    "generation_tokens": "vllm:generation_tokens",
    "preemptions": "vllm:num_preemptions",
    "prefix_cache_queries": "vllm:prefix_cache_queries",
    "prefix_cache_hits": "vllm:prefix_cache_hits",
}


class EngineCountersRecord(Measure):
    """vLLM's engine counters (:data:`ENGINE_COUNTERS`), summed over engines and labels: a
    snapshot or the difference over one task (:meth:`minus`). None: the server exposes no
    such counter.

    Attributes (token / event counts):
        prompt_tokens: prefill tokens processed (``vllm:prompt_tokens``).
        generation_tokens: tokens generated (``vllm:generation_tokens``).
        preemptions: requests preempted (``vllm:num_preemptions``).
        prefix_cache_queries, prefix_cache_hits: tokens looked up in / found in the
            prefix cache (``vllm:prefix_cache_queries`` / ``_hits``).
    """

    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    preemptions: float | None = None
    prefix_cache_queries: float | None = None
    prefix_cache_hits: float | None = None

    def minus(self, before: "EngineCountersRecord") -> "EngineCountersRecord":
        """``self - before`` per counter (None where either is None).

        Raises:
            MetricsError: a counter went down (a restarted server).
        """
        out: dict[str, float | None] = {}
        for f in ENGINE_COUNTERS:
            a, b = getattr(self, f), getattr(before, f)
            if a is None or b is None:
                out[f] = None
                continue
            if a < b:
                raise MetricsError(f"engine counter {ENGINE_COUNTERS[f]} went down: {b} -> {a}")
            out[f] = a - b
        return EngineCountersRecord(**out)


class SpecDecodeRecord(Measure):
    """Acceptance figures for one task, computed from a counter difference.

    Formulas are those of vLLM's spec-decode metrics logging (``SpecDecodingLogging.log``
    and the PromQL in the ``SpecDecodingProm`` docstring, ``vllm/v1/spec_decode/metrics.py``):

    * ``acceptance_rate = accepted_tokens / draft_tokens`` (fraction in [0, 1], not %);
    * ``mean_acceptance_length = 1 + accepted_tokens / drafts`` (tokens emitted per
      verification step, counting the bonus token);
    * ``per_position_acceptance[i] = accepted_per_pos[i] / drafts`` (fraction of drafts
      whose position i was accepted).

    A ratio whose denominator is 0 is ``None`` (never 0.0, never an exception).

    Attributes:
        drafts, draft_tokens, accepted_tokens: the counter differences (counts).
        acceptance_rate, mean_acceptance_length (tokens): see above, or None.
        per_position_acceptance: one entry per draft position; every entry is None
            when ``drafts`` is 0.
    """

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    per_position_acceptance: tuple[float | None, ...] = ()

    @classmethod
    def from_counters(cls, delta: SpecDecodeCountersRecord) -> "SpecDecodeRecord":
        """The figures of a counter difference (``after.minus(before)``); a raw snapshot
        gives the figures since server start. Never raises on zero counts."""
        return cls(
            drafts=delta.drafts,
            draft_tokens=delta.draft_tokens,
            accepted_tokens=delta.accepted_tokens,
            acceptance_rate=_ratio(delta.accepted_tokens, delta.draft_tokens),
            mean_acceptance_length=1.0 + delta.accepted_tokens / delta.drafts if delta.drafts > 0 else None,
            per_position_acceptance=tuple(_ratio(a, delta.drafts) for a in delta.accepted_per_pos),
        )

    def to_json(self) -> SpecDecodeJson:
        """JSON-serialisable dict of every field (``per_position_acceptance`` a list;
        None entries become JSON null)."""
        return SpecDecodeJson(drafts=self.drafts, draft_tokens=self.draft_tokens,
                              accepted_tokens=self.accepted_tokens, acceptance_rate=self.acceptance_rate,
                              mean_acceptance_length=self.mean_acceptance_length,
                              per_position_acceptance=list(self.per_position_acceptance))


# --------------------------------------------------------------------------- scores


class PipelineScore(Measure):
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


class TaskScore(Measure):
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


# --------------------------------------------------------------------------- comparisons


class MismatchRecord(Measure):
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


class PastStopRecord(Measure):
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


class OutputMatchRecord(Measure):
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


class NoiseRecord(Measure):
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


class PairedRecord(Measure):
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


class AnswerAgreementRecord(Measure):
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


class DivergenceRecord(Measure):
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
            baseline's rerun), ``none`` (no distribution, no rerun).
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


class DivergenceReportRecord(Measure):
    """Every divergent question of one comparison and task, judged.

    Attributes:
        reference: the variant whose top-k log-probabilities judged (None: no variant
            carries them, every divergence falls back).
        near_tie_nats: the threshold used (nats).
        compared: questions compared (as :class:`OutputMatchRecord`).
        rerun_available: whether a rerun of the baseline was there for the fallback.
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


class SampledRecord(Measure):
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
        p_value: two-sided sign-flip permutation p-value of ``shift`` (H0: both variants
            sample from the target's distribution, so each difference is symmetric about 0).
        t_p_value: the paired t-test's two-sided p-value, for reference (not gated).
        resamples: sign flips drawn (0: every flip enumerated, exact).
        scorer: the non-speculative variant whose server scored both sides.
        unscored: question ids left out (failed on a side or not scored), sorted.
        worst: up to 5 question ids with the most negative difference, most negative first.
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

    _RATES = ("p_value", "t_p_value")
