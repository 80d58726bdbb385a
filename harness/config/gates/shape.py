"""Gate family "the traffic shape happened": ``shape_proven``."""

from __future__ import annotations

from typing import Literal

from harness.config.gates.registry import GateBase, GateKind, Place, gate


@gate(scope="task", order=40,
      doc="(a `kind: shape` task) the engine's own counters over the task prove the traffic shape happened: "
          "`vllm:prompt_tokens` grew by at least the prompt tokens sent, `vllm:generation_tokens` grew, a chunk "
          "edge had a prompt longer than the chunk, no request failed; counters that cannot be read fail it "
          "([configuration.md](configuration.md), \"Traffic shapes\")")
class ShapeProven(GateBase):
    """A traffic shape (``kind: shape`` task) happened, by the engine's own counters
    (:func:`harness.tasks.shapes.shape_proof`): a shape without its proof fails closed."""

    kind: Literal[GateKind.SHAPE_PROVEN] = GateKind.SHAPE_PROVEN
    op: Literal["=="] = "=="

    @classmethod
    def plan(cls, at: Place) -> ShapeProven | None:
        """Every variant on a ``kind: shape`` task."""
        if at.task is None or at.config.tasks[at.task].kind != "shape":
            return None
        return cls.at(at, description="the engine's counters prove the traffic shape happened")
