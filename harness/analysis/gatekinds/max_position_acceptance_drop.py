"""Gate kind ``max_position_acceptance_drop``: per comparison of two variants with the same speculative
config and gated task, no draft position's acceptance rate both below the band and
significantly lower (:func:`._position.position_verdict`)."""

from __future__ import annotations

from typing import Literal

from harness.analysis.budget import GateTest
from harness.analysis.gatekinds._acceptance import both_sides, run_sd_of
from harness.analysis.gatekinds._common import Budgeted, budget_fields, budget_verdict, result
from harness.analysis.gatekinds._position import SETTINGS, position_budget_detail, position_test, position_verdict
from harness.analysis.measurements import Measurements
from harness.config.gates.registry import Place, gate
from harness.records.run_record import GateResult


@gate(scope="comparison", order=50, reads_generation=True, settings=SETTINGS,
      doc="between two speculative variants with the same speculative config (`spec_sync -> spec_async`, which "
          "must accept alike): per draft position i, the candidate's acceptance rate accepted_per_pos[i] / drafts "
          "is not both below `(1 - position_acceptance_rtol)` x the baseline's **and** significantly lower; a "
          "failure names the position and both rates (\"Per-position acceptance\" below). With the false-alarm "
          "budget: fails only when a test with the request as the unit shows a position beyond the band, either "
          "way, at the config's budget (Holm)")
class MaxPositionAcceptanceDrop(Budgeted):
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
    #: run-to-run spread of acceptance added to the tests\' variance (logit sd; budget only)
    run_sd: float = 0.0
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
        budget = at.config.false_alarm_budget
        if budget is not None:
            return cls.at(at, limit=g.position_acceptance_rtol, alpha=g.position_acceptance_alpha, **budget_fields(at),
            run_sd=run_sd_of(budget, at.settings.acceptance_run_sd),
                          description=(f"per draft position: fails only when a test with the request as the unit "
                                       f"shows the acceptance rate beyond (1 -/+ {g.position_acceptance_rtol:g}) x "
                                       f"{comp.baseline}'s, either way (false_alarm_budget {budget:g}, Holm)"))
        return cls.at(
            at, limit=g.position_acceptance_rtol, alpha=g.position_acceptance_alpha,
            description=(f"per draft position: acceptance rate not below (1 - {g.position_acceptance_rtol:g}) "
                         f"x {comp.baseline}'s while significantly lower (one-sided two-proportion z test, "
                         f"Holm across positions, alpha {g.position_acceptance_alpha:g})"),
        )

    def test(self, m: Measurements) -> GateTest | None:
        """:func:`position_test`, two-sided (the same drafter must accept alike)."""
        (_, a), (_, b) = both_sides(m, self, self.run_sd)
        t = position_test(a, b, self.limit, two_sided=True)
        return t[0] if t is not None else None

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """``max_position_acceptance_drop``: :func:`position_verdict` of the candidate against the
        baseline variant; speculative metrics missing or without drafts on either side fail."""
        a, b = m.task(self.baseline, self.task).spec, m.task(self.variant, self.task).spec
        if a is None or b is None or a.drafts <= 0 or b.drafts <= 0:
            return result(self, None, self.limit, False, "per-position acceptance missing on one side (no drafts?)")
        if self.budget is not None:
            (_, ea), (_, eb) = both_sides(m, self, self.run_sd)
            t = position_test(ea, eb, self.limit, two_sided=True)
            if t is not None:
                ok, how = budget_verdict(self, t[0], adjusted_p)
                rel = [(x.value - y.value) / x.value for x, y in zip(ea, eb) if x is not None and y is not None
                       and x.value > 0]
                detail = position_budget_detail(ea, eb, t[1], self.budget, (self.baseline or "", self.variant))
                return result(self, max(rel) if rel else None, self.limit, ok,
                              f"{detail}; {how}" + ("" if ok else "; FAILED: a position beyond the band"))
        observed, ok, detail = position_verdict(a, b, self.limit, self.alpha, (self.baseline or "", self.variant))
        return result(self, observed, self.limit, ok, detail)
