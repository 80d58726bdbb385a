"""A traffic shape's proof in the record: what the shape sent and whether the engine's
counters prove it happened (:mod:`harness.tasks.shapes` and its kinds' modules)."""

from __future__ import annotations

from pydantic import Field

from harness.records.measures import EngineCountersRecord, Measure


class ShapeProofRecord(Measure):
    """What a traffic shape sent and whether the engine's counters prove it happened
    (:mod:`harness.tasks.shapes`).

    Attributes:
        shape: the shape's kind (``prompt_edges``).
        edges: edge name -> length in tokens.
        prompt_lengths: length in tokens -> requests sent with it.
        places: ``edge/off<offset>`` (e.g. ``spec_k2/off+0``) -> requests sent there.
        prompt_tokens_sent: sum of the prompt lengths sent.
        counters: the engine counters' difference over the task, or None.
        problems: why the shape is not proven (empty: proven).
        not_run: why the shape cannot happen on this variant (e.g. prefix caching off in
            its effective settings): every gate of the task on the variant is NOT RUN
            with it (never passed); None: it can.
        notes: what the proof measured beside the problems (bounds, per-pass counters,
            within-variant checks that are reported, not gated).
        pass_counters, peak_in_flight: per pass of a shape sent in passes (``pressure``,
            ``c8``): its engine counters' difference (or None) and the most requests the
            client had in flight at once (:mod:`harness.tasks.shape_load`); empty otherwise.
    """

    shape: str
    edges: dict[str, int]
    prompt_lengths: dict[str, int]
    prompt_tokens_sent: int
    places: dict[str, int] = Field(default_factory=dict)
    counters: EngineCountersRecord | None = None
    problems: tuple[str, ...] = ()
    not_run: str | None = None
    notes: tuple[str, ...] = ()
    pass_counters: dict[str, EngineCountersRecord | None] = Field(default_factory=dict)
    peak_in_flight: dict[str, int] = Field(default_factory=dict)

    def describe(self) -> str:
        """One line: proven or the problems, the edges, the tokens sent and the counters."""
        c = self.counters
        seen = ("" if c is None else
                f"; engine counters: prompt tokens {c.prompt_tokens}, generation tokens {c.generation_tokens}, "
                f"preemptions {c.preemptions}, prefix cache hits/queries {c.prefix_cache_hits}/"
                f"{c.prefix_cache_queries}")
        edges = "".join(f"edge {k} = {v}, " for k, v in self.edges.items()) + "".join(
            f"pass {k} peak in flight {v}, " for k, v in self.peak_in_flight.items())
        head = (f"shape {self.shape} not run: {self.not_run}" if self.not_run is not None
                else f"shape {self.shape} not proven: " + "; ".join(self.problems) if self.problems
                else f"shape {self.shape} proven")
        notes = "".join(f"; {x}" for x in self.notes)
        return f"{head} ({edges}{self.prompt_tokens_sent} prompt tokens sent){seen}{notes}"
