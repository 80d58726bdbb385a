"""What one task produced on one variant's engine, before judging: the raw completions,
the speculative-decoding counter difference over the task and its seconds.

The engine session builds it (:meth:`harness.engine.session.VariantSession.run_task`),
the task stage judges its completions (:mod:`harness.tasks.base`), and the record's
result construction reads its counters and seconds (:mod:`harness.records.results`);
it lives in the record stage, the earliest of the three.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.records.completions import Completion
from harness.records.measures import (
    EngineCountersRecord,
    SpecDecodeCountersRecord,
    SpecDecodeRecord,
)
from harness.records.shape_proof import ShapeProofRecord


@dataclass(frozen=True)
class TaskOutcome:
    """What one task produced on one variant.

    Attributes:
        completions: one raw completion per request, in request order.
        spec_counters: counter difference over the task (None when the variant does
            not speculate).
        spec_metrics: ratios derived from ``spec_counters`` (None likewise).
        metrics_error: why speculative metrics could not be read, else None.
        seconds: wall-clock seconds of the task.
        engine_counters: vLLM's engine counters' difference over the task (prompt and
            generation tokens, preemptions, prefix cache), or None with
            ``engine_counters_error``.
        shape: a traffic shape's proof (:mod:`harness.tasks.shapes`); None for other kinds.
        peak_in_flight: the most requests evalrun had in flight at once (its client's
            own count), or None when someone else sent them.
    """

    completions: tuple[Completion, ...]
    spec_counters: SpecDecodeCountersRecord | None
    spec_metrics: SpecDecodeRecord | None
    metrics_error: str | None
    seconds: float
    engine_counters: EngineCountersRecord | None = None
    engine_counters_error: str | None = None
    shape: ShapeProofRecord | None = None
    peak_in_flight: int | None = None
