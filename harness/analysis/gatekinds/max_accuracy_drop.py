"""Gate kind ``max_accuracy_drop``: per comparison and gated task, the paired accuracy drop from baseline to
candidate within its limit and not significant (one-sided exact McNemar, Holm when asked)."""

from __future__ import annotations

from typing import Literal

from harness.analysis.budget import GateTest, paired_margin_p, paired_min_p
from harness.analysis.gatekinds import _common
from harness.analysis.gatekinds._common import Budgeted, budget_fields, budget_verdict, result, truncation_note
from harness.analysis.measurements import Measurements
from harness.config.gates.registry import Place, gate
from harness.records.run_record import GateResult


@gate(scope="comparison", order=10, settings=("max_accuracy_drop", "expected_discordance"),
      doc="with the false-alarm budget: fails only when an exact paired test shows the accuracy drop baseline - "
          "candidate beyond the limit (a non-inferiority margin) at the config's budget (Holm); without: drop <= "
          "limit **and** not significantly worse (one-sided exact McNemar p >= alpha); an improvement never fails")
class MaxAccuracyDrop(Budgeted):
    """Paired ``pipeline`` accuracy drop baseline - candidate. With ``budget``: fails only when
    the exact paired test of "drop > ``limit``" (:func:`harness.analysis.budget.paired_margin_p`)
    rejects at the config's budget, Holm over its tested gates. Without: drop <= ``limit``
    (fraction) and not significantly worse (one-sided exact McNemar p >= ``alpha``; with
    ``multiple_testing`` ``holm``, the Holm-adjusted p-value over the config's accuracy-drop
    gates that ask for it)."""

    kind: Literal["max_accuracy_drop"] = "max_accuracy_drop"
    op: Literal["<="] = "<="
    limit: float
    pipeline: str
    alpha: float = 0.05
    multiple_testing: Literal["none", "holm"] = "none"

    @classmethod
    def plan(cls, at: Place) -> MaxAccuracyDrop | None:
        """Every gated task of a comparison with ``max_accuracy_drop``."""
        comp, g = at.comp, at.settings
        if comp.max_accuracy_drop is None:
            return None
        budget = at.config.false_alarm_budget
        if budget is not None:
            return cls.at(
                at, limit=comp.max_accuracy_drop, pipeline=g.accuracy_pipeline, alpha=comp.alpha, **budget_fields(at),
                description=(f"paired {g.accuracy_pipeline} accuracy drop {comp.baseline} - {comp.candidate}: fails "
                             f"only when an exact paired test shows it beyond the margin {comp.max_accuracy_drop} "
                             f"(false_alarm_budget {budget:g}, Holm over the config's tested gates)"),
            )
        return cls.at(
            at, limit=comp.max_accuracy_drop, pipeline=g.accuracy_pipeline, alpha=comp.alpha,
            multiple_testing=g.multiple_testing,
            description=(f"paired {g.accuracy_pipeline} accuracy drop {comp.baseline} - {comp.candidate} "
                         f"<= {comp.max_accuracy_drop}, and not significantly worse "
                         f"(one-sided McNemar, alpha {comp.alpha}"
                         + (", Holm-corrected across the config's accuracy-drop gates)"
                            if g.multiple_testing == "holm" else ")")),
        )

    def test(self, m: Measurements) -> GateTest | None:
        """The exact paired test of "drop > limit" on the paired questions (None: none)."""
        pc = m.paired(self.baseline, self.variant, self.task, self.pipeline)
        if pc is None:
            return None
        return GateTest(paired_margin_p(len(pc.a_only), len(pc.b_only), pc.n, self.limit),
                        paired_min_p(pc.n, self.limit), f"exact paired test of drop > {self.limit:g}")

    def planned_min_p(self, n: int) -> float:
        """:func:`paired_min_p` at ``n`` questions and the gate's margin."""
        return paired_min_p(n, self.limit)

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """With ``budget``: :func:`budget_verdict` of :meth:`test`. Without: ``max_accuracy_drop``,
        one-sided (:func:`drop_verdict`): fails when baseline -
        candidate accuracy on the paired questions (under the gate's pipeline) exceeds the
        limit, or when the candidate is significantly worse (exact one-sided McNemar p <
        alpha; with ``adjusted_p`` given, the Holm-adjusted p-value of :func:`holm_p_values`
        is compared instead). An improvement never fails. No paired question: NOT RUN."""
        pc = m.paired(self.baseline, self.variant, self.task, self.pipeline)
        if pc is None:
            return result(self, None, self.limit, None, "not run: no paired questions")
        drop = pc.accuracy_a - pc.accuracy_b
        t = self.test(m) if self.budget is not None else None
        if t is not None:
            ok, how = budget_verdict(self, t, adjusted_p)
            detail = (f"{self.pipeline}: {self.baseline} {pc.accuracy_a:.4f} -> {self.variant} {pc.accuracy_b:.4f} on "
                      f"{pc.n} paired questions; {len(pc.a_only)} right only in {self.baseline}, {len(pc.b_only)} "
                      f"right only in {self.variant}; drop {drop:.4f}, margin {self.limit}; {how}"
                      + ("" if ok else "; FAILED: the drop is beyond the margin"
                         + truncation_note(m.task(self.variant, self.task).score, self.variant)))
            return result(self, drop, self.limit, ok, detail, pc.a_only if not ok else ())
        holm = adjusted_p is not None
        v = _common.drop_verdict(drop, self.limit, pc.one_sided_p_value if adjusted_p is None else adjusted_p,
                                 self.alpha, worse="significantly worse",
                                 test="one-sided McNemar " + ("Holm-adjusted " if holm else ""))
        detail = (
            f"{self.pipeline}: {self.baseline} {pc.accuracy_a:.4f} -> {self.variant} {pc.accuracy_b:.4f} on {pc.n} "
            "paired questions; "
            f"{len(pc.a_only)} right only in {self.baseline}, {len(pc.b_only)} right only in {self.variant}; "
            f"one-sided p={pc.one_sided_p_value:.4g}"
            + (f" (Holm-adjusted {adjusted_p:.4g})" if holm else "")
        )
        if not v.passed:
            detail += v.failure + truncation_note(m.task(self.variant, self.task).score, self.variant)
        return result(self, drop, self.limit, v.passed, detail, pc.a_only if not v.passed else ())
