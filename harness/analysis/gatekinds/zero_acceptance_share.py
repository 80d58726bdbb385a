"""Gate kind ``zero_acceptance_share``: per speculative variant and task, the share of requests
whose drafts were never accepted stays within its limit while others accept (vLLM's
per-request metrics, :mod:`harness.analysis.per_request`)."""

from __future__ import annotations

from typing import Literal

from harness.analysis.budget import GateTest
from harness.analysis.gatekinds._common import Budgeted, budget_verdict, planned_level, result, speculative
from harness.analysis.measurements import Measurements
from harness.analysis.per_request import NO_PER_REQUEST, RequestAcceptance, requests_of
from harness.config.gates.registry import Place, gate
from harness.records.run_record import GateResult

#: Verify steps a request needs to count (a request of one or two steps may reject by chance).
MIN_STEPS = 4
#: One-sided level of the gate's test without the false-alarm budget (with it: the budget, Holm).
ALPHA = 0.01


def zero_share_p(zero: int, n: int, limit: float) -> float:
    """One-sided p-value that the share of zero-acceptance requests exceeds ``limit``: the exact
    binomial test of ``zero`` of ``n`` requests (``scipy.stats.binomtest``, ``alternative="greater"``);
    requests are the independent units (their drafts are not)."""
    from scipy import stats as sps

    return float(sps.binomtest(zero, n, limit, alternative="greater").pvalue)


@gate(scope="task", order=63, reads_generation=True, settings=("max_zero_acceptance_share",),
      doc="share of requests (with at least 4 verify steps) that never accepted a draft, while others "
          "accept, not significantly above the limit (per request; with the false-alarm budget: at the config's "
          "budget, Holm)")
class ZeroAcceptanceShare(Budgeted):
    """Share of requests with no accepted draft in ``>=`` :data:`MIN_STEPS` verify steps <= ``limit``;
    the test's level is :data:`ALPHA`, or with ``budget`` the config's budget (Holm over its
    tested gates)."""

    kind: Literal["zero_acceptance_share"] = "zero_acceptance_share"
    op: Literal["<="] = "<="
    limit: float

    @classmethod
    def plan(cls, at: Place) -> ZeroAcceptanceShare | None:
        """Every speculative variant and task whose settings give ``max_zero_acceptance_share``."""
        limit = at.settings.max_zero_acceptance_share
        if not speculative(at) or limit is None:
            return None
        fields, level = planned_level(at, "one-sided exact binomial test over requests", ALPHA)
        return cls.at(at, limit=limit, **fields, description=(
            f"share of requests that never accepted a draft <= {limit}, not significantly more {level}"))

    def _requests(self, m: Measurements) -> list[RequestAcceptance] | GateResult:
        """The requests with at least :data:`MIN_STEPS` verify steps, or the NOT RUN result."""
        samples = m.task(self.variant, self.task).samples
        if samples is None:
            return result(self, None, self.limit, None, "not run: no samples")
        all_reqs = requests_of(samples)
        reqs = [r for r in all_reqs if r.steps >= MIN_STEPS]
        if not reqs:
            why = NO_PER_REQUEST if not all_reqs else f"no request has {MIN_STEPS} verify steps"
            return result(self, None, self.limit, None, f"not run: {why}")
        return reqs

    def test(self, m: Measurements) -> GateTest | None:
        """:func:`zero_share_p` over the requests (None: no per-request data)."""
        reqs = self._requests(m)
        if isinstance(reqs, GateResult):
            return None
        zero = sum(1 for r in reqs if r.accepted_total == 0)
        return GateTest(zero_share_p(zero, len(reqs), self.limit), self.planned_min_p(len(reqs)),
                        "one-sided exact binomial test over requests")

    def planned_min_p(self, n: int) -> float:
        """The exact binomial test's smallest p-value on ``n`` requests, every one without an
        accepted draft: ``limit ** n`` (1.0 for n = 0)."""
        return self.limit ** n if n > 0 else 1.0

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """Fails when the exact one-sided binomial p (:func:`zero_share_p`; ``adjusted_p``
        instead when given) is below :data:`ALPHA` and other requests did accept (every request
        rejecting everything is the acceptance-length gates' case), naming the requests. No
        per-request data: NOT RUN, with the reason. With ``budget``: the test's p-value
        (Holm-adjusted over the config's family) against the budget (:func:`budget_verdict`)."""
        reqs = self._requests(m)
        if isinstance(reqs, GateResult):
            return reqs
        zero = [r.question_id for r in reqs if r.accepted_total == 0]
        n = len(reqs)
        p = zero_share_p(len(zero), n, self.limit)
        others = n - len(zero)
        head = (f"{len(zero)} of {n} requests with >= {MIN_STEPS} verify steps accepted no draft "
                f"({others} accepted some); ")
        if self.budget is not None:
            passed, how = budget_verdict(self, GateTest(p, self.planned_min_p(n), "one-sided binomial"), adjusted_p)
            ok = passed or not (len(zero) / n > self.limit and others > 0)
            detail = head + how
        else:
            p_used = p if adjusted_p is None else adjusted_p
            ok = not (p_used < ALPHA and len(zero) / n > self.limit and others > 0)
            detail = (head + f"one-sided binomial p={p:.4g}"
                      + (f" (adjusted {adjusted_p:.4g})" if adjusted_p is not None else "") + f" vs alpha {ALPHA}")
        return result(self, len(zero) / n, self.limit, ok, detail, zero if not ok else ())
