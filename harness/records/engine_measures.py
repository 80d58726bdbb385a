"""The engine's measured nouns: effective configuration, model runner, speculative-decoding
counters and acceptance figures, engine counters; one frozen type each.

The engine (:mod:`harness.engine.info`, :mod:`harness.engine.metrics`) builds them; the
run record (:mod:`harness.records.run_record`) stores them as they are. Also re-exported by
:mod:`harness.records.measures`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypedDict

from pydantic import BaseModel, PrivateAttr

from harness.config.schema import JsonValue
from harness.records.measure import Measure


class _Measure(Measure, BaseModel):
    """:class:`Measure` with BaseModel named directly, so linters see a pydantic model."""

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


# --------------------------------------------------------------------------- engine


class EngineFactsRecord(_Measure):
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


class EffectivenessRecord(_Measure):
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


class ModelRunnerRecord(_Measure):
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


class SpecDecodeCountersRecord(_Measure):
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


class EngineCountersRecord(_Measure):
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


class SpecDecodeRecord(_Measure):
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
