"""Gate kind ``drafts_observed``: per speculative variant and task, at least one draft reported."""

from __future__ import annotations

from typing import Literal

from harness.analysis.gatekinds._acceptance import drafts
from harness.analysis.gatekinds._common import result, speculative
from harness.analysis.measurements import Measurements
from harness.config.gates.registry import GateBase, Place, gate
from harness.records.run_record import GateResult


@gate(scope="task", order=50, reads_generation=True, doc="a speculative variant reported drafts")
class DraftsObserved(GateBase):
    """A speculative variant reported at least ``limit`` (1) draft."""

    kind: Literal["drafts_observed"] = "drafts_observed"
    op: Literal[">="] = ">="
    limit: int = 1

    @classmethod
    def plan(cls, at: Place) -> DraftsObserved | None:
        """Every speculative variant and task."""
        if not speculative(at):
            return None
        return cls.at(at, description="a speculative variant must report drafts (no drafts observed = fail)")

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """``drafts_observed``: a speculative variant reported at least one draft."""
        sm = drafts(self, m)
        if isinstance(sm, GateResult):
            return sm
        # counters are integral counts (prometheus gives floats): report an integer
        return result(self, round(sm.drafts), self.limit, True,
                      f"{sm.drafts:.0f} drafts, {sm.draft_tokens:.0f} draft tokens")
