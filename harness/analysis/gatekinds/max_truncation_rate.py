"""Gate kind ``max_truncation_rate``: per variant and task (when set), completions cut by ``max_tokens`` /
successful completions within its limit."""

from __future__ import annotations

from typing import Literal

from harness.analysis.gatekinds._common import result, task_score
from harness.analysis.measurements import Measurements
from harness.config.gates.registry import GateBase, Place, gate
from harness.records.run_record import GateResult


@gate(scope="task", order=30, reads_generation=True, settings=("max_truncation_rate",),
      doc="(set `gates.max_truncation_rate`; off by default) completions cut by `max_tokens` / successful "
          "completions <= the limit")
class MaxTruncationRate(GateBase):
    """Completions cut by ``max_tokens`` (``finish_reason: length``) / successful
    completions <= ``limit`` (fraction); set ``gates.max_truncation_rate`` (off by default)."""

    kind: Literal["max_truncation_rate"] = "max_truncation_rate"
    op: Literal["<="] = "<="
    limit: float

    @classmethod
    def plan(cls, at: Place) -> MaxTruncationRate | None:
        """Every variant and task whose settings give ``max_truncation_rate``."""
        limit = at.settings.max_truncation_rate
        if limit is None:
            return None
        return cls.at(at, limit=limit, description="share of completions cut by max_tokens (finish_reason length)")

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """``max_truncation_rate``: completions cut by ``max_tokens`` / successful
        completions <= limit; no successful request fails."""
        sc, none = task_score(self, m)
        if sc is None:
            return none  # type: ignore[return-value]
        if sc.truncated_rate is None:
            return result(self, None, self.limit, False, "no request succeeded: truncation cannot be computed")
        ok = sc.truncated_rate <= self.limit
        n = sc.num_requests - sc.error_count
        return result(
            self, sc.truncated_rate, self.limit, ok,
            f"{sc.truncated} of {n} completions cut by max_tokens (truncated share {sc.truncated_rate:.3f}, limit "
            f"{self.limit})",
            sc.truncated_ids if not ok else (),
        )
