"""Gate family "the stored baseline": ``baseline_readable`` (the drops against it are in
their measure's family: :mod:`.accuracy`, :mod:`.acceptance`, :mod:`.position`)."""

from __future__ import annotations

from typing import Literal

from harness.config.gates.registry import GateBase, GateKind, Place, gate


@gate(scope="baseline_file", order=10, doc="only when the baseline file exists but cannot be read: fails")
class BaselineReadable(GateBase):
    """The config's stored baseline file exists but cannot be read: a failing gate, so a
    corrupt baseline never passes silently (reported only when that happens)."""

    kind: Literal[GateKind.BASELINE_READABLE] = GateKind.BASELINE_READABLE
    op: Literal["=="] = "=="

    @classmethod
    def plan(cls, at: Place) -> BaselineReadable:
        """Once per config."""
        return cls.at(at, description="the stored baseline file can be read (reported only when it cannot)")
