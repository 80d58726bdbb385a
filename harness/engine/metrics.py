"""Speculative-decoding counters from vLLM's Prometheus ``/metrics`` text.

vLLM (``vllm/v1/spec_decode/metrics.py``, class ``SpecDecodingProm``) registers four
cumulative Prometheus counters per engine, labelled ``model_name`` and ``engine``:

``vllm:spec_decode_num_drafts``
    number of drafts (speculation rounds) proposed;
``vllm:spec_decode_num_draft_tokens``
    number of draft tokens proposed;
``vllm:spec_decode_num_accepted_tokens``
    number of draft tokens the target model accepted;
``vllm:spec_decode_num_accepted_tokens_per_pos``
    accepted tokens per draft position, with an extra label ``position="i"``
    (``i`` = 0 .. num_speculative_tokens - 1).

In the Prometheus text exposition the samples are named with a ``_total`` suffix and
each counter is accompanied by a ``_created`` sample (a Unix timestamp, not a count).
``LLM.get_metrics()`` and some exporters use the bare names without ``_total``.

Counters are cumulative since server start: take a snapshot with
:func:`parse_spec_decode_counters` before and after a task, subtract with
:meth:`SpecDecodeCountersRecord.minus` (per ``engine`` label, then summed, so a counter that
went down on one engine is an error naming it instead of hiding in the sum), check the
difference with :func:`counter_violations` (counts that cannot occur), and turn it
into rates with :meth:`SpecDecodeRecord.from_counters`.

Parsing is done by ``prometheus_client.parser.text_string_to_metric_families``.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

from prometheus_client.parser import text_string_to_metric_families

from harness.records.measures import (  # the counter names and MetricsError are the records' (one home)
    ACCEPTED_PER_POS,
    ACCEPTED_TOKENS,
    DRAFT_TOKENS,
    DRAFTS,
    ENGINE_COUNTERS,
    EngineCountersRecord,
    MetricsError,
    SpecDecodeCountersRecord,
    SpecDecodeRecord,
)

__all__ = [
    "MetricsError",
    "SpecDecodeCountersRecord",
    "SpecDecodeRecord",
    "parse_spec_decode_counters",
    "parse_engine_counters",
    "has_spec_decode_counters",
    "counter_violations",
    "DRAFTS",
    "DRAFT_TOKENS",
    "ACCEPTED_TOKENS",
    "ACCEPTED_PER_POS",
]


_ALL_COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED_TOKENS, ACCEPTED_PER_POS)
_POSITION_LABEL = "position"
#: The label vLLM puts on every counter to tell data-parallel engines apart
#: (``vllm/v1/metrics/loggers.py``: ``labelnames=["model_name", "engine"]``).
_ENGINE_LABEL = "engine"
#: Slack for comparing counts held as floats (counters are integers).
_EPS = 1e-6


def _sample_names(base: str) -> tuple[str, str]:
    """Sample names accepted for counter ``base``: ``base_total`` and bare ``base``.

    ``base_created`` (the creation timestamp) is deliberately not among them.
    """
    return (base + "_total", base)


def _samples(text: str, source: str) -> list:
    """All samples of all families in ``text``; parse errors become MetricsError."""
    try:
        return [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    except Exception as exc:  # the parser raises ValueError/TypeError/IndexError
        raise MetricsError(f"cannot parse Prometheus text from {source}: {exc}") from exc


def _check_value(name: str, value: float, labels: dict, source: str) -> float:
    if not math.isfinite(value) or value < 0:
        raise MetricsError(
            f"counter {name}{labels} from {source} has invalid value {value!r}"
        )
    return float(value)


def _engine(labels: dict) -> str:
    """The ``engine`` label of a sample ('' when the exporter has none)."""
    return str(labels.get(_ENGINE_LABEL, ""))


def _sum_counter(samples: Iterable, base: str, source: str) -> dict[str, float]:
    """Counter ``base`` per ``engine`` label, summed over every other label
    (``model_name``, ...): ``{engine: value}``."""
    names = _sample_names(base)
    found = False
    by_engine: dict[str, float] = {}
    for s in samples:
        if s.name in names:
            found = True
            e = _engine(s.labels)
            by_engine[e] = by_engine.get(e, 0.0) + _check_value(base, s.value, s.labels, source)
    if not found:
        raise MetricsError(f"counter {base} (as {names[0]} or {names[1]}) missing from {source}")
    return by_engine


def _sum_per_position(samples: Iterable, base: str, source: str) -> dict[str, dict[int, float]]:
    """Counter ``base`` per ``engine`` and ``position`` label, summed over the other
    labels: ``{engine: {position: value}}``."""
    names = _sample_names(base)
    out: dict[str, dict[int, float]] = {}
    for s in samples:
        if s.name not in names:
            continue
        raw = s.labels.get(_POSITION_LABEL)
        try:
            pos = int(raw)
        except (TypeError, ValueError):
            raise MetricsError(
                f"counter {base}{s.labels} from {source} has no integer "
                f"'{_POSITION_LABEL}' label"
            ) from None
        if pos < 0:
            raise MetricsError(f"counter {base}{s.labels} from {source} has a negative position")
        by_pos = out.setdefault(_engine(s.labels), {})
        by_pos[pos] = by_pos.get(pos, 0.0) + _check_value(base, s.value, s.labels, source)
    if not out:
        raise MetricsError(f"counter {base} (as {names[0]} or {names[1]}) missing from {source}")
    return out


def _positions(by_pos: Mapping[int, float], width: int) -> tuple[float, ...]:
    return tuple(by_pos.get(i, 0.0) for i in range(width))


def parse_spec_decode_counters(text: str, source: str = "/metrics") -> SpecDecodeCountersRecord:
    """Parse the speculative-decoding counters out of Prometheus text.

    Args:
        text: Prometheus text exposition (the body of ``GET /metrics``).
        source: where ``text`` came from (URL or file), used in error messages.

    Returns:
        The four counters, each summed over every ``engine`` label (and every other
        label, e.g. ``model_name``), except that the per-position counter is kept
        apart per ``position`` label; the per-engine values are kept in
        :attr:`SpecDecodeCountersRecord.per_engine` for :meth:`SpecDecodeCountersRecord.minus`.
        Both ``<name>_total`` and bare ``<name>`` sample names are accepted; ``<name>_created``
        timestamp samples are ignored.

    Raises:
        MetricsError: the text cannot be parsed; one of the four counters has no
            sample (message names the counter and ``source``); a value is negative
            or not finite; a per-position sample lacks an integer ``position``.
            A server without speculative decoding has none of these counters: check
            with :func:`has_spec_decode_counters` first if that is expected.
    """
    samples = _samples(text, source)
    drafts = _sum_counter(samples, DRAFTS, source)
    draft_tokens = _sum_counter(samples, DRAFT_TOKENS, source)
    accepted = _sum_counter(samples, ACCEPTED_TOKENS, source)
    per_pos = _sum_per_position(samples, ACCEPTED_PER_POS, source)
    width = max(max(p) + 1 for p in per_pos.values())
    parts = {
        e: SpecDecodeCountersRecord(
            drafts=drafts.get(e, 0.0), draft_tokens=draft_tokens.get(e, 0.0),
            accepted_tokens=accepted.get(e, 0.0), accepted_per_pos=_positions(per_pos.get(e, {}), width),
        )
        for e in sorted(set(drafts) | set(draft_tokens) | set(accepted) | set(per_pos))
    }
    return SpecDecodeCountersRecord.summed(parts)


def has_spec_decode_counters(text: str, source: str = "/metrics") -> bool:
    """True when any of the four speculative-decoding counters has a sample in ``text``.

    A server started without speculative decoding exposes none of them. Partial
    exposure returns True, so that :func:`parse_spec_decode_counters` then reports the
    missing counter instead of the run silently being treated as non-speculative.

    Raises:
        MetricsError: the text cannot be parsed.
    """
    wanted = {n for base in _ALL_COUNTERS for n in _sample_names(base)}
    return any(s.name in wanted for s in _samples(text, source))


def counter_violations(delta: SpecDecodeCountersRecord, num_speculative_tokens: int | None) -> tuple[str, ...]:
    """Every way a counter difference is impossible for a speculative decoder.

    Checked before any gate reads the figures (a violation means the counters are
    wrong, so acceptance figures derived from them must not pass a gate):

    * accepted tokens <= draft tokens (acceptance rate <= 1): a draft token is
      accepted at most once;
    * per-position accepted tokens do not increase with the position: vLLM counts
      position i as accepted only when positions 0..i-1 were
      (``vllm/v1/spec_decode/metrics.py``, ``observe_draft``: ``num_accepted_tokens_per_pos``
      is incremented for positions ``0 .. num_accepted_tokens - 1``);
    * accepted at position 0 <= drafts (each draft accepts a position at most once);
    * the sum over positions = accepted tokens, when the engine exports per-position
      counters (same source: both count the same accepted tokens);
    * with ``k = num_speculative_tokens``: draft tokens <= k x drafts, at most k
      positions, and mean acceptance length = 1 + accepted / drafts <= 1 + k.

    Args:
        delta: a counter difference (``after.minus(before)``); counts.
        num_speculative_tokens: the variant's ``num_speculative_tokens`` (the bound
            k), or None when the variant does not say (k-bounds are then skipped).

    Returns:
        One message per violation, naming the counters and their numbers; empty when
        the difference is consistent.
    """
    out: list[str] = []
    d, dt, acc, pos = delta.drafts, delta.draft_tokens, delta.accepted_tokens, delta.accepted_per_pos
    if acc > dt + _EPS:
        out.append(f"accepted tokens {acc:g} > draft tokens {dt:g} (acceptance rate "
                   f"{acc / dt if dt else float('inf'):.3f} > 1)")
    for i in range(1, len(pos)):
        if pos[i] > pos[i - 1] + _EPS:
            out.append(
                f"accepted at position {i} ({pos[i]:g}) > accepted at position {i - 1} ({pos[i - 1]:g}): "
                "per-position acceptance must not increase with the position"
            )
    if pos and pos[0] > d + _EPS:
        out.append(f"accepted at position 0 ({pos[0]:g}) > drafts {d:g}")
    if pos and abs(sum(pos) - acc) > _EPS:
        out.append(f"sum of per-position accepted tokens {sum(pos):g} != accepted tokens {acc:g}")
    k = num_speculative_tokens
    if k is not None:
        if dt > k * d + _EPS:
            out.append(f"draft tokens {dt:g} > num_speculative_tokens {k} x drafts {d:g}")
        if len([p for p in pos[k:] if p > _EPS]) > 0:
            out.append(f"accepted tokens at positions >= num_speculative_tokens {k}: {list(pos[k:])}")
        if d > 0 and 1.0 + acc / d > 1.0 + k + _EPS:
            out.append(
                f"mean acceptance length 1 + {acc:g}/{d:g} = {1.0 + acc / d:.3f} > 1 + num_speculative_tokens = {1 + k}"
            )
    return tuple(out)


def parse_engine_counters(text: str, source: str = "/metrics") -> EngineCountersRecord:
    """vLLM's engine counters (:data:`harness.records.measures.ENGINE_COUNTERS`) from
    Prometheus text, each summed over every label (engines, model names); a counter the
    server does not expose is None.

    Raises:
        MetricsError: the text cannot be parsed, or a value is negative or not finite.
    """
    samples = _samples(text, source)
    out: dict[str, float | None] = {}
    for field, base in ENGINE_COUNTERS.items():
        try:
            out[field] = sum(_sum_counter(samples, base, source).values())
        except MetricsError as e:
            if "missing from" not in str(e):
                raise
            out[field] = None
    return EngineCountersRecord(**out)
