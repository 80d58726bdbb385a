"""Judges of the family "requests answered in full" (:mod:`harness.config.gates.requests`):
``max_error_rate``, ``max_truncation_rate``."""

from __future__ import annotations

from harness.analysis.judges.common import judges, result, task_score
from harness.analysis.measurements import Measurements
from harness.config import gates as G
from harness.records.run_record import GateResult


@judges(G.MaxErrorRate)
def judge_max_error_rate(g: G.MaxErrorRate, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """``max_error_rate``: failed requests / requests <= limit."""
    sc, none = task_score(g, m)
    if sc is None:
        return none  # type: ignore[return-value]
    ok = sc.error_rate <= g.limit
    return result(
        g, sc.error_rate, g.limit, ok,
        f"{sc.error_count} of {sc.num_requests} requests failed (error rate {sc.error_rate:.3f}, limit {g.limit})",
    )


@judges(G.MaxTruncationRate)
def judge_max_truncation_rate(g: G.MaxTruncationRate, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """``max_truncation_rate``: completions cut by ``max_tokens`` / successful
    completions <= limit; no successful request fails."""
    sc, none = task_score(g, m)
    if sc is None:
        return none  # type: ignore[return-value]
    if sc.truncated_rate is None:
        return result(g, None, g.limit, False, "no request succeeded: truncation cannot be computed")
    ok = sc.truncated_rate <= g.limit
    n = sc.num_requests - sc.error_count
    return result(
        g, sc.truncated_rate, g.limit, ok,
        f"{sc.truncated} of {n} completions cut by max_tokens (truncated share {sc.truncated_rate:.3f}, limit "
        f"{g.limit})",
        sc.truncated_ids if not ok else (),
    )
