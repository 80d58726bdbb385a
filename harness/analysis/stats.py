"""Statistics for accuracy gates: intervals, paired tests, bootstrap, detectable drop.

All accuracies, differences and margins are fractions in [0, 1] (or [-1, 1] for
differences), never percentages. Question-level inputs are dicts mapping a question
id (e.g. ``"gsm8k/test/17"``) to a correctness verdict.

Numerics come from scipy/numpy: ``scipy.stats.binomtest`` (exact binomial tests and
the Wilson interval), ``statistics.NormalDist`` / ``scipy.stats.chi2`` (normal quantiles, tail areas),
bisection (root finding) and ``scipy.stats.bootstrap``.
"""

from __future__ import annotations

import importlib
import inspect
import math
from statistics import NormalDist
from typing import TYPE_CHECKING, Callable, Literal, Mapping, Sequence

from harness.records.measures import PairedRecord


class _LazyModule:
    """A module imported on first attribute access (numpy and scipy cost about 1.5 s of
    start-up, which ``evalrun --help`` and ``--dry-run`` must not pay)."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str) -> object:
        return getattr(importlib.import_module(self._name), attr)


if TYPE_CHECKING:  # what the lazy modules stand for
    import numpy as np
    from scipy import stats
else:
    np = _LazyModule("numpy")
    stats = _LazyModule("scipy.stats")

__all__ = [
    "wilson_interval",
    "binomial_variance",
    "PairedRecord",
    "paired_comparison",
    "newcombe_interval",
    "fisher_p_values",
    "mcnemar_exact",
    "min_detectable_drop",
    "bootstrap_ci",
    "ratio_bootstrap_ci",
    "floor_margin",
    "EXACT_MCNEMAR_BELOW",
    "two_proportion_p",
    "two_proportion_power",
]

#: Paired comparisons with fewer discordant pairs than this use the exact McNemar test.
EXACT_MCNEMAR_BELOW = 25

Alternative = Literal["two-sided", "greater", "less"]


def _check_confidence(confidence: float, name: str = "confidence") -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {confidence!r}")


def _z_two_sided(confidence: float) -> float:
    """Normal quantile z_{1 - (1 - confidence)/2} (1.96 for 0.95)."""
    return float(stats.norm.ppf(0.5 + confidence / 2.0))


# --------------------------------------------------------------------------- Wilson


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion.

    Args:
        successes: number of successes (e.g. correct answers), 0 <= successes <= n.
        n: number of trials (questions).
        confidence: two-sided confidence level in (0, 1).

    Returns:
        ``(low, high)``, fractions in [0, 1]. ``n == 0`` gives ``(0.0, 1.0)``.

    Formula (Wilson 1927, "Probable inference, the law of succession, and statistical
    inference", JASA 22:209-212; recommended by Agresti & Coull 1998, "Approximate is
    better than 'exact' for interval estimation of binomial proportions", Am. Stat.
    52:119-126), with p = successes/n and z = z_{1-(1-confidence)/2}::

        (p + z^2/(2n) -/+ z * sqrt(p(1-p)/n + z^2/(4n^2))) / (1 + z^2/n)

    computed by ``scipy.stats.binomtest(...).proportion_ci(method="wilson")`` (no
    continuity correction).

    Raises:
        ValueError: negative counts, successes > n, or confidence outside (0, 1).
    """
    _check_confidence(confidence)
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return (0.0, 1.0)
    ci = stats.binomtest(int(successes), int(n)).proportion_ci(
        confidence_level=confidence, method="wilson"
    )
    return (min(max(float(ci.low), 0.0), 1.0), min(max(float(ci.high), 0.0), 1.0))


# --------------------------------------------------------------------------- McNemar


def mcnemar_exact(b: int, c: int, alternative: Alternative = "two-sided") -> float:
    """Exact (conditional) McNemar test on the discordant pairs of a paired 2x2 table.

    Args:
        b: pairs where A is right and B is wrong (count, >= 0).
        c: pairs where A is wrong and B is right (count, >= 0).
        alternative: ``"two-sided"``; ``"greater"`` = the A-right/B-wrong discordance
            is more likely than the reverse (B worse than A); ``"less"`` = B better.

    Returns:
        The p-value in [0, 1]; 1.0 when ``b + c == 0`` (no evidence either way).

    Under H0 (marginal homogeneity) b ~ Binomial(b + c, 1/2) given b + c (McNemar
    1947, Psychometrika 12:153-157; exact form: Agresti, Categorical Data Analysis,
    2nd ed. sec. 10.1 / 3rd ed. sec. 11.1). Computed as ``scipy.stats.binomtest(b, b + c, 0.5,
    alternative)``; the two-sided p-value is scipy's (for p = 1/2 it equals twice the
    smaller tail, capped at 1).

    Raises:
        ValueError: a negative count or an unknown alternative.
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"unknown alternative {alternative!r}")
    if b + c == 0:
        return 1.0
    return float(stats.binomtest(int(b), int(b + c), 0.5, alternative=alternative).pvalue)


def _mcnemar_chi2_cc(b: int, c: int) -> float:
    """McNemar chi-square with Edwards' continuity correction, 1 d.f.:
    (|b - c| - 1)^2 / (b + c) (Edwards 1948; Agresti, CDA 2nd ed. sec. 10.1)."""
    stat = max(abs(b - c) - 1, 0) ** 2 / (b + c)
    return float(stats.chi2.sf(stat, df=1))


#: The paired comparison is the record type itself (fields and meaning: :class:`PairedRecord`).


def paired_comparison(
    a: Mapping[str, bool], b: Mapping[str, bool], confidence: float = 0.95
) -> PairedRecord:
    """Compare variant B against variant A question by question.

    Args:
        a, b: question id -> correct (bool) for variants A (e.g. reference) and B
            (e.g. spec_async). Only ids present in both are compared; a failed request
            should be left out of the dict rather than recorded as wrong.
        confidence: two-sided level of ``diff_ci``, in (0, 1).

    Returns:
        A :class:`PairedRecord`. With b = |a_only|, c = |b_only|:

        * ``diff = (c - b)/n``;
        * ``diff_ci = diff -/+ z * sqrt(var)``, ``var = (b + c)/n^2 - (b - c)^2/n^3``,
          the Wald interval for a difference of paired proportions (Agresti,
          Categorical Data Analysis, 2nd ed. sec. 10.1 / 3rd ed. sec. 11.1;
          Newcombe 1998, Stat. Med. 17:2635-2650, method 1), clipped to [-1, 1]; zero width when
          b = c = 0;
        * ``p_value``: exact McNemar (:func:`mcnemar_exact`) when b + c < 25, else
          chi-square with continuity correction; 1.0 when b + c == 0;
        * ``one_sided_p_value``: exact, H1 "B worse than A" (see the class).

    Raises:
        ValueError: no question id in common, or confidence outside (0, 1).
    """
    _check_confidence(confidence)
    common = sorted(set(a) & set(b))
    n = len(common)
    if n == 0:
        raise ValueError("paired_comparison: A and B have no question id in common")
    a_only = tuple(q for q in common if bool(a[q]) and not bool(b[q]))
    b_only = tuple(q for q in common if not bool(a[q]) and bool(b[q]))
    both_correct = sum(1 for q in common if bool(a[q]) and bool(b[q]))
    both_wrong = n - both_correct - len(a_only) - len(b_only)
    nb, nc = len(a_only), len(b_only)

    acc_a = (both_correct + nb) / n
    acc_b = (both_correct + nc) / n
    diff = (nc - nb) / n
    var = (nb + nc) / n**2 - (nb - nc) ** 2 / n**3
    half = _z_two_sided(confidence) * math.sqrt(max(var, 0.0))
    diff_ci = (max(diff - half, -1.0), min(diff + half, 1.0))

    if nb + nc == 0:
        p_value, test = 1.0, "none"
    elif nb + nc < EXACT_MCNEMAR_BELOW:
        p_value, test = mcnemar_exact(nb, nc), "mcnemar_exact"
    else:
        p_value, test = _mcnemar_chi2_cc(nb, nc), "mcnemar_chi2_cc"

    return PairedRecord(
        n=n,
        accuracy_a=acc_a,
        accuracy_b=acc_b,
        diff=diff,
        diff_ci=diff_ci,
        a_only=a_only,
        b_only=b_only,
        both_correct=both_correct,
        both_wrong=both_wrong,
        p_value=p_value,
        test=test,
        one_sided_p_value=mcnemar_exact(nb, nc, alternative="greater"),
        confidence=confidence,
    )


def newcombe_interval(x_a: int, n_a: int, x_b: int, n_b: int, confidence: float = 0.95) -> tuple[float, float]:
    """Interval for ``p_b - p_a`` of two independent proportions (x/n each).

    Newcombe's hybrid score interval (Newcombe 1998, "Interval estimation for the
    difference between independent proportions: comparison of eleven methods",
    Stat. Med. 17:873-890, method 10), from the Wilson intervals (l, u) of each::

        d = p_b - p_a
        low  = d - sqrt((p_b - l_b)^2 + (u_a - p_a)^2)
        high = d + sqrt((u_b - p_b)^2 + (p_a - l_a)^2)

    Raises:
        ValueError: n_a or n_b is 0, or counts out of range (from the Wilson interval).
    """
    if n_a <= 0 or n_b <= 0:
        raise ValueError("newcombe_interval needs n_a > 0 and n_b > 0")
    pa, pb = x_a / n_a, x_b / n_b
    la, ua = wilson_interval(x_a, n_a, confidence)
    lb, ub = wilson_interval(x_b, n_b, confidence)
    d = pb - pa
    return (d - math.sqrt((pb - lb) ** 2 + (ua - pa) ** 2), d + math.sqrt((ub - pb) ** 2 + (pa - la) ** 2))


def fisher_p_values(x_a: int, n_a: int, x_b: int, n_b: int) -> tuple[float, float]:
    """Fisher's exact test of two independent proportions (x/n each) on the 2x2 table
    ``[[x_a, n_a - x_a], [x_b, n_b - x_b]]`` (``scipy.stats.fisher_exact``).

    Returns:
        (two-sided p, one-sided p for "B lower than A", i.e. ``alternative="greater"``).
    """
    table = [[x_a, n_a - x_a], [x_b, n_b - x_b]]
    return (float(stats.fisher_exact(table)[1]), float(stats.fisher_exact(table, alternative="greater")[1]))


# --------------------------------------------------------------------------- power


def min_detectable_drop(
    n: int,
    p: float,
    alpha: float = 0.05,
    power: float = 0.8,
    discordance: float | None = None,
) -> float:
    """Smallest accuracy drop a one-sided level-``alpha`` test detects with ``power``.

    Args:
        n: number of questions (>= 1).
        p: baseline accuracy, a fraction in [0, 1] (used by the unpaired formula only).
        alpha: one-sided significance level in (0, 0.5).
        power: wanted power in (0.5, 1).
        discordance: for a paired (McNemar) test, the probability psi in (0, 1] that a
            question is discordant (right in exactly one variant); None for the
            unpaired / floor test.

    Returns:
        The drop delta as a fraction of questions (0.05 = 5 points of accuracy).

        * Unpaired / floor test (normal approximation, one-sample test of a
          proportion, e.g. Chow, Shao & Wang, Sample Size Calculations in Clinical
          Research, sec. 4.1): ``delta = (z_{1-alpha} + z_{power}) * sqrt(p(1-p)/n)``.
          It is not capped at p.
        * Paired test (Connor 1987, "Sample size for testing differences in
          proportions for the paired-sample design", Biometrics 43:207-211), whose
          sample size ``n = (z_{1-alpha} sqrt(psi) + z_{power} sqrt(psi - delta^2))^2
          / delta^2`` is inverted: delta solves
          ``delta * sqrt(n) = z_{1-alpha} sqrt(psi) + z_{power} sqrt(psi - delta^2)``
          on (0, psi] (a drop cannot exceed the discordance), by
          bisection (f is increasing there). When even delta = psi is not detectable,
          ``math.inf`` is returned.

    Raises:
        ValueError: an argument outside the ranges above.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p!r}")
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha!r}")
    if not 0.5 < power < 1.0:
        raise ValueError(f"power must be in (0.5, 1), got {power!r}")
    z_a = NormalDist().inv_cdf(1.0 - alpha)
    z_b = NormalDist().inv_cdf(power)
    if discordance is None:
        return (z_a + z_b) * math.sqrt(p * (1.0 - p) / n)
    psi = float(discordance)
    if not 0.0 < psi <= 1.0:
        raise ValueError(f"discordance must be in (0, 1], got {discordance!r}")

    def f(delta: float) -> float:
        return delta * math.sqrt(n) - z_a * math.sqrt(psi) - z_b * math.sqrt(max(psi - delta**2, 0.0))

    if f(psi) < 0.0:
        return math.inf
    # f(0) = -(z_a + z_b) sqrt(psi) < 0 and f is increasing on [0, psi]: bisection
    # to 1e-12 (no scipy import, so --dry-run starts fast).
    lo, hi = 0.0, psi
    while hi - lo > 1e-12:
        mid = (lo + hi) / 2
        if f(mid) < 0.0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


# --------------------------------------------------------------------------- two proportions


def two_proportion_p(x1: float, n1: float, x2: float, n2: float) -> float | None:
    """One-sided p-value that proportion 2 is below proportion 1: the pooled two-proportion
    z test (Fleiss, Levin & Paik, Statistical Methods for Rates and Proportions, 3rd ed.,
    sec. 2.5 / 4.2): ``z = (x1/n1 - x2/n2) / sqrt(pbar (1 - pbar) (1/n1 + 1/n2))`` with
    ``pbar = (x1 + x2) / (n1 + n2)``, ``p = 1 - Phi(z)``.

    Used on speculative-decoding counts: x = accepted_per_pos[i], n = drafts. Drafts of one
    request are not independent, so with clustered acceptance the test is anti-conservative
    (docs/gates.md); the gates pair it with a relative tolerance for that reason.

    Returns:
        The p-value in [0, 1]; 1.0 when both proportions are 0 or both 1 (no variance,
        no evidence of a drop); None when n1 or n2 is not positive.
    """
    if n1 <= 0 or n2 <= 0:
        return None
    pbar = (x1 + x2) / (n1 + n2)
    var = pbar * (1.0 - pbar) * (1.0 / n1 + 1.0 / n2)
    if var <= 0.0:
        return 1.0
    z = (x1 / n1 - x2 / n2) / math.sqrt(var)
    return NormalDist().cdf(-z)


def two_proportion_power(p1: float, rel_drop: float, n: float, alpha: float) -> float:
    """Power of :func:`two_proportion_p` at one-sided level ``alpha`` to detect a true drop
    from ``p1`` to ``p2 = p1 (1 - rel_drop)`` with ``n`` trials on each side (normal
    approximation, Fleiss, Levin & Paik sec. 4.2): ``Phi((p1 - p2 - z_{1-alpha} sqrt(2
    pbar (1 - pbar) / n)) / sqrt((p1 (1 - p1) + p2 (1 - p2)) / n))``, pbar = (p1 + p2) / 2.

    Raises:
        ValueError: p1 outside (0, 1), rel_drop outside (0, 1], n < 1, alpha outside (0, 0.5).
    """
    if not 0.0 < p1 < 1.0 or not 0.0 < rel_drop <= 1.0 or n < 1 or not 0.0 < alpha < 0.5:
        raise ValueError(f"two_proportion_power: p1={p1}, rel_drop={rel_drop}, n={n}, alpha={alpha} out of range")
    p2 = p1 * (1.0 - rel_drop)
    pbar = (p1 + p2) / 2
    z_a = NormalDist().inv_cdf(1.0 - alpha)
    se1 = math.sqrt(2 * pbar * (1 - pbar) / n)
    se = math.sqrt((p1 * (1 - p1) + p2 * (1 - p2)) / n)
    return NormalDist().cdf((p1 - p2 - z_a * se1) / se)


# --------------------------------------------------------------------------- bootstrap


def _generator_kw(seed: int) -> dict:
    """``rng=`` (scipy >= 1.15) or ``random_state=`` for scipy.stats.bootstrap."""
    params = inspect.signature(stats.bootstrap).parameters
    key = "rng" if "rng" in params else "random_state"
    return {key: np.random.default_rng(seed)}


def bootstrap_ci(
    values: Sequence[float],
    statistic: Callable | None = None,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of ``statistic(values)``.

    Args:
        values: one number per unit (e.g. per request), same unit as the result.
        statistic: function of a 1-D array (None = ``numpy.mean``); if it accepts
            ``axis`` it is called vectorised (``np.mean``, ``np.median`` do).
        confidence: two-sided level in (0, 1).
        n_resamples: number of bootstrap resamples (>= 1).
        seed: seed of the ``numpy.random.Generator``; same inputs and seed give the
            same interval.

    Returns:
        ``(low, high)`` in the unit of the statistic. A single value gives
        ``(s, s)`` with s = statistic(values) (every resample is identical).

    Method: Efron & Tibshirani 1993, An Introduction to the Bootstrap, ch. 13
    (percentile interval), computed with ``scipy.stats.bootstrap(method="percentile")``.

    Raises:
        ValueError: empty or non-finite values, bad confidence or n_resamples.
    """
    _check_confidence(confidence)
    if statistic is None:
        statistic = np.mean
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError("bootstrap_ci needs a non-empty 1-D sequence of numbers")
    if not np.all(np.isfinite(arr)):
        raise ValueError("bootstrap_ci: values must be finite")
    if arr.size == 1:
        s = float(statistic(arr))
        return (s, s)
    res = stats.bootstrap(
        (arr,),
        statistic,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="percentile",
        **_generator_kw(seed),
    )
    return (float(res.confidence_interval.low), float(res.confidence_interval.high))


def ratio_bootstrap_ci(
    numerators: Sequence[float],
    denominators: Sequence[float],
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval for a ratio of sums, resampling units in pairs.

    Args:
        numerators, denominators: one pair per unit (e.g. per request: accepted draft
            tokens and drafts), equal lengths, finite, denominators >= 0.
        confidence: two-sided level in (0, 1).
        n_resamples: number of bootstrap resamples (>= 1).
        seed: seed of the ``numpy.random.Generator`` (deterministic per seed).

    Returns:
        ``(low, high)`` for ``sum(numerators) / sum(denominators)`` (the unit of the
        ratio, e.g. accepted tokens per draft). Units are resampled with replacement
        as (numerator, denominator) pairs, which keeps the correlation inside a request
        (Efron & Tibshirani 1993, ch. 13; the ratio estimator of Cochran, Sampling
        Techniques, 3rd ed., ch. 6). Resamples whose denominator sum is 0 have no
        ratio and are dropped before the percentiles are taken (``numpy.percentile``,
        linear interpolation, as ``scipy.stats.bootstrap`` does).

    Raises:
        ValueError: empty or unequal inputs, non-finite or negative denominators,
            ``sum(denominators) == 0``, bad confidence or n_resamples.
    """
    _check_confidence(confidence)
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    num = np.asarray(numerators, dtype=float)
    den = np.asarray(denominators, dtype=float)
    if num.ndim != 1 or num.shape != den.shape or num.size == 0:
        raise ValueError("ratio_bootstrap_ci needs two non-empty 1-D sequences of equal length")
    if not (np.all(np.isfinite(num)) and np.all(np.isfinite(den))):
        raise ValueError("ratio_bootstrap_ci: values must be finite")
    if np.any(den < 0):
        raise ValueError("ratio_bootstrap_ci: denominators must be >= 0")
    if den.sum() == 0:
        raise ValueError("ratio_bootstrap_ci: all denominators are 0, the ratio is undefined")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, num.size, size=(n_resamples, num.size))
    num_b = num[idx].sum(axis=1)
    den_b = den[idx].sum(axis=1)
    keep = den_b > 0
    ratios = num_b[keep] / den_b[keep]
    alpha = 1.0 - confidence
    low, high = np.percentile(ratios, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return (float(low), float(high))


# --------------------------------------------------------------------------- floors


def floor_margin(
    n_run: int, n_calibration: int | None, p: float, confidence: float = 0.95
) -> float:
    """Extra allowance below an accuracy floor for a run smaller than its calibration.

    Model: the floor was calibrated on a question set of ``n_calibration`` questions
    (accuracy about ``p``), and the run scores the first ``n_run`` of those questions,
    treated as a simple random sample without replacement from them. The run's
    accuracy then differs from the calibration set's by sampling alone with variance
    ``p(1-p)/n_run * (N - n_run)/(N - 1)``, N = n_calibration (finite population
    correction; Cochran, Sampling Techniques, 3rd ed., 1977, Theorem 2.2 with
    S^2 = N p(1-p)/(N-1)). The margin is the one-sided bound::

        z_{confidence} * sqrt(p(1-p) * (N - n_run) / (n_run * (N - 1)))

    Choices (documented, since other conventions exist):

    * ``n_run >= n_calibration`` -> 0.0: the run covers the whole calibration set (or
      more), so no subset sampling is left; a floor's own calibration margin is not
      re-added.
    * ``n_calibration is None`` (unknown, or the floor is treated as a population
      value) -> the N -> infinity limit ``z * sqrt(p(1-p)/n_run)``.
    * The margin is one-sided (a floor is only violated from below): z =
      ``norm.ppf(confidence)``, 1.645 for 0.95.

    Args:
        n_run: questions in the run (>= 1).
        n_calibration: questions the floor was measured on (>= 1), or None.
        p: accuracy fraction in [0, 1] (the floor's calibration accuracy).
        confidence: one-sided level in [0.5, 1).

    Returns:
        The margin as an accuracy fraction (>= 0), to subtract from the floor.

    Raises:
        ValueError: an argument outside the ranges above.
    """
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"confidence must be in [0.5, 1), got {confidence!r}")
    if n_run < 1:
        raise ValueError(f"n_run must be >= 1, got {n_run}")
    if n_calibration is not None and n_calibration < 1:
        raise ValueError(f"n_calibration must be >= 1 or None, got {n_calibration}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p!r}")
    z = NormalDist().inv_cdf(confidence)
    if n_calibration is None:
        return z * math.sqrt(p * (1.0 - p) / n_run)
    if n_run >= n_calibration:
        return 0.0
    big_n = n_calibration
    return z * math.sqrt(p * (1.0 - p) * (big_n - n_run) / (n_run * (big_n - 1)))


def binomial_variance(p: float, n: int) -> float:
    """Sampling variance of an accuracy p over n questions, ``pt (1 - pt) / n`` with
    the Agresti-Coull shrunk proportion ``pt = (p n + 2) / (n + 4)`` ("add two successes
    and two failures", Agresti & Coull 1998, Am. Stat. 52:119-126), so that an accuracy
    of exactly 0 or 1 on a small run does not claim zero sampling error.

    Raises:
        ValueError: n < 1 or p outside [0, 1].
    """
    if n < 1 or not 0.0 <= p <= 1.0:
        raise ValueError(f"need n >= 1 and 0 <= p <= 1, got n={n}, p={p}")
    pt = (p * n + 2) / (n + 4)
    return pt * (1 - pt) / n
