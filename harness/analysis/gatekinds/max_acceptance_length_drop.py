"""Gate kind ``max_acceptance_length_drop``: per comparison of two speculative variants and gated task, the
drop of the mean acceptance length within its band (a rise beyond it is reported beside)."""

from __future__ import annotations

from typing import Literal

from harness.analysis.budget import GateTest
from harness.analysis.gatekinds import _common
from harness.analysis.gatekinds._acceptance import (
    both_sides,
    drop_test,
    rise_note,
    run_sd_of,
    unit_note,
)
from harness.analysis.gatekinds._common import Budgeted, budget_fields, budget_verdict, result
from harness.analysis.measurements import Measurements
from harness.config.gates.registry import Place, gate
from harness.records.run_record import GateResult


@gate(scope="comparison", order=40, reads_generation=True, settings=("max_acceptance_length_drop",),
      doc="baseline - candidate mean acceptance length <= limit; a **rise** beyond the same band is reported "
          "beside it in the detail (not failed: a better drafter rises too, but a rise can be a bug, e.g. "
          "miscounted drafts). With the false-alarm budget: fails only when a test with the request as the unit "
          "shows the drop beyond the limit (a margin) at the config's budget (Holm); between two variants with the "
          "same speculative config two-sided: a rise beyond the margin fails too")
class MaxAcceptanceLengthDrop(Budgeted):
    """Mean acceptance length baseline - candidate <= ``limit`` (tokens). With ``budget``: a
    margin test, the request as the unit (:func:`._acceptance.drop_test`), two-sided when
    ``two_sided`` (both variants have the same speculative config)."""

    kind: Literal["max_acceptance_length_drop"] = "max_acceptance_length_drop"
    op: Literal["<="] = "<="
    limit: float
    #: run-to-run spread of acceptance added to the tests\' variance (logit sd; budget only)
    run_sd: float = 0.0
    two_sided: bool = False

    @classmethod
    def plan(cls, at: Place) -> MaxAcceptanceLengthDrop | None:
        """Every gated task of a comparison of two speculative variants with ``max_acceptance_length_drop``."""
        comp = at.comp
        both = all(at.config.variants[v].speculative_config is not None for v in (comp.baseline, comp.candidate))
        if comp.max_acceptance_length_drop is None or not both:
            return None
        budget = at.config.false_alarm_budget
        if budget is not None:
            same = at.config.variants[comp.baseline].speculative_config == \
                at.config.variants[comp.candidate].speculative_config
            return cls.at(at, limit=comp.max_acceptance_length_drop, **budget_fields(at),
            run_sd=run_sd_of(budget, at.settings.acceptance_run_sd), two_sided=same,
                          description=(f"mean acceptance length {'change' if same else 'drop'} from baseline to "
                                       f"candidate: fails only when a test with the request as the unit shows it "
                                       f"beyond the margin {comp.max_acceptance_length_drop}"
                                       + (" either way (same speculative config)" if same else "")
                                       + f" (false_alarm_budget {budget:g}, Holm over the config's tested gates)"))
        return cls.at(at, limit=comp.max_acceptance_length_drop,
                      description="drop of mean acceptance length from baseline to candidate (a rise beyond the "
                                  "same band is reported beside it)")

    def test(self, m: Measurements) -> GateTest | None:
        """Welch's t on accepted tokens per draft (= mean acceptance length - 1), the request as
        the unit; two-sided (twice the smaller one-sided p) when ``two_sided``. None: missing."""
        (a, _), (b, _) = both_sides(m, self, self.run_sd)
        if a is None or b is None:
            return None
        p_drop, p_rise = drop_test(a, b, margin=self.limit, two_sided=self.two_sided)
        p = min(1.0, 2 * min(p_drop, p_rise)) if self.two_sided else p_drop
        return GateTest(p, 0.0 if min(a.n, b.n) >= 2 else 1.0,
                        f"Welch t of a {'change' if self.two_sided else 'drop'} beyond {self.limit:g} "
                        f"({unit_note(a, b)})")

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """With ``budget``: :func:`budget_verdict` of :meth:`test`. Without:
        ``max_acceptance_length_drop``: baseline - candidate mean acceptance length <= limit
        (:func:`drop_verdict`, no significance test); missing on either side fails."""
        a, b = m.task(self.baseline, self.task).spec, m.task(self.variant, self.task).spec
        if a is None or b is None or a.mean_acceptance_length is None or b.mean_acceptance_length is None:
            return result(self, None, self.limit, False, "mean acceptance length missing on one side (no drafts?)")
        drop = a.mean_acceptance_length - b.mean_acceptance_length
        t = self.test(m) if self.budget is not None else None
        if t is not None:
            ok, how = budget_verdict(self, t, adjusted_p)
            return result(self, drop, self.limit, ok,
                          f"mean acceptance length {self.baseline} {a.mean_acceptance_length:.3f} -> {self.variant} "
                          f"{b.mean_acceptance_length:.3f} (drop {drop:.3f}, margin {self.limit}); {how}"
                          + ("" if ok else f"; FAILED: the acceptance length {'dropped' if drop > 0 else 'ROSE'} "
                                           "beyond the margin"))
        return result(
            self, drop, self.limit, _common.drop_verdict(drop, self.limit).passed,
            f"mean acceptance length {self.baseline} {a.mean_acceptance_length:.3f} -> {self.variant} "
            f"{b.mean_acceptance_length:.3f}" + rise_note(drop, self.limit),
        )
