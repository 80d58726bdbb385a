"""Gate kind ``paired_acceptance_drop``: per comparison of two speculative variants and gated
task, each question's acceptance rate on the candidate not significantly below the baseline's,
paired by question (vLLM's per-request metrics, :mod:`harness.analysis.per_request`)."""

from __future__ import annotations

from typing import Literal

from harness.analysis.budget import GateTest
from harness.analysis.gatekinds._common import Budgeted, budget_verdict, planned_level, result
from harness.analysis.measurements import Measurements
from harness.analysis.per_request import NO_PER_REQUEST, Paired, RequestAcceptance, paired_by_question, requests_of
from harness.config.gates.registry import Place, gate
from harness.records.run_record import GateResult

#: One-sided level of the gate's test without the false-alarm budget (with it: the budget, Holm).
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
          "over the questions, per request; with the false-alarm budget: at the config's budget, Holm)")
class PairedAcceptanceDrop(Budgeted):
    """Mean per-question acceptance rate, baseline - candidate, <= ``limit``, tested paired; the
    test's level is :data:`ALPHA`, or with ``budget`` the config's budget (Holm over its tested
    gates)."""

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
        fields, level = planned_level(at, "one-sided Wilcoxon signed-rank over questions", ALPHA)
        return cls.at(at, limit=comp.max_paired_acceptance_drop, **fields, description=(
            f"per-question acceptance rate, baseline - candidate <= {comp.max_paired_acceptance_drop}, not "
            f"significantly more {level}"))

    def _paired(self, m: Measurements) -> tuple[Paired, list[float]] | GateResult:
        """The paired questions (:func:`paired_by_question`) and each one's candidate - baseline
        rate, or the NOT RUN result."""
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
        return pr, _diffs(ra, rb)

    def test(self, m: Measurements) -> GateTest | None:
        """:func:`paired_drop_p` over the paired questions (None: no per-request data)."""
        got = self._paired(m)
        if isinstance(got, GateResult):
            return None
        return GateTest(paired_drop_p(got[1], self.limit), self.planned_min_p(len(got[1])),
                        "one-sided Wilcoxon signed-rank test over questions")

    def planned_min_p(self, n: int) -> float:
        """The exact signed-rank test's smallest p-value on ``n`` paired questions, every
        difference below the margin: ``2 ** -n`` (1.0 for n = 0)."""
        return 0.5 ** n if n > 0 else 1.0

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """Pairs each question's acceptance rate on both variants
        (:func:`harness.analysis.per_request.paired_by_question`); fails when the one-sided p
        (:func:`paired_drop_p`; ``adjusted_p`` instead when given) is below :data:`ALPHA` and the
        mean drop exceeds the limit, naming the questions that dropped most. No per-request data
        on either side: NOT RUN, with the reason. With ``budget``: the test's p-value
        (Holm-adjusted over the config's family) against the budget (:func:`budget_verdict`)."""
        got = self._paired(m)
        if isinstance(got, GateResult):
            return got
        pr, diffs = got
        p = paired_drop_p(diffs, self.limit)
        assert pr["mean_diff"] is not None, "a number when questions pair (_paired)"
        drop = -pr["mean_diff"]
        head = (f"{pr['questions']} questions: {self.baseline} {pr['mean_a']:.3f} -> {self.variant} "
                f"{pr['mean_b']:.3f} mean per-question acceptance rate (drop {drop:.3f}); ")
        if self.budget is not None:
            passed, how = budget_verdict(self, GateTest(p, self.planned_min_p(len(diffs)), "one-sided Wilcoxon"),
                                         adjusted_p)
            ok = passed or not drop > self.limit
            detail = head + how
        else:
            p_used = p if adjusted_p is None else adjusted_p
            ok = not (p_used < ALPHA and drop > self.limit)
            detail = (head + f"one-sided Wilcoxon p={p:.4g}"
                      + (f" (adjusted {adjusted_p:.4g})" if adjusted_p is not None else "") + f" vs alpha {ALPHA}")
        named = [q for q, _ in pr["largest_drops"]] if not ok else []
        return result(self, drop, self.limit, ok, detail, named)


def _diffs(ra: list[RequestAcceptance], rb: list[RequestAcceptance]) -> list[float]:
    """Per question answered on both sides with a rate: candidate - baseline acceptance rate."""
    rate_a = {r.question_id: r.rate for r in ra if r.rate is not None}
    return [y - rate_a[r.question_id] for r in rb if (y := r.rate) is not None and r.question_id in rate_a]
