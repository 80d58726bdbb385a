"""Judges of the family "sampled outputs from the target's distribution"
(:mod:`harness.config.gates.sampled`): ``sampled_equivalence``."""

from __future__ import annotations

from harness.analysis.judges.common import judges, result
from harness.analysis.measurements import Measurements
from harness.analysis.sampled import sampled_verdict
from harness.config import gates as G
from harness.records.run_record import GateResult


@judges(G.SampledEquivalence)
def judge_sampled_equivalence(g: G.SampledEquivalence, m: Measurements,
                              adjusted_p: float | None = None) -> GateResult:
    """``sampled_equivalence``: :func:`harness.analysis.sampled.sampled_verdict`."""
    return result(g, *sampled_verdict(g, m, adjusted_p))
