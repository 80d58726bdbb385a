"""Gate kind ``baseline_readable``: once per config, fails only when its stored baseline file exists but
cannot be read."""

from __future__ import annotations

from typing import Literal

from harness.analysis.gatekinds._common import result
from harness.analysis.measurements import Measurements
from harness.config.gates.registry import GateBase, Place, gate
from harness.records.run_record import GateResult


@gate(scope="baseline_file", order=10, doc="only when the baseline file exists but cannot be read: fails")
class BaselineReadable(GateBase):
    """The config's stored baseline file exists but cannot be read: a failing gate, so a
    corrupt baseline never passes silently (reported only when that happens)."""

    kind: Literal["baseline_readable"] = "baseline_readable"
    op: Literal["=="] = "=="

    @classmethod
    def plan(cls, at: Place) -> BaselineReadable:
        """Once per config."""
        return cls.at(at, description="the stored baseline file can be read (reported only when it cannot)")

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """``baseline_readable``: the stored baseline file was read (``m.baseline_error`` None)."""
        err = m.baseline_error
        return result(self, None, None, err is None, "the stored baseline was read" if err is None else err)
