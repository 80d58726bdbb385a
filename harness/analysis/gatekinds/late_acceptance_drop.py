"""Gate kind ``late_acceptance_drop``: per speculative variant and task, acceptance late in each
request's output is not significantly lower than early in it, the request as the unit (vLLM's
per-request metrics, :mod:`harness.analysis.per_request`)."""

from __future__ import annotations

from typing import Literal

from harness.analysis.budget import GateTest
from harness.analysis.gatekinds._common import Budgeted, budget_verdict, planned_level, result, speculative
from harness.analysis.measurements import Measurements
from harness.analysis.per_request import NO_PER_REQUEST, RequestAcceptance, along_output, collapses, requests_of
from harness.config.gates.registry import Place, gate
from harness.records.run_record import GateResult

#: Verify steps a request needs to be split into an early and a late half.
MIN_STEPS = 4
#: One-sided level of the gate's test without the false-alarm budget (with it: the budget, Holm).
ALPHA = 0.01


def halves(accepted: tuple[int, ...], drafted: tuple[int, ...]) -> tuple[float, float, int, int, int, int]:
    """``(early rate, late rate, early accepted, early drafted, late accepted, late drafted)`` of
    one request's verify steps split at ``len // 2`` (the late half takes the odd step); a rate
    is 0.0 when its half drafted nothing."""
    h = len(accepted) // 2
    ea, ed, la, ld = sum(accepted[:h]), sum(drafted[:h]), sum(accepted[h:]), sum(drafted[h:])
    return (ea / ed if ed else 0.0), (la / ld if ld else 0.0), ea, ed, la, ld


def late_drop_p(diffs: list[float], limit: float) -> float:
    """One-sided p-value that the median per-request ``late - early`` rate is below ``-limit``:
    the Wilcoxon signed-rank test of ``diffs + limit`` with ``alternative="less"``
    (``scipy.stats.wilcoxon``, zero differences dropped); 1.0 when every shifted difference is 0."""
    shifted = [d + limit for d in diffs]
    if not any(shifted):
        return 1.0
    from scipy import stats as sps

    return float(sps.wilcoxon(shifted, zero_method="wilcox", alternative="less").pvalue)


def where_text(reqs: list[RequestAcceptance], floor: float) -> str:
    """Where acceptance collapsed: the median output position from which requests accepted no
    draft to their end (:func:`harness.analysis.per_request.collapses`), else the first bin of
    :func:`harness.analysis.per_request.along_output` whose rate is below ``floor``."""
    cs = collapses(reqs)
    if cs:
        pos = sorted(c["position"] for c in cs)
        return (f"acceptance collapsed from output position {pos[len(pos) // 2]} (median over {len(cs)} requests "
                f"that accepted no draft from there to their end; first {pos[0]}, last {pos[-1]})")
    b = next((b for b in along_output(reqs) if b["requests"] >= 2 and b["rate"] is not None and b["rate"] < floor),
             None)
    if b is None:
        return "no output position bin falls below the floor on its own"
    return f"acceptance fell below {floor:.3f} from output positions [{b['start']}, {b['end']}) (rate {b['rate']:.3f})"


@gate(scope="task", order=62, reads_generation=True, settings=("max_late_acceptance_drop",),
      doc="acceptance late in each request's output not significantly below early in it (per request; with the "
          "false-alarm budget: at the config's budget, Holm)")
class LateAcceptanceDrop(Budgeted):
    """Early minus late acceptance rate (draft tokens accepted per draft token, pooled over the
    requests' halves) <= ``limit``, tested per request; the test's level is :data:`ALPHA`, or
    with ``budget`` the config's budget (Holm over its tested gates)."""

    kind: Literal["late_acceptance_drop"] = "late_acceptance_drop"
    op: Literal["<="] = "<="
    limit: float

    @classmethod
    def plan(cls, at: Place) -> LateAcceptanceDrop | None:
        """Every speculative variant and task whose settings give ``max_late_acceptance_drop``."""
        limit = at.settings.max_late_acceptance_drop
        if not speculative(at) or limit is None:
            return None
        fields, level = planned_level(at, "one-sided Wilcoxon signed-rank over requests", ALPHA)
        return cls.at(at, limit=limit, **fields, description=(
            f"early - late acceptance rate within each request <= {limit}, not significantly more {level}"))

    def _requests(self, m: Measurements) -> list[RequestAcceptance] | GateResult:
        """The requests with at least :data:`MIN_STEPS` verify steps, or the NOT RUN result."""
        samples = m.task(self.variant, self.task).samples
        if samples is None:
            return result(self, None, self.limit, None, "not run: no samples")
        reqs = [r for r in requests_of(samples) if len(r.accepted) >= MIN_STEPS]
        if not reqs:
            why = NO_PER_REQUEST if not requests_of(samples) else f"no request has {MIN_STEPS} verify steps"
            return result(self, None, self.limit, None, f"not run: {why}")
        return reqs

    def test(self, m: Measurements) -> GateTest | None:
        """:func:`late_drop_p` over the requests (None: no per-request data)."""
        reqs = self._requests(m)
        if isinstance(reqs, GateResult):
            return None
        diffs = [h[1] - h[0] for h in (halves(r.accepted, r.drafted) for r in reqs)]
        return GateTest(late_drop_p(diffs, self.limit), self.planned_min_p(len(reqs)),
                        "one-sided Wilcoxon signed-rank test over requests")

    def planned_min_p(self, n: int) -> float:
        """The exact signed-rank test's smallest p-value on ``n`` requests, every difference
        below the margin: ``2 ** -n`` (1.0 for n = 0)."""
        return 0.5 ** n if n > 0 else 1.0

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """Each request with at least :data:`MIN_STEPS` verify steps (``detailed`` per-request
        metrics) is split into halves; fails when the one-sided Wilcoxon p (:func:`late_drop_p`;
        ``adjusted_p`` instead when given) is below :data:`ALPHA`, naming the first output
        position whose acceptance (:func:`harness.analysis.per_request.along_output`) is more
        than the limit below the early rate and the requests that dropped by more than it.
        No per-request data: NOT RUN, with the reason. With ``budget``: the test's p-value
        (Holm-adjusted over the config's family) against the budget (:func:`budget_verdict`)."""
        reqs = self._requests(m)
        if isinstance(reqs, GateResult):
            return reqs
        parts = [(r, halves(r.accepted, r.drafted)) for r in reqs]
        ed, ld = sum(h[3] for _, h in parts), sum(h[5] for _, h in parts)
        early = sum(h[2] for _, h in parts) / ed if ed else 0.0
        late = sum(h[4] for _, h in parts) / ld if ld else 0.0
        p = late_drop_p([h[1] - h[0] for _, h in parts], self.limit)
        head = (f"{len(reqs)} requests: early-half acceptance {early:.3f}, late-half {late:.3f} (drop "
                f"{early - late:.3f}); ")
        if self.budget is not None:
            passed, how = budget_verdict(self, GateTest(p, self.planned_min_p(len(reqs)), "one-sided Wilcoxon"),
                                         adjusted_p)
            ok = passed or not early - late > self.limit
            detail = head + how
        else:
            p_used = p if adjusted_p is None else adjusted_p
            ok = not (p_used < ALPHA and early - late > self.limit)
            detail = (head + f"one-sided Wilcoxon p={p:.4g}"
                      + (f" (adjusted {adjusted_p:.4g})" if adjusted_p is not None else "") + f" vs alpha {ALPHA}")
        named: list[str] = []
        if not ok:
            named = [r.question_id for r, h in parts if h[0] - h[1] > self.limit]
            detail += "; " + where_text(reqs, early - self.limit)
        return result(self, early - late, self.limit, ok, detail, named)
