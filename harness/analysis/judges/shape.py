"""Judges of the family "the traffic shape happened" (:mod:`harness.config.gates.shape`): ``shape_proven``."""

from __future__ import annotations

from harness.analysis.judges.common import judges, result
from harness.analysis.measurements import Measurements
from harness.config import gates as G
from harness.records.run_record import GateResult


@judges(G.ShapeProven)
def judge_shape_proven(g: G.ShapeProven, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """``shape_proven``: the task's shape proof exists and names no problem."""
    proof = m.task(g.variant, g.task).shape
    if proof is None:
        return result(g, None, None, False, "no shape proof recorded: the shape cannot be shown to have happened")
    return result(g, None, None, not proof.problems, proof.describe())
