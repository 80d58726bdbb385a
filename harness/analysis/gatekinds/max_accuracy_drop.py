"""Gate kind ``max_accuracy_drop``: per comparison and gated task, the paired accuracy drop from baseline to
candidate within its limit and not significant (one-sided exact McNemar, Holm when asked)."""

from __future__ import annotations

from typing import Literal

from harness.analysis.gatekinds import _common
from harness.analysis.gatekinds._common import result, truncation_note
from harness.analysis.measurements import Measurements
from harness.config.gates.registry import GateBase, Place, gate
from harness.records.run_record import GateResult


@gate(scope="comparison", order=10, settings=("max_accuracy_drop", "expected_discordance"),
      doc="baseline - candidate accuracy <= limit **and** the candidate is not significantly worse (one-sided "
          "exact McNemar p >= alpha); an improvement never fails")
class MaxAccuracyDrop(GateBase):
    """Paired ``pipeline`` accuracy drop baseline - candidate <= ``limit`` (fraction) and
    not significantly worse (one-sided exact McNemar p >= ``alpha``; with
    ``multiple_testing`` ``holm``, the Holm-adjusted p-value over the config's
    accuracy-drop gates that ask for it)."""

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
        return cls.at(
            at, limit=comp.max_accuracy_drop, pipeline=g.accuracy_pipeline, alpha=comp.alpha,
            multiple_testing=g.multiple_testing,
            description=(f"paired {g.accuracy_pipeline} accuracy drop {comp.baseline} - {comp.candidate} "
                         f"<= {comp.max_accuracy_drop}, and not significantly worse "
                         f"(one-sided McNemar, alpha {comp.alpha}"
                         + (", Holm-corrected across the config's accuracy-drop gates)"
                            if g.multiple_testing == "holm" else ")")),
        )

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """``max_accuracy_drop``, one-sided (:func:`drop_verdict`): fails when baseline -
        candidate accuracy on the paired questions (under the gate's pipeline) exceeds the
        limit, or when the candidate is significantly worse (exact one-sided McNemar p <
        alpha; with ``adjusted_p`` given, the Holm-adjusted p-value of :func:`holm_p_values`
        is compared instead). An improvement never fails. No paired question: NOT RUN."""
        pc = m.paired(self.baseline, self.variant, self.task, self.pipeline)
        if pc is None:
            return result(self, None, self.limit, None, "not run: no paired questions")
        drop = pc.accuracy_a - pc.accuracy_b
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
