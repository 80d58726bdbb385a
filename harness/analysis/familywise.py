"""Family-wise false-fail probability of a config's accuracy-drop gates on an unchanged build,
and Holm's adjusted p-values (:func:`holm_adjust`) that keep a run's family-wise error.

A config gates several comparisons, each at its own alpha; the chance that at least
one of them fails a build that changed nothing grows with their number. This module
computes it exactly (no simulation, standard library only, so ``--dry-run`` stays fast).

Model of an unchanged build (the null hypothesis of every paired gate): each of the n
questions is discordant (right in exactly one of the two variants, e.g. from GPU
numerics) with probability d, independently; a discordant question is right in the
baseline or in the candidate with probability 1/2 each. So the discordant count is
D ~ Binomial(n, d) and b (right only in the baseline) given D is Binomial(D, 1/2),
c = D - b. The ``max_accuracy_drop`` gate (:func:`harness.analysis.gates.evaluate_gate`)
fails when the drop (b - c)/n exceeds its limit or the exact one-sided McNemar p-value
P(Binomial(D, 1/2) >= b) is below alpha (McNemar 1947, exact form).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def _binom_pmfs(n: int, p: float) -> list[float]:
    """P(Binomial(n, p) = k) for k = 0..n, from log-gamma (exact to double precision)."""
    if p <= 0.0:
        return [1.0] + [0.0] * n
    if p >= 1.0:
        return [0.0] * n + [1.0]
    lp, lq = math.log(p), math.log1p(-p)
    lg = math.lgamma
    return [math.exp(lg(n + 1) - lg(k + 1) - lg(n - k + 1) + k * lp + (n - k) * lq) for k in range(n + 1)]


def drop_gate_false_fail(n: int, discordance: float, limit: float | None, alpha: float) -> float:
    """Probability that one ``max_accuracy_drop`` gate fails an unchanged build.

    Args:
        n: paired questions (>= 1).
        discordance: d in [0, 1], the share of questions right in exactly one variant
            by chance (run-to-run flips).
        limit: the gate's ``max_accuracy_drop`` (fraction), or None for none.
        alpha: the level its McNemar p-value is compared with (for Holm's first step,
            alpha / family size).

    Returns:
        sum over D of P(D) * P(b >= b*(D) | D), b*(D) the smallest b that fails (both
        failure conditions grow with b), as a probability in [0, 1].

    Raises:
        ValueError: n < 1, or discordance / alpha outside their ranges.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not 0.0 <= discordance <= 1.0:
        raise ValueError(f"discordance must be in [0, 1], got {discordance!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    pd = _binom_pmfs(n, discordance)
    total = 0.0
    for big_d, w in enumerate(pd):
        if w < 1e-15:
            continue
        half = _binom_pmfs(big_d, 0.5)
        tail = 0.0  # P(Binomial(D, 1/2) >= b), built from the top down
        fail_mass = 0.0
        for b in range(big_d, -1, -1):
            tail += half[b]
            drop = (2 * b - big_d) / n
            if (limit is not None and drop > limit + 1e-12) or tail < alpha:
                fail_mass = tail
            else:
                break
        total += w * fail_mass
    return min(1.0, total)


def family_false_fail(
    gates: Sequence[tuple[int, float, float | None, float]], holm: bool = False,
) -> float:
    """Probability that at least one of a config's accuracy-drop gates fails an
    unchanged build, the gates taken as independent.

    Args:
        gates: one ``(n, discordance, limit, alpha)`` per gate (see
            :func:`drop_gate_false_fail`).
        holm: the gates are judged with Holm's step-down correction; Holm rejects
            anything only if the smallest p-value is below alpha / m (Holm 1979,
            step 1), so each gate's significance part is taken at alpha / m.

    Returns:
        ``1 - prod(1 - P_i)``. Gates sharing a baseline variant are positively
        dependent in practice; this independence figure is then an upper-side estimate.
    """
    m = len(gates)
    keep = 1.0
    for n, d, limit, alpha in gates:
        keep *= 1.0 - drop_gate_false_fail(n, d, limit, alpha / m if holm else alpha)
    return 1.0 - keep


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979, "A simple sequentially
    rejective multiple test procedure", Scand. J. Statist. 6:65-70).

    With p-values sorted ascending p_(1) <= ... <= p_(m), the adjusted value of the
    i-th is ``max_{j <= i} min(1, (m - j + 1) p_(j))``; rejecting where it is below
    alpha keeps the family-wise error at most alpha under any dependence.

    Args:
        p_values: m p-values in [0, 1], any order.

    Returns:
        The adjusted p-values, in the input order.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out
