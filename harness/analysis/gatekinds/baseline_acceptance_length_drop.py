"""Gate kind ``baseline_acceptance_length_drop``: per speculative variant and task, the drop of the mean
acceptance length since the stored baseline within its band."""

from __future__ import annotations

from typing import Literal

from harness.analysis.budget import GateTest
from harness.analysis.gatekinds import _common
from harness.analysis.gatekinds._acceptance import (
    acceptance_estimates,
    drop_test,
    rise_note,
    run_sd_of,
    stored_estimates,
    unit_note,
)
from harness.analysis.gatekinds._common import (
    Budgeted,
    budget_fields,
    budget_verdict,
    no_stored,
    result,
    speculative,
    stored_task,
)
from harness.analysis.measurements import Measurements
from harness.config.gates.registry import Place, gate
from harness.records.run_record import GateResult


@gate(scope="baseline_task", order=20, reads_generation=True, settings=("baseline_max_acceptance_length_drop",),
      doc="mean acceptance length drop since the baseline <= `baseline_max_acceptance_length_drop`; a rise "
          "beyond the band is reported beside it. With the false-alarm budget: fails only when a test with the "
          "request as the unit shows the drop beyond the limit (a margin) at the config's budget (Holm)")
class BaselineAcceptanceLengthDrop(Budgeted):
    """Mean acceptance length drop since the stored baseline <= ``limit`` (tokens); with
    ``budget``, a one-sided margin test, the request as the unit."""

    kind: Literal["baseline_acceptance_length_drop"] = "baseline_acceptance_length_drop"
    op: Literal["<="] = "<="
    limit: float
    #: run-to-run spread of acceptance added to the tests\' variance (logit sd; budget only)
    run_sd: float = 0.0

    @classmethod
    def plan(cls, at: Place) -> BaselineAcceptanceLengthDrop | None:
        """Every speculative variant and task whose settings give ``baseline_max_acceptance_length_drop``."""
        limit = at.settings.baseline_max_acceptance_length_drop
        if not speculative(at) or limit is None:
            return None
        budget = at.config.false_alarm_budget
        return cls.at(at, limit=limit, **budget_fields(at),
            run_sd=run_sd_of(budget, at.settings.acceptance_run_sd),
                      description="mean acceptance length drop since the stored baseline (a rise beyond the same "
                                  "band is reported beside it)" + (
                                      f": fails only when a test with the request as the unit shows it beyond the "
                                      f"margin {limit} (false_alarm_budget {budget:g}, Holm)" if budget else ""))

    def test(self, m: Measurements) -> GateTest | None:
        """Welch's t of a drop beyond the margin, the stored side's standard error from its
        stored interval (else the fallback). None: missing."""
        bt, _ = stored_task(self, m)
        a = stored_estimates(bt, self.run_sd)[0] if bt is not None else None
        b = acceptance_estimates(m, self, self.variant, self.run_sd)[0]
        if a is None or b is None:
            return None
        return GateTest(drop_test(a, b, margin=self.limit)[0], 0.0 if min(a.n, b.n) >= 2 else 1.0,
                        f"Welch t of a drop beyond {self.limit:g} ({unit_note(a, b)})")

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """``baseline_acceptance_length_drop``: stored - current mean acceptance length <=
        limit (:func:`drop_verdict`); a baseline without one is NOT RUN, none now fails."""
        bt, label = stored_task(self, m)
        if bt is None:
            return no_stored(self, label)
        base_mal = bt.spec_decode.mean_acceptance_length if bt.spec_decode else None
        sm = m.task(self.variant, self.task).spec
        if base_mal is None:
            return result(self, None, self.limit, None, "not run: the baseline has no mean acceptance length",
                          baseline=label)
        if sm is None or sm.mean_acceptance_length is None:
            return result(self, None, self.limit, False,
                          f"mean acceptance length missing now (baseline {base_mal:.3f})", baseline=label)
        drop = base_mal - sm.mean_acceptance_length
        ci = bt.mean_acceptance_length_ci
        t = self.test(m) if self.budget is not None else None
        if t is not None:
            ok, how = budget_verdict(self, t, adjusted_p)
            return result(self, drop, self.limit, ok,
                          f"mean acceptance length baseline {base_mal:.3f} -> now {sm.mean_acceptance_length:.3f}: "
                          f"drop {drop:.3f}, margin {self.limit}; {how}"
                          + ("" if ok else "; FAILED: the drop is beyond the margin") + rise_note(drop, self.limit),
                          baseline=label)
        ok = _common.drop_verdict(drop, self.limit).passed
        return result(
            self, drop, self.limit, ok,
            f"mean acceptance length baseline {base_mal:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
            + f" -> now {sm.mean_acceptance_length:.3f}: drop {drop:.3f} " + ("<=" if ok else ">") + f" {self.limit}"
            + rise_note(drop, self.limit),
            baseline=label,
        )
