"""Gate kind ``max_error_rate``: per variant and task, failed requests / requests within its limit."""

from __future__ import annotations

from typing import Literal

from harness.analysis.gatekinds._common import result, task_score
from harness.analysis.measurements import Measurements
from harness.config.gates.registry import GateBase, Place, gate
from harness.records.run_record import GateResult


@gate(scope="task", order=20, settings=("max_error_rate",),
      doc="failed requests / requests <= the limit (default 0)")
class MaxErrorRate(GateBase):
    """Failed requests / requests <= ``limit`` (a failed request is never a wrong answer)."""

    kind: Literal["max_error_rate"] = "max_error_rate"
    op: Literal["<="] = "<="
    limit: float

    @classmethod
    def plan(cls, at: Place) -> MaxErrorRate:
        """Every variant and task."""
        return cls.at(at, limit=at.settings.max_error_rate,
                      description="share of failed requests (never scored as wrong answers)")

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """``max_error_rate``: failed requests / requests <= limit."""
        sc, none = task_score(self, m)
        if sc is None:
            return none  # type: ignore[return-value]
        ok = sc.error_rate <= self.limit
        return result(
            self, sc.error_rate, self.limit, ok,
            f"{sc.error_count} of {sc.num_requests} requests failed (error rate {sc.error_rate:.3f}, "
            f"limit {self.limit})",
        )
