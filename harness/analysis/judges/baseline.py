"""Judges of the family "the stored baseline" (:mod:`harness.config.gates.baseline`): ``baseline_readable``."""

from __future__ import annotations

from harness.analysis.judges.common import judges, result
from harness.analysis.measurements import Measurements
from harness.config import gates as G
from harness.records.run_record import GateResult


@judges(G.BaselineReadable)
def judge_baseline_readable(g: G.BaselineReadable, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """``baseline_readable``: the stored baseline file was read (``m.baseline_error`` None)."""
    err = m.baseline_error
    return result(g, None, None, err is None, "the stored baseline was read" if err is None else err)
