"""Judges of the family "acceptance per draft position" (:mod:`harness.config.gates.position`):
``max_position_acceptance_drop``, ``baseline_position_acceptance_drop``, and :func:`position_verdict`."""

from __future__ import annotations

from harness.analysis.familywise import holm_adjust
from harness.analysis.judges.common import judges, no_stored, result, stored_task
from harness.analysis.measurements import Measurements
from harness.analysis.stats import two_proportion_p
from harness.config import gates as G
from harness.records.baselines import BaselineTask
from harness.records.measures import SpecDecodeRecord
from harness.records.run_record import GateResult


def _spec_counts(sd: SpecDecodeRecord) -> tuple[float, list[float]]:
    """Drafts and accepted_per_pos counts of a record (rates x drafts, rounded: counters
    are integral)."""
    return sd.drafts, [float(round((r or 0.0) * sd.drafts)) for r in sd.per_position_acceptance]


def _p_or_one(p: float | None) -> float:
    return 1.0 if p is None else p


def position_verdict(base: SpecDecodeRecord, cand: SpecDecodeRecord, rtol: float, alpha: float,
                     names: tuple[str, str]) -> tuple[float | None, bool, str]:
    """The per-position acceptance verdict of ``cand`` against ``base`` (both with drafts > 0).

    For each draft position i with rates r_b = accepted_per_pos_b[i] / drafts_b and r_c
    likewise: the position FAILS when ``r_c < (1 - rtol) r_b`` (vLLM's per-position floor)
    and the drop is significant: the one-sided pooled two-proportion z p-value
    (:func:`harness.analysis.stats.two_proportion_p`), Holm-adjusted over the positions
    (:func:`holm_adjust`), is below ``alpha``. A position with ``r_b = 0`` cannot drop. A
    rise beyond ``(1 + rtol) r_b``, significant the same way, is reported beside (never
    failing). Positions missing on one side count 0.

    Returns:
        ``(worst relative drop (r_b - r_c) / r_b over positions with r_b > 0, or None;
        passed; detail naming every failing position with both rates)``.
    """
    (db, ab), (dc, ac) = _spec_counts(base), _spec_counts(cand)
    k = max(len(ab), len(ac))
    if k == 0:
        return None, False, "no per-position acceptance counters on either side"
    ab, ac = ab + [0.0] * (k - len(ab)), ac + [0.0] * (k - len(ac))
    adj_drop = holm_adjust([_p_or_one(two_proportion_p(ab[i], db, ac[i], dc)) for i in range(k)])
    adj_rise = holm_adjust([_p_or_one(two_proportion_p(ac[i], dc, ab[i], db)) for i in range(k)])
    rates = [(ab[i] / db, ac[i] / dc) for i in range(k)]
    rel = [(rb - rc) / rb for rb, rc in rates if rb > 0]
    failed = [f"position {i}: {rb:.4f} -> {rc:.4f} (below {(1 - rtol) * rb:.4f} = (1 - {rtol:g}) x {rb:.4f}; "
              f"Holm-adjusted one-sided p={adj_drop[i]:.3g} < alpha {alpha:g})"
              for i, (rb, rc) in enumerate(rates) if rb > 0 and rc < (1 - rtol) * rb and adj_drop[i] < alpha]
    rose = [f"position {i} rose {rb:.4f} -> {rc:.4f} (Holm-adjusted p={adj_rise[i]:.3g})"
            for i, (rb, rc) in enumerate(rates) if rc > (1 + rtol) * rb and adj_rise[i] < alpha]
    detail = (f"per-position acceptance {names[0]} -> {names[1]}: "
              + ", ".join(f"pos {i} {rb:.4f} -> {rc:.4f}" for i, (rb, rc) in enumerate(rates))
              + f" ({db:.0f} and {dc:.0f} drafts; band {rtol:g} relative)")
    if failed:
        detail += "; FAILED: " + "; ".join(failed)
    if rose:
        detail += ("; note: beyond the band upwards, a rise can be a bug too (not failed): " + "; ".join(rose))
    return (max(rel) if rel else None), not failed, detail


@judges(G.MaxPositionAcceptanceDrop)
def judge_max_position_acceptance_drop(g: G.MaxPositionAcceptanceDrop, m: Measurements,
                                       adjusted_p: float | None = None) -> GateResult:
    """``max_position_acceptance_drop``: :func:`position_verdict` of the candidate against the
    baseline variant; speculative metrics missing or without drafts on either side fail."""
    a, b = m.task(g.baseline, g.task).spec, m.task(g.variant, g.task).spec
    if a is None or b is None or a.drafts <= 0 or b.drafts <= 0:
        return result(g, None, g.limit, False, "per-position acceptance missing on one side (no drafts?)")
    observed, ok, detail = position_verdict(a, b, g.limit, g.alpha, (g.baseline or "", g.variant))
    return result(g, observed, g.limit, ok, detail)



@judges(G.BaselinePositionAcceptanceDrop)
def judge_baseline_position_acceptance_drop(g: G.BaselinePositionAcceptanceDrop, m: Measurements,
                                            adjusted_p: float | None = None) -> GateResult:
    """``baseline_position_acceptance_drop``: :func:`position_verdict` of the variant now
    against its stored baseline; a baseline without drafts is NOT RUN, none now fails."""
    bt, label = stored_task(g, m)
    if bt is None:
        return no_stored(g, label)
    base = bt.spec_decode
    if base is None or base.drafts <= 0 or not base.per_position_acceptance:
        return result(g, None, g.limit, None, "not run: the baseline has no per-position acceptance", baseline=label)
    sm = m.task(g.variant, g.task).spec
    if sm is None or sm.drafts <= 0:
        return result(g, None, g.limit, False, "per-position acceptance missing now (no drafts?)", baseline=label)
    observed, ok, detail = position_verdict(base, sm, g.limit, g.alpha, ("baseline", "now"))
    return result(g, observed, g.limit, ok, detail, baseline=label)



def _has_positions(bt: BaselineTask) -> bool:
    """The stored task has drafts and per-position acceptance to judge against."""
    sd = bt.spec_decode
    return sd is not None and sd.drafts > 0 and bool(sd.per_position_acceptance)
