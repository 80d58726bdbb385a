"""Acceptance intervals: bootstrap confidence intervals of the speculative-decoding
acceptance figures from per-request counter differences."""

from __future__ import annotations

from typing import Sequence, TypedDict

from harness.analysis.stats import ratio_bootstrap_ci
from harness.records.samples import Sample

#: Why acceptance intervals are missing when requests ran concurrently.
ACCEPTANCE_CI_CONCURRENT = (
    "not available: concurrent requests share cumulative counters (per_request_metrics is "
    "off; set it to true to send requests one at a time and read /metrics around each)"
)
#: How acceptance intervals are computed (stored with them in the record).
ACCEPTANCE_CI_METHOD = (
    "95% percentile bootstrap over requests of a ratio of sums (requests resampled with "
    "their numerator and denominator together; 2000 resamples, seed 0)"
)


class PerRequestTotalsDict(TypedDict):
    """Sums of the per-request counter shares (the record's ``per_request_totals``)."""

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    accepted_per_pos: list[float]


class AcceptanceIntervals(TypedDict):
    """:func:`acceptance_intervals`: the task record's interval fields
    (:class:`harness.records.run_record.TaskResult`); an interval is ``[lo, hi]``."""

    mean_acceptance_length_ci: list[float] | None
    acceptance_rate_ci: list[float] | None
    per_position_acceptance_ci: list[list[float]] | None
    acceptance_ci_method: str | None
    acceptance_ci_reason: str | None
    acceptance_ci_requests: int
    per_request_totals: PerRequestTotalsDict | None


def acceptance_intervals(samples: Sequence[Sample], speculative: bool,
                         confidence: float = 0.95) -> AcceptanceIntervals:
    """Confidence intervals of the acceptance figures from per-request counts.

    Args:
        samples: one task's samples; those with ``spec_drafts`` set (sequential
            requests, ``per_request_metrics``) are used, errors included (a failed
            request may still have drafted).
        speculative: whether the variant speculates (for the reason when there are
            no intervals).
        confidence: two-sided level.

    Returns:
        ``{"mean_acceptance_length_ci": [lo, hi] | None, "acceptance_rate_ci": ... ,
        "per_position_acceptance_ci": [[lo, hi] | None, ...] | None,
        "acceptance_ci_method": str | None, "acceptance_ci_reason": str | None,
        "acceptance_ci_requests": int, "per_request_totals": {...} | None}``.
        Intervals come from :func:`harness.analysis.stats.ratio_bootstrap_ci` (percentile
        bootstrap of a ratio of sums, Efron & Tibshirani 1993 ch. 13): mean acceptance
        length = 1 + sum(accepted) / sum(drafts), acceptance rate = sum(accepted) /
        sum(draft tokens), per position i = sum(accepted at i) / sum(drafts).
        Without per-request counts every interval is None and the reason says why.
    """
    out: AcceptanceIntervals = {
        "mean_acceptance_length_ci": None, "acceptance_rate_ci": None,
        "per_position_acceptance_ci": None, "acceptance_ci_method": None,
        "acceptance_ci_reason": None, "acceptance_ci_requests": 0, "per_request_totals": None,
    }
    if not speculative:
        out["acceptance_ci_reason"] = "not applicable: the variant does not speculate"
        return out
    rows = [x for x in samples if x.spec_drafts is not None]
    if not rows:
        out["acceptance_ci_reason"] = ACCEPTANCE_CI_CONCURRENT
        return out
    drafts = [float(x.spec_drafts or 0) for x in rows]  # rows hold only requests with a draft count
    acc = [x.spec_accepted_tokens or 0.0 for x in rows]
    dtok = [x.spec_draft_tokens or 0.0 for x in rows]
    width = max(len(x.spec_accepted_per_pos or ()) for x in rows)
    pos = [[(x.spec_accepted_per_pos or ())[i] if i < len(x.spec_accepted_per_pos or ()) else 0.0 for x in rows]
           for i in range(width)]
    out["acceptance_ci_requests"] = len(rows)
    out["per_request_totals"] = {
        "drafts": sum(drafts), "draft_tokens": sum(dtok), "accepted_tokens": sum(acc),
        "accepted_per_pos": [sum(p) for p in pos],
    }
    if sum(drafts) <= 0:
        out["acceptance_ci_reason"] = "not available: no drafts observed"
        return out
    lo, hi = ratio_bootstrap_ci(acc, drafts, confidence)
    out["mean_acceptance_length_ci"] = [1.0 + lo, 1.0 + hi]
    if sum(dtok) > 0:
        out["acceptance_rate_ci"] = list(ratio_bootstrap_ci(acc, dtok, confidence))
    out["per_position_acceptance_ci"] = [list(ratio_bootstrap_ci(p, drafts, confidence)) for p in pos]
    out["acceptance_ci_method"] = ACCEPTANCE_CI_METHOD
    return out
