"""Gate kind ``min_acceptance_length``: per speculative variant and task, the mean acceptance length at
least its minimum."""

from __future__ import annotations

from typing import Literal

from harness.analysis.budget import GateTest, margin_p
from harness.analysis.gatekinds._acceptance import acceptance_estimates, drafts, run_sd_of, unit_note
from harness.analysis.gatekinds._common import Budgeted, budget_fields, budget_verdict, result, speculative
from harness.analysis.measurements import Measurements
from harness.config.gates.registry import Place, gate
from harness.records.run_record import GateResult


@gate(scope="task", order=60, reads_generation=True, settings=("min_acceptance_length",),
      doc="mean acceptance length >= the minimum; with the false-alarm budget: fails only when a test with the "
          "request as the unit shows it below the minimum at the config's budget (Holm)")
class MinAcceptanceLength(Budgeted):
    """Mean acceptance length (1 + accepted tokens / drafts, tokens) >= ``limit``; with
    ``budget``, fails only when the one-sample test (request as the unit, run spread
    ``run_sd`` added) shows it below ``limit``."""

    kind: Literal["min_acceptance_length"] = "min_acceptance_length"
    op: Literal[">="] = ">="
    limit: float
    #: run-to-run spread of acceptance added to the test's variance (logit sd; budget only)
    run_sd: float = 0.0

    @classmethod
    def plan(cls, at: Place) -> MinAcceptanceLength | None:
        """Every speculative variant and task whose settings give ``min_acceptance_length``."""
        limit = at.settings.min_acceptance_length
        if not speculative(at) or limit is None:
            return None
        budget = at.config.false_alarm_budget
        return cls.at(at, limit=limit, **budget_fields(at), run_sd=run_sd_of(budget, at.settings.acceptance_run_sd),
                      description="mean acceptance length = 1 + accepted tokens / drafts" + (
                          f"; fails only when a test with the request as the unit shows it below {limit} "
                          f"(false_alarm_budget {budget:g}, Holm)" if budget is not None else ""))

    def test(self, m: Measurements) -> GateTest | None:
        """Student's t of "mean acceptance length < limit" (None: no drafts)."""
        e = acceptance_estimates(m, self, self.variant, self.run_sd)[0]
        if e is None:
            return None
        return GateTest(margin_p((self.limit - 1.0) - e.value, e.se ** 2, e.df), 0.0 if e.n >= 2 else 1.0,
                        f"t test of a mean acceptance length below {self.limit:g} ({unit_note(e)})")

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """``min_acceptance_length``: mean acceptance length >= limit; no drafts fails."""
        sm = drafts(self, m)
        if isinstance(sm, GateResult):
            return sm
        mal = sm.mean_acceptance_length
        assert mal is not None, "a number when drafts > 0 (_drafts)"
        t = self.test(m) if self.budget is not None else None
        if t is not None:
            ok, how = budget_verdict(self, t, adjusted_p)
            return result(self, mal, self.limit, ok,
                          f"mean acceptance length {mal:.3f} (1 + {sm.accepted_tokens:.0f}/{sm.drafts:.0f}) vs minimum "
                          f"{self.limit}; {how}" + ("" if ok else "; FAILED: below the minimum"))
        ok = mal >= self.limit
        return result(
            self, mal, self.limit, ok,
            f"mean acceptance length {mal:.3f} (1 + {sm.accepted_tokens:.0f}/{sm.drafts:.0f}) vs minimum {self.limit}",
        )
