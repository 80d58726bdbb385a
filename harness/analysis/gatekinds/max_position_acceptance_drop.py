"""Gate kind ``max_position_acceptance_drop``: per comparison of two variants with the same speculative
config and gated task, no draft position's acceptance rate both below the band and
significantly lower (:func:`._position.position_verdict`)."""

from __future__ import annotations

from typing import Literal

from harness.analysis.gatekinds._common import result
from harness.analysis.gatekinds._position import SETTINGS, position_verdict
from harness.analysis.measurements import Measurements
from harness.config.gates.registry import GateBase, Place, gate
from harness.records.run_record import GateResult


@gate(scope="comparison", order=50, reads_generation=True, settings=SETTINGS,
      doc="between two speculative variants with the same speculative config (`spec_sync -> spec_async`, which "
          "must accept alike): per draft position i, the candidate's acceptance rate accepted_per_pos[i] / drafts "
          "is not both below `(1 - position_acceptance_rtol)` x the baseline's **and** significantly lower; a "
          "failure names the position and both rates (\"Per-position acceptance\" below)")
class MaxPositionAcceptanceDrop(GateBase):
    """Per draft position i, between two speculative variants with the same speculative
    config (they must accept alike): the candidate's acceptance rate accepted_per_pos[i] /
    drafts must not be below ``(1 - limit)`` times the baseline's while significantly
    lower (one-sided pooled two-proportion z test on the counts, Holm across the
    positions, at ``alpha``); a failure names the position and both rates. A position
    that rose beyond the band is reported beside, not failed. ``limit`` is the relative
    tolerance (vLLM's spec-decode tests: 0.05)."""

    kind: Literal["max_position_acceptance_drop"] = "max_position_acceptance_drop"
    op: Literal["<="] = "<="
    limit: float
    alpha: float = 0.05

    @classmethod
    def plan(cls, at: Place) -> MaxPositionAcceptanceDrop | None:
        """Every gated task of a comparison of two variants with the same (non-null)
        speculative config (the same drafter must accept alike, position by position),
        when the settings give ``position_acceptance_rtol``."""
        comp, g = at.comp, at.settings
        spec_a = at.config.variants[comp.baseline].speculative_config
        spec_b = at.config.variants[comp.candidate].speculative_config
        if spec_a is None or spec_b is None or spec_a != spec_b or g.position_acceptance_rtol is None:
            return None
        return cls.at(
            at, limit=g.position_acceptance_rtol, alpha=g.position_acceptance_alpha,
            description=(f"per draft position: acceptance rate not below (1 - {g.position_acceptance_rtol:g}) "
                         f"x {comp.baseline}'s while significantly lower (one-sided two-proportion z test, "
                         f"Holm across positions, alpha {g.position_acceptance_alpha:g})"),
        )

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """``max_position_acceptance_drop``: :func:`position_verdict` of the candidate against the
        baseline variant; speculative metrics missing or without drafts on either side fail."""
        a, b = m.task(self.baseline, self.task).spec, m.task(self.variant, self.task).spec
        if a is None or b is None or a.drafts <= 0 or b.drafts <= 0:
            return result(self, None, self.limit, False, "per-position acceptance missing on one side (no drafts?)")
        observed, ok, detail = position_verdict(a, b, self.limit, self.alpha, (self.baseline or "", self.variant))
        return result(self, observed, self.limit, ok, detail)
