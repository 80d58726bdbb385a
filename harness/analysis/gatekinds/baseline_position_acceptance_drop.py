"""Gate kind ``baseline_position_acceptance_drop``: per speculative variant and task, the per-position rule
(:func:`._position.position_verdict`) against the stored baseline."""

from __future__ import annotations

from typing import Literal

from harness.analysis.budget import GateTest
from harness.analysis.gatekinds._acceptance import acceptance_estimates, run_sd_of, stored_estimates
from harness.analysis.gatekinds._common import Budgeted, budget_fields, budget_verdict, no_stored, result, stored_task
from harness.analysis.gatekinds._position import SETTINGS, position_budget_detail, position_test, position_verdict
from harness.analysis.measurements import Measurements
from harness.config.gates.registry import Place, gate
from harness.records.run_record import GateResult


@gate(scope="baseline_task", order=30, reads_generation=True, settings=SETTINGS,
      doc="the same per-position rule for one speculative variant against its stored baseline")
class BaselinePositionAcceptanceDrop(Budgeted):
    """:class:`MaxPositionAcceptanceDrop` of one speculative variant against its stored
    baseline (the baseline's drafts and per-position rates). ``baseline`` is filled with
    ``baseline:<run id>`` when judged."""

    kind: Literal["baseline_position_acceptance_drop"] = "baseline_position_acceptance_drop"
    op: Literal["<="] = "<="
    limit: float
    #: run-to-run spread of acceptance added to the tests\' variance (logit sd; budget only)
    run_sd: float = 0.0
    alpha: float = 0.05

    @classmethod
    def plan(cls, at: Place) -> BaselinePositionAcceptanceDrop | None:
        """Every speculative variant and task whose settings give ``position_acceptance_rtol``."""
        g = at.settings
        if at.variant_spec.speculative_config is None or g.position_acceptance_rtol is None:
            return None
        budget = at.config.false_alarm_budget
        return cls.at(
            at, limit=g.position_acceptance_rtol, alpha=g.position_acceptance_alpha, **budget_fields(at),
            run_sd=run_sd_of(budget, at.settings.acceptance_run_sd),
            description=(f"per draft position: fails only when a test with the request as the unit shows the "
                         f"acceptance rate below (1 - {g.position_acceptance_rtol:g}) x the stored baseline's "
                         f"(false_alarm_budget {budget:g}, Holm)") if budget is not None else (
                f"per draft position: acceptance rate not below (1 - "
                         f"{g.position_acceptance_rtol:g}) x the stored baseline's while significantly "
                         f"lower (one-sided two-proportion z test, Holm across positions, alpha "
                         f"{g.position_acceptance_alpha:g})"),
        )

    def test(self, m: Measurements) -> GateTest | None:
        """:func:`position_test`, one-sided, against the stored baseline."""
        bt, _ = stored_task(self, m)
        if bt is None:
            return None
        t = position_test(stored_estimates(bt, self.run_sd)[1],
                          acceptance_estimates(m, self, self.variant, self.run_sd)[1], self.limit, two_sided=False)
        return t[0] if t is not None else None

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """``baseline_position_acceptance_drop``: :func:`position_verdict` of the variant now
        against its stored baseline; a baseline without drafts is NOT RUN, none now fails."""
        bt, label = stored_task(self, m)
        if bt is None:
            return no_stored(self, label)
        base = bt.spec_decode
        if base is None or base.drafts <= 0 or not base.per_position_acceptance:
            return result(self, None, self.limit, None, "not run: the baseline has no per-position acceptance",
                          baseline=label)
        sm = m.task(self.variant, self.task).spec
        if sm is None or sm.drafts <= 0:
            return result(self, None, self.limit, False, "per-position acceptance missing now (no drafts?)",
                          baseline=label)
        if self.budget is not None:
            ea = stored_estimates(bt, self.run_sd)[1]
            eb = acceptance_estimates(m, self, self.variant, self.run_sd)[1]
            t = position_test(ea, eb, self.limit, two_sided=False)
            if t is not None:
                ok, how = budget_verdict(self, t[0], adjusted_p)
                rel = [(x.value - y.value) / x.value for x, y in zip(ea, eb) if x is not None and y is not None
                       and x.value > 0]
                detail = position_budget_detail(ea, eb, t[1], self.budget, ("baseline", "now"))
                return result(self, max(rel) if rel else None, self.limit, ok,
                              f"{detail}; {how}" + ("" if ok else "; FAILED: a position below the band"),
                              baseline=label)
        observed, ok, detail = position_verdict(base, sm, self.limit, self.alpha, ("baseline", "now"))
        return result(self, observed, self.limit, ok, detail, baseline=label)
