"""What the acceptance-length kinds share (``drafts_observed``, ``min_acceptance_length``,
``max_acceptance_length_drop``, ``baseline_acceptance_length_drop``): the speculative
metrics with at least one draft, and the note on a rise of the mean acceptance length."""

from __future__ import annotations

from collections.abc import Sequence

from harness.analysis.budget import RatioEstimate, margin_p, ratio_estimate, welch_df
from harness.analysis.gatekinds._common import result
from harness.analysis.measurements import Measurements
from harness.config.gates.registry import GateBase
from harness.records.baselines import BaselineTask
from harness.records.measures import SpecDecodeRecord
from harness.records.run_record import GateResult
from harness.records.samples import Sample


def drafts(g: GateBase, m: Measurements) -> SpecDecodeRecord | GateResult:
    """The gate's speculative metrics with at least one draft (so its ratios are numbers),
    or the failing result."""
    tm = m.task(g.variant, g.task)
    sm = tm.spec
    if sm is None:
        err = tm.spec_error or "no speculative-decoding metrics"
        return result(g, None, g.limit, False, f"speculative metrics missing: {err}")
    if sm.drafts <= 0:
        return result(g, 0.0, g.limit, False, "no drafts observed: speculative decoding did not run")
    return sm


def rise_note(drop: float, limit: float) -> str:
    """``"; note: ..."`` when the mean acceptance length ROSE by more than the gate's band
    (``-drop > limit``): reported beside the drop gate, never failing it (an improved
    drafter rises too), because a rise can be a bug as well (miscounted drafts or accepted
    tokens, a variant that should accept alike); else ``""``."""
    if -drop <= limit:
        return ""
    return (f"; note: mean acceptance length ROSE by {-drop:.3f} tokens, beyond the band +-{limit}: a rise can be a "
            "bug too (drafts or accepted tokens miscounted, or variants that should accept alike); not failed")


#: normal quantile of a stored 95% interval (its half-width / this = its standard error)
_Z95 = 1.959963984540054


def _k(sd: SpecDecodeRecord | None, rows: Sequence[Sample]) -> int:
    """Draft positions: the record's per-position entries, else the samples' widest."""
    k = len(sd.per_position_acceptance) if sd is not None else 0
    return max([k, 1] + [len(x.spec_accepted_per_pos or ()) for x in rows])


def _requests(m: Measurements, g: GateBase, variant: str) -> tuple[Sequence[Sample], int]:
    """The variant's samples that carry per-request counts, and its request count."""
    tm = m.task(variant, g.task)
    samples = tm.samples or ()
    rows = [x for x in samples if x.spec_drafts is not None]
    n = len(samples) or (tm.score.num_requests if tm.score is not None else 0)
    return rows, n


def with_run_spread(length: RatioEstimate | None, pos: list[RatioEstimate | None],
                    run_sd: float) -> tuple[RatioEstimate | None, list[RatioEstimate | None]]:
    """The estimates with the run-to-run spread of acceptance added to their variance.

    Model (the one ``evalrun calibrate`` fits, :mod:`harness.analysis.night_model`): a run
    shifts every request's per-position acceptance probability by a common effect ``d`` on
    the logit scale, sd ``run_sd``. By the delta method, with unconditional per-position
    rates r_j and conditional ones c_j = r_j / r_(j-1) (r_0 = 1), dr_j/dd = r_j
    sum_(i<=j) (1 - c_i), and accepted tokens per draft (sum_j r_j) moves by the sum of
    those; each variance gains (derivative x run_sd)^2."""
    if run_sd <= 0 or not pos or any(e is None for e in pos):
        return length, pos
    r = [e.value for e in pos if e is not None]
    deriv, acc, prev = [], 0.0, 1.0
    for rj in r:
        acc += 1.0 - (rj / prev if prev > 0 else 0.0)
        deriv.append(rj * acc)
        prev = rj

    def grow(e: RatioEstimate | None, d: float) -> RatioEstimate | None:
        return None if e is None else RatioEstimate(e.value, (e.se ** 2 + (d * run_sd) ** 2) ** 0.5, e.n,
                                                    e.per_request)

    return grow(length, sum(deriv)), [grow(e, d) for e, d in zip(pos, deriv)]


def acceptance_estimates(m: Measurements, g: GateBase, variant: str,
                         run_sd: float = 0.0) -> tuple[RatioEstimate | None, list[RatioEstimate | None]]:
    """Accepted tokens per draft (mean acceptance length - 1) and each position's acceptance
    rate of ``variant`` on the gate's task, the request as the unit
    (:func:`harness.analysis.budget.ratio_estimate`: per-request counts when the samples carry
    them, else the Bhatia-Davis fallback over the task's requests), with the run-to-run
    spread ``run_sd`` added (:func:`with_run_spread`)."""
    sd = m.task(variant, g.task).spec
    if sd is None or sd.drafts <= 0:
        return None, []
    rows, n = _requests(m, g, variant)
    k = _k(sd, rows)
    per = len(rows) >= 2
    den = [float(x.spec_drafts or 0.0) for x in rows] if per else None
    length = ratio_estimate([float(x.spec_accepted_tokens or 0.0) for x in rows] if per else None, den,
                            total_num=sd.accepted_tokens, total_den=sd.drafts, requests=n, hi=float(k))
    pos: list[RatioEstimate | None] = []
    for i in range(k):
        tot = (sd.per_position_acceptance[i] or 0.0) * sd.drafts if i < len(sd.per_position_acceptance) else 0.0
        num = [float((x.spec_accepted_per_pos or ())[i]) if i < len(x.spec_accepted_per_pos or ()) else 0.0
               for x in rows] if per else None
        pos.append(ratio_estimate(num, den, total_num=tot, total_den=sd.drafts, requests=n, hi=1.0))
    return with_run_spread(length, pos, run_sd)


def stored_estimates(bt: BaselineTask, run_sd: float = 0.0) -> tuple[RatioEstimate | None,
                                                                     list[RatioEstimate | None]]:
    """:func:`acceptance_estimates` of a stored baseline task: the standard error from its stored
    95% interval (a per-request bootstrap) where it has one, else the Bhatia-Davis fallback over
    its requests."""
    sd = bt.spec_decode
    if sd is None or sd.drafts <= 0:
        return None, []
    k = max(len(sd.per_position_acceptance), 1)
    n = max(bt.num_requests, 1)

    def one(total: float, hi: float, ci: Sequence[float] | None) -> RatioEstimate | None:
        est = ratio_estimate(None, None, total_num=total, total_den=sd.drafts, requests=n, hi=hi)
        if est is None or ci is None:
            return est
        return RatioEstimate(est.value, (ci[1] - ci[0]) / (2 * _Z95), n, True)

    cis = bt.per_position_acceptance_ci or []
    return with_run_spread(one(sd.accepted_tokens, float(k), bt.mean_acceptance_length_ci),
                           [one((r or 0.0) * sd.drafts, 1.0, cis[i] if i < len(cis) else None)
                            for i, r in enumerate(sd.per_position_acceptance)], run_sd)


def drop_test(base: RatioEstimate, cand: RatioEstimate, margin: float = 0.0, rel: float = 0.0,
              two_sided: bool = False) -> tuple[float, float]:
    """Margin tests of ``cand`` against ``base`` (Welch's t, Satterthwaite's df,
    :func:`harness.analysis.budget.margin_p`): the drop statistic ``(1 - rel) base - cand -
    margin`` and, two-sided, the rise statistic ``cand - (1 + rel) base - margin``, each
    tested for "> 0" (an absolute band ``margin``, or a relative one ``rel``).

    Returns:
        ``(p of the drop, p of the rise)``; the rise's is 1.0 when one-sided.
    """
    def one(scale: float, stat: float) -> float:
        vb, vc = (scale * base.se) ** 2, cand.se ** 2
        return margin_p(stat, vb + vc, welch_df([(vb, base.df), (vc, cand.df)]))

    p_drop = one(1 - rel, (1 - rel) * base.value - cand.value - margin)
    p_rise = one(1 + rel, cand.value - (1 + rel) * base.value - margin) if two_sided else 1.0
    return p_drop, p_rise


def unit_note(*ests: RatioEstimate) -> str:
    """How the estimates' variances were had: per-request counts, or the fallback."""
    if all(e.per_request for e in ests):
        return "request as the unit, per-request counts"
    return ("request as the unit; no per-request counts on a side: Bhatia-Davis variance bound over its "
            "requests (conservative fallback)")


Estimates = tuple[RatioEstimate | None, list[RatioEstimate | None]]


def both_sides(m: Measurements, g: GateBase, run_sd: float) -> tuple[Estimates, Estimates]:
    """:func:`acceptance_estimates` of a comparison gate's baseline variant and candidate."""
    return acceptance_estimates(m, g, g.baseline or "", run_sd), acceptance_estimates(m, g, g.variant, run_sd)


def run_sd_of(budget: float | None, sd: float) -> float:
    """The run spread a gate plans with: ``acceptance_run_sd`` under a budget, else 0."""
    return sd if budget is not None else 0.0
