"""Gate kind ``shape_proven``: per variant on a ``kind: shape`` task, the engine's own counters prove
the traffic shape happened."""

from __future__ import annotations

from typing import Literal

from harness.analysis.gatekinds._common import result
from harness.analysis.measurements import Measurements
from harness.config.gates.registry import GateBase, Place, gate
from harness.records.run_record import GateResult


@gate(scope="task", order=40,
      doc="(a `kind: shape` task) the engine's own counters over the task prove the traffic shape happened: "
          "`vllm:prompt_tokens` grew by at least the prompt tokens sent, `vllm:generation_tokens` grew, a chunk "
          "edge had a prompt longer than the chunk, no request failed; counters that cannot be read fail it "
          "([configuration.md](configuration.md), \"Traffic shapes\")")
class ShapeProven(GateBase):
    """A traffic shape (``kind: shape`` task) happened, by the engine's own counters
    (:func:`harness.tasks.shapes.shape_proof`): a shape without its proof fails closed."""

    kind: Literal["shape_proven"] = "shape_proven"
    op: Literal["=="] = "=="

    @classmethod
    def plan(cls, at: Place) -> ShapeProven | None:
        """Every variant on a ``kind: shape`` task."""
        if at.task is None or at.config.tasks[at.task].kind != "shape":
            return None
        return cls.at(at, description="the engine's counters prove the traffic shape happened")

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """``shape_proven``: the task's shape proof exists and names no problem."""
        proof = m.task(self.variant, self.task).shape
        if proof is None:
            return result(self, None, None, False,
                          "no shape proof recorded: the shape cannot be shown to have happened")
        return result(self, None, None, not proof.problems, proof.describe())
