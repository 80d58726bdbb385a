"""The sampled verdict's scoring step of one config (part of the run record,
:class:`~harness.records.run_record.ConfigResult`'s ``scoring``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from harness.records.bounds import Bounded

__all__ = ["ScoringRecord"]


class ScoringRecord(Bounded, BaseModel):
    """The sampled verdict's scoring step of one config (:mod:`harness.run.sampled_steps`):
    the scorer's server started again after every variant sampled.

    Attributes:
        scorer: the non-speculative variant whose server scored.
        scored: ``<variant>/<task>`` entries scored.
        completions: completions scored (one prompt-only request each, plus ``/tokenize``).
        startup_seconds, scoring_seconds, seconds: the server's start-up, the scoring
            requests, the whole step (start-up to stopped), in seconds.
        error: why the step could not run, else None.
        sampled: ``<baseline>-><candidate>/<task>`` -> the comparison's test
            (:class:`~harness.records.measures.SampledRecord` as a mapping).
        purpose: ``prefix`` for the step that scores divergences at the baseline's prefix
            (:mod:`harness.run.prefix_steps`; ``scored`` then names
            ``<baseline>-><candidate>/<task>`` and ``completions`` counts its requests);
            absent for the sampled verdict's step.
    """

    scorer: str
    scored: list[str] = []
    completions: int = 0
    startup_seconds: float | None = None
    scoring_seconds: float | None = None
    seconds: float | None = None
    error: str | None = None
    sampled: dict[str, dict[str, Any]] = {}
    purpose: str | None = Field(default=None, exclude_if=lambda v: v is None)
