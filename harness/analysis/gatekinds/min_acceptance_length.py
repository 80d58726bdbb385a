"""Gate kind ``min_acceptance_length``: per speculative variant and task, the mean acceptance length at
least its minimum."""

from __future__ import annotations

from typing import Literal

from harness.analysis.gatekinds._acceptance import drafts
from harness.analysis.gatekinds._common import result, speculative
from harness.analysis.measurements import Measurements
from harness.config.gates.registry import GateBase, Place, gate
from harness.records.run_record import GateResult


@gate(scope="task", order=60, reads_generation=True, settings=("min_acceptance_length",),
      doc="mean acceptance length >= the minimum")
class MinAcceptanceLength(GateBase):
    """Mean acceptance length (1 + accepted tokens / drafts, tokens) >= ``limit``."""

    kind: Literal["min_acceptance_length"] = "min_acceptance_length"
    op: Literal[">="] = ">="
    limit: float

    @classmethod
    def plan(cls, at: Place) -> MinAcceptanceLength | None:
        """Every speculative variant and task whose settings give ``min_acceptance_length``."""
        limit = at.settings.min_acceptance_length
        if not speculative(at) or limit is None:
            return None
        return cls.at(at, limit=limit, description="mean acceptance length = 1 + accepted tokens / drafts")

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """``min_acceptance_length``: mean acceptance length >= limit; no drafts fails."""
        sm = drafts(self, m)
        if isinstance(sm, GateResult):
            return sm
        mal = sm.mean_acceptance_length
        assert mal is not None, "a number when drafts > 0 (_drafts)"
        ok = mal >= self.limit
        return result(
            self, mal, self.limit, ok,
            f"mean acceptance length {mal:.3f} (1 + {sm.accepted_tokens:.0f}/{sm.drafts:.0f}) vs minimum {self.limit}",
        )
