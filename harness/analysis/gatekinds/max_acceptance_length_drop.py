"""Gate kind ``max_acceptance_length_drop``: per comparison of two speculative variants and gated task, the
drop of the mean acceptance length within its band (a rise beyond it is reported beside)."""

from __future__ import annotations

from typing import Literal

from harness.analysis.gatekinds import _common
from harness.analysis.gatekinds._acceptance import rise_note
from harness.analysis.gatekinds._common import result
from harness.analysis.measurements import Measurements
from harness.config.gates.registry import GateBase, Place, gate
from harness.records.run_record import GateResult


@gate(scope="comparison", order=40, reads_generation=True, settings=("max_acceptance_length_drop",),
      doc="baseline - candidate mean acceptance length <= limit; a **rise** beyond the same band is reported "
          "beside it in the detail (not failed: a better drafter rises too, but a rise can be a bug, e.g. "
          "miscounted drafts)")
class MaxAcceptanceLengthDrop(GateBase):
    """Mean acceptance length baseline - candidate <= ``limit`` (tokens)."""

    kind: Literal["max_acceptance_length_drop"] = "max_acceptance_length_drop"
    op: Literal["<="] = "<="
    limit: float

    @classmethod
    def plan(cls, at: Place) -> MaxAcceptanceLengthDrop | None:
        """Every gated task of a comparison of two speculative variants with ``max_acceptance_length_drop``."""
        comp = at.comp
        both = all(at.config.variants[v].speculative_config is not None for v in (comp.baseline, comp.candidate))
        if comp.max_acceptance_length_drop is None or not both:
            return None
        return cls.at(at, limit=comp.max_acceptance_length_drop,
                      description="drop of mean acceptance length from baseline to candidate (a rise beyond the "
                                  "same band is reported beside it)")

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """``max_acceptance_length_drop``: baseline - candidate mean acceptance length <= limit
        (:func:`drop_verdict`, no significance test); missing on either side fails."""
        a, b = m.task(self.baseline, self.task).spec, m.task(self.variant, self.task).spec
        if a is None or b is None or a.mean_acceptance_length is None or b.mean_acceptance_length is None:
            return result(self, None, self.limit, False, "mean acceptance length missing on one side (no drafts?)")
        drop = a.mean_acceptance_length - b.mean_acceptance_length
        return result(
            self, drop, self.limit, _common.drop_verdict(drop, self.limit).passed,
            f"mean acceptance length {self.baseline} {a.mean_acceptance_length:.3f} -> {self.variant} "
            f"{b.mean_acceptance_length:.3f}" + rise_note(drop, self.limit),
        )
