"""Gate family "requests answered in full": ``max_error_rate``, ``max_truncation_rate``."""

from __future__ import annotations

from typing import Literal

from harness.config.gates.registry import GateBase, GateKind, Place, gate


@gate(scope="task", order=20, settings=("max_error_rate",),
      doc="failed requests / requests <= the limit (default 0)")
class MaxErrorRate(GateBase):
    """Failed requests / requests <= ``limit`` (a failed request is never a wrong answer)."""

    kind: Literal[GateKind.MAX_ERROR_RATE] = GateKind.MAX_ERROR_RATE
    op: Literal["<="] = "<="
    limit: float

    @classmethod
    def plan(cls, at: Place) -> MaxErrorRate:
        """Every variant and task."""
        return cls.at(at, limit=at.settings.max_error_rate,
                      description="share of failed requests (never scored as wrong answers)")


@gate(scope="task", order=30, reads_generation=True, settings=("max_truncation_rate",),
      doc="(set `gates.max_truncation_rate`; off by default) completions cut by `max_tokens` / successful "
          "completions <= the limit")
class MaxTruncationRate(GateBase):
    """Completions cut by ``max_tokens`` (``finish_reason: length``) / successful
    completions <= ``limit`` (fraction); set ``gates.max_truncation_rate`` (off by default)."""

    kind: Literal[GateKind.MAX_TRUNCATION_RATE] = GateKind.MAX_TRUNCATION_RATE
    op: Literal["<="] = "<="
    limit: float

    @classmethod
    def plan(cls, at: Place) -> MaxTruncationRate | None:
        """Every variant and task whose settings give ``max_truncation_rate``."""
        limit = at.settings.max_truncation_rate
        if limit is None:
            return None
        return cls.at(at, limit=limit, description="share of completions cut by max_tokens (finish_reason length)")
