"""What the per-position acceptance kinds share (``max_position_acceptance_drop``,
``baseline_position_acceptance_drop``): their settings, :func:`position_verdict`, and
whether a stored task has per-position acceptance to judge against."""

from __future__ import annotations

from collections.abc import Sequence

from harness.analysis.budget import GateTest, RatioEstimate
from harness.analysis.familywise import holm_adjust
from harness.analysis.gatekinds._acceptance import drop_test, unit_note
from harness.analysis.stats import two_proportion_p
from harness.records.baselines import BaselineTask
from harness.records.measures import SpecDecodeRecord

#: the settings of both kinds (calibration may recommend them)
SETTINGS = ("position_acceptance_rtol", "position_acceptance_alpha")


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


def has_positions(bt: BaselineTask) -> bool:
    """The stored task has drafts and per-position acceptance to judge against."""
    sd = bt.spec_decode
    return sd is not None and sd.drafts > 0 and bool(sd.per_position_acceptance)


def position_test(base: Sequence[RatioEstimate | None], cand: Sequence[RatioEstimate | None], rtol: float,
                  two_sided: bool) -> tuple[GateTest, list[tuple[int, float, str]]] | None:
    """The per-position margin test, the request as the unit: per draft position i, Welch's t
    (:func:`._acceptance.drop_test`) of ``(1 - rtol) r_base - r_cand > 0`` and, two-sided,
    ``r_cand - (1 + rtol) r_base > 0``; the gate's p-value is Bonferroni's over the K
    one-sided tests, ``min(1, K min_i p_i)`` (Holm's first step: the gate fails when any
    position would). None: no position measured on both sides.

    Returns:
        ``(the test, [(position, K p_i, "dropped" / "ROSE"), ...] one per one-sided test)``.
    """
    ps: list[tuple[int, float, str]] = []
    per: list[RatioEstimate] = []
    for i, (b, c) in enumerate(zip(base, cand)):
        if b is None or c is None or b.value <= 0:
            continue
        per += [b, c]
        p_drop, p_rise = drop_test(b, c, rel=rtol, two_sided=two_sided)
        ps.append((i, p_drop, "dropped"))
        if two_sided:
            ps.append((i, p_rise, "ROSE"))
    if not ps:
        return None
    k = len(ps)
    adj = [(i, min(1.0, k * p), how) for i, p, how in ps]
    return (GateTest(min(p for _, p, _ in adj), 0.0 if min(e.n for e in per) >= 2 else 1.0,
                     f"Welch t per position beyond the relative band {rtol:g}"
                     + (" either way" if two_sided else "") + f", Bonferroni over {k} ({unit_note(*per)})"), adj)


def position_budget_detail(base: Sequence[RatioEstimate | None], cand: Sequence[RatioEstimate | None],
                           adj: list[tuple[int, float, str]], budget: float, names: tuple[str, str]) -> str:
    """The detail of a budgeted per-position verdict: every position's two rates and the
    positions whose test rejects at the budget."""
    rates = ", ".join(f"pos {i} {b.value:.4f} -> {c.value:.4f}" for i, (b, c) in enumerate(zip(base, cand))
                      if b is not None and c is not None)
    bad = [f"position {i} {how} (p={p:.3g})" for i, p, how in adj if p < budget]
    return f"per-position acceptance {names[0]} -> {names[1]}: {rates}" + (
        f"; beyond the band: {'; '.join(bad)}" if bad else "")
