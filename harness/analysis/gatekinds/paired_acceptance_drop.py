"""Gate kind ``paired_acceptance_drop``: per comparison of two speculative variants and gated
task, each question's acceptance rate on the candidate not significantly below the baseline's,
paired by question (vLLM's per-request metrics, :mod:`harness.analysis.per_request`)."""

from __future__ import annotations

from typing import Literal

from harness.analysis.gatekinds._common import result
from harness.analysis.measurements import Measurements
from harness.analysis.per_request import NO_PER_REQUEST, paired_by_question, requests_of
from harness.config.gates.registry import GateBase, Place, gate
from harness.records.run_record import GateResult

#: One-sided level of the gate's test.
ALPHA = 0.01


def paired_drop_p(diffs: list[float], limit: float) -> float:
    """One-sided p-value that the median per-question ``candidate - baseline`` rate is below
    ``-limit``: Wilcoxon signed-rank of ``diffs + limit``, ``alternative="less"``
    (``scipy.stats.wilcoxon``, zero differences dropped); 1.0 when every shifted difference is 0."""
    shifted = [d + limit for d in diffs]
    if not any(shifted):
        return 1.0
    from scipy import stats as sps

    return float(sps.wilcoxon(shifted, zero_method="wilcox", alternative="less").pvalue)


@gate(scope="comparison", order=42, reads_generation=True, settings=("max_paired_acceptance_drop",),
      doc="per question, baseline - candidate acceptance rate not significantly above the limit (paired "
          "over the questions, per request)")
class PairedAcceptanceDrop(GateBase):
    """Mean per-question acceptance rate, baseline - candidate, <= ``limit``, tested paired."""

    kind: Literal["paired_acceptance_drop"] = "paired_acceptance_drop"
    op: Literal["<="] = "<="
    limit: float

    @classmethod
    def plan(cls, at: Place) -> PairedAcceptanceDrop | None:
        """Every gated task of a comparison of two speculative variants with ``max_paired_acceptance_drop``."""
        comp = at.comp
        both = all(at.config.variants[v].speculative_config is not None for v in (comp.baseline, comp.candidate))
        if comp.max_paired_acceptance_drop is None or not both:
            return None
        return cls.at(at, limit=comp.max_paired_acceptance_drop, description=(
            f"per-question acceptance rate, baseline - candidate <= {comp.max_paired_acceptance_drop}, not "
            f"significantly more (one-sided Wilcoxon signed-rank over questions, alpha {ALPHA})"))

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """Pairs each question's acceptance rate on both variants
        (:func:`harness.analysis.per_request.paired_by_question`); fails when the one-sided p
        (:func:`paired_drop_p`; ``adjusted_p`` instead when given) is below :data:`ALPHA` and the
        mean drop exceeds the limit, naming the questions that dropped most. No per-request data
        on either side: NOT RUN, with the reason."""
        assert self.baseline is not None, "a comparison gate has a baseline"
        a, b = m.task(self.baseline, self.task).samples, m.task(self.variant, self.task).samples
        if a is None or b is None:
            return result(self, None, self.limit, None, "not run: no samples")
        ra, rb = requests_of(a), requests_of(b)
        if not ra or not rb:
            return result(self, None, self.limit, None, f"not run: {NO_PER_REQUEST}")
        pr = paired_by_question(ra, rb, top=20)
        if pr["mean_diff"] is None:
            return result(self, None, self.limit, None, f"not run: {pr['reason']}")
        rate_a = {r.question_id: r.rate for r in ra if r.rate is not None}
        diffs = [y - rate_a[r.question_id] for r in rb if (y := r.rate) is not None and r.question_id in rate_a]
        p = paired_drop_p(diffs, self.limit)
        p_used = p if adjusted_p is None else adjusted_p
        drop = -pr["mean_diff"]
        ok = not (p_used < ALPHA and drop > self.limit)
        detail = (f"{pr['questions']} questions: {self.baseline} {pr['mean_a']:.3f} -> {self.variant} "
                  f"{pr['mean_b']:.3f} mean per-question acceptance rate (drop {drop:.3f}); one-sided "
                  f"Wilcoxon p={p:.4g}" + (f" (adjusted {adjusted_p:.4g})" if adjusted_p is not None else "")
                  + f" vs alpha {ALPHA}")
        named = [q for q, _ in pr["largest_drops"]] if not ok else []
        return result(self, drop, self.limit, ok, detail, named)
