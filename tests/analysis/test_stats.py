"""Tests for harness.analysis.stats against independent computations.

Reference values are written out here: textbook closed forms, published numbers,
hand-computed binomial sums, scipy called directly, and small simulations.
"""

from __future__ import annotations

import math

import numpy as np  # noqa: TID253 - the test's own reference; a cost of this file's collection only
import pytest
from scipy import stats as sps  # noqa: TID253 - the test's own reference; a cost of this file's collection only

from harness.analysis.stats import (
    bootstrap_ci,
    floor_margin,
    mcnemar_exact,
    min_detectable_drop,
    paired_comparison,
    ratio_bootstrap_ci,
    wilson_interval,
)
from harness.records.measures import PairedRecord

Z95 = 1.959963984540054  # z_{0.975}
Z95_ONE_SIDED = 1.6448536269514722  # z_{0.95}
Z80 = 0.8416212335729143  # z_{0.80}


def wilson_closed_form(k: int, n: int, z: float) -> tuple[float, float]:
    """Wilson (1927) score interval, textbook form."""
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


# ---------------------------------------------------------------- Wilson


@pytest.mark.parametrize("k,n", [(7, 20), (0, 10), (10, 10), (50, 100), (1100, 1319), (1, 3)])
def test_wilson_matches_closed_form(k, n):
    lo, hi = wilson_interval(k, n)
    elo, ehi = wilson_closed_form(k, n, Z95)
    assert lo == pytest.approx(max(elo, 0.0), abs=1e-12)
    assert hi == pytest.approx(min(ehi, 1.0), abs=1e-12)


@pytest.mark.parametrize(
    "k,n,low,high",
    # Newcombe (1998), Stat. Med. 17:857-872, Table II, method 3 (Wilson score).
    [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718)],
)
def test_wilson_published_values(k, n, low, high):
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(low, abs=6e-5)
    assert hi == pytest.approx(high, abs=6e-5)


def test_wilson_other_confidence():
    lo, hi = wilson_interval(30, 40, confidence=0.9)
    elo, ehi = wilson_closed_form(30, 40, 1.6448536269514722)
    assert (lo, hi) == pytest.approx((elo, ehi), abs=1e-12)


def test_wilson_statsmodels():
    # the test extra installs it: this check must run, not skip; only this test loads it
    from statsmodels.stats import proportion  # noqa: PLC0415
    for k, n in [(7, 20), (0, 10), (50, 100)]:
        assert wilson_interval(k, n) == pytest.approx(
            proportion.proportion_confint(k, n, alpha=0.05, method="wilson"), abs=1e-10
        )


def test_wilson_edge_cases():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(5, 4)
    with pytest.raises(ValueError):
        wilson_interval(-1, 4)
    with pytest.raises(ValueError):
        wilson_interval(1, 4, confidence=1.0)


# ---------------------------------------------------------------- McNemar


def test_mcnemar_exact_hand_value():
    # b=1, c=6: 2 * (C(7,0) + C(7,1)) / 2^7 = 2 * 8 / 128 = 0.125
    assert mcnemar_exact(1, 6) == pytest.approx(0.125, abs=1e-12)
    assert mcnemar_exact(6, 1) == pytest.approx(0.125, abs=1e-12)
    # One-sided: P(X >= 6 | n=7) = (C(7,6) + C(7,7)) / 128 = 8/128
    assert mcnemar_exact(6, 1, alternative="greater") == pytest.approx(8 / 128, abs=1e-12)
    # P(X <= 6 | n=7) = 1 - 1/128
    assert mcnemar_exact(6, 1, alternative="less") == pytest.approx(127 / 128, abs=1e-12)


@pytest.mark.parametrize("b,c", [(0, 5), (3, 3), (2, 9), (12, 4), (40, 25)])
def test_mcnemar_exact_matches_binomtest(b, c):
    for alt in ("two-sided", "greater", "less"):
        expected = sps.binomtest(b, b + c, 0.5, alternative=alt).pvalue
        assert mcnemar_exact(b, c, alternative=alt) == pytest.approx(expected, rel=1e-12)


def test_mcnemar_no_discordance():
    assert mcnemar_exact(0, 0) == 1.0
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)
    with pytest.raises(ValueError):
        mcnemar_exact(1, 2, alternative="bigger")


# ---------------------------------------------------------------- paired comparison


def make_pairs(both_right, a_only, b_only, both_wrong):
    a, b = {}, {}
    i = 0
    for count, va, vb in ((both_right, True, True), (a_only, True, False),
                          (b_only, False, True), (both_wrong, False, False)):
        for _ in range(count):
            qid = f"gsm8k/test/{i:04d}"
            a[qid], b[qid] = va, vb
            i += 1
    return a, b


def test_paired_comparison_counts():
    a = {"q1": True, "q2": True, "q3": False, "q4": False, "q5": True, "only_a": True}
    b = {"q1": True, "q2": False, "q3": True, "q4": False, "q5": False, "only_b": False}
    r = paired_comparison(a, b)
    assert r.n == 5
    assert r.a_only == ("q2", "q5")
    assert r.b_only == ("q3",)
    assert r.both_correct == 1 and r.both_wrong == 1
    assert r.accuracy_a == pytest.approx(3 / 5)
    assert r.accuracy_b == pytest.approx(2 / 5)
    assert r.diff == pytest.approx(-1 / 5)
    # b=2, c=1, exact two-sided: 2 * P(X <= 1 | 3) = 2 * 4/8 = 1.0
    assert r.test == "mcnemar_exact"
    assert r.p_value == pytest.approx(1.0)
    # one-sided "B worse": P(X >= 2 | 3) = 4/8
    assert r.one_sided_p_value == pytest.approx(0.5)
    # var = (b+c)/n^2 - (b-c)^2/n^3 = 3/25 - 1/125 = 14/125
    half = Z95 * math.sqrt(14 / 125)
    assert r.diff_ci == pytest.approx((-0.2 - half, -0.2 + half))


def test_paired_comparison_exact_branch():
    a, b = make_pairs(both_right=80, a_only=6, b_only=1, both_wrong=13)
    r = paired_comparison(a, b)
    assert (r.n, len(r.a_only), len(r.b_only)) == (100, 6, 1)
    assert r.test == "mcnemar_exact"
    assert r.p_value == pytest.approx(0.125)  # 2 * (1 + 7) / 128
    assert r.one_sided_p_value == pytest.approx(8 / 128)
    assert r.accuracy_a == pytest.approx(0.86) and r.accuracy_b == pytest.approx(0.81)


def test_paired_comparison_chi2_branch():
    a, b = make_pairs(both_right=500, a_only=20, b_only=10, both_wrong=70)
    r = paired_comparison(a, b)
    assert r.test == "mcnemar_chi2_cc"
    # (|20 - 10| - 1)^2 / 30 = 2.7 ; chi2(1 d.f.) tail = erfc(sqrt(x / 2))
    assert r.p_value == pytest.approx(math.erfc(math.sqrt(2.7 / 2)), rel=1e-10)
    assert r.one_sided_p_value == pytest.approx(
        sps.binomtest(20, 30, 0.5, alternative="greater").pvalue, rel=1e-12
    )
    n = 600
    diff = -10 / n
    var = 30 / n**2 - 100 / n**3
    assert r.diff == pytest.approx(diff)
    assert r.diff_ci == pytest.approx((diff - Z95 * math.sqrt(var), diff + Z95 * math.sqrt(var)))


def test_paired_comparison_identical():
    a, b = make_pairs(both_right=7, a_only=0, b_only=0, both_wrong=3)
    r = paired_comparison(a, b)
    assert r.p_value == 1.0 and r.one_sided_p_value == 1.0
    assert r.test == "none"
    assert r.diff == 0.0 and r.diff_ci == (0.0, 0.0)

    assert PairedRecord.model_validate(r, from_attributes=True).diff_ci == (0.0, 0.0)


def test_paired_comparison_no_overlap():
    with pytest.raises(ValueError):
        paired_comparison({"x": True}, {"y": True})


# ---------------------------------------------------------------- detectable drop


def test_min_detectable_drop_unpaired_plug_back():
    n, p = 1319, 0.8
    d = min_detectable_drop(n, p)
    assert d == pytest.approx((Z95_ONE_SIDED + Z80) * math.sqrt(p * (1 - p) / n))
    # Power of a one-sided z-test at that drop is exactly 0.8.
    power = sps.norm.cdf(d / math.sqrt(p * (1 - p) / n) - Z95_ONE_SIDED)
    assert power == pytest.approx(0.8, abs=1e-9)


def test_min_detectable_drop_paired_plug_back():
    n, psi = 500, 0.1
    d = min_detectable_drop(n, 0.8, discordance=psi)
    assert 0 < d <= psi
    # Connor (1987) sample size at that drop gives back n.
    n_back = (Z95_ONE_SIDED * math.sqrt(psi) + Z80 * math.sqrt(psi - d * d)) ** 2 / d**2
    assert n_back == pytest.approx(n, rel=1e-8)


def test_min_detectable_drop_paired_simulation():
    # Simulate the one-sided McNemar z-test (b - c)/sqrt(b + c) > z_{0.95} at the
    # returned drop; its power should be close to 0.8.
    n, psi = 500, 0.1
    d = min_detectable_drop(n, 0.8, discordance=psi)
    rng = np.random.default_rng(12345)
    p10, p01 = (psi + d) / 2, (psi - d) / 2
    counts = rng.multinomial(n, [p10, p01, 1 - psi], size=4000)
    b, c = counts[:, 0], counts[:, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(b + c > 0, (b - c) / np.sqrt(b + c), 0.0)
    power = float(np.mean(z > Z95_ONE_SIDED))
    assert power == pytest.approx(0.8, abs=0.04)


def test_min_detectable_drop_shrinks_with_n_and_rejects_bad_input():
    assert min_detectable_drop(400, 0.7) < min_detectable_drop(100, 0.7)
    assert min_detectable_drop(400, 0.7, discordance=0.1) < min_detectable_drop(100, 0.7, discordance=0.1)
    assert min_detectable_drop(2, 0.7, discordance=0.01) == math.inf
    for kwargs in ({"n": 0, "p": 0.5}, {"n": 10, "p": 1.5}, {"n": 10, "p": 0.5, "alpha": 0.7},
                   {"n": 10, "p": 0.5, "discordance": 0.0}):
        with pytest.raises(ValueError):
            min_detectable_drop(**kwargs)


# ---------------------------------------------------------------- bootstrap


def test_bootstrap_ci_contains_mean_and_is_deterministic():
    values = np.random.default_rng(7).normal(3.0, 1.0, size=200)
    lo, hi = bootstrap_ci(values, seed=1)
    assert lo < values.mean() < hi
    assert (lo, hi) == bootstrap_ci(values, seed=1)
    assert (lo, hi) != bootstrap_ci(values, seed=2)
    # Width close to the normal-theory interval 2 * 1.96 * s / sqrt(n).
    expected = 2 * Z95 * values.std(ddof=1) / math.sqrt(values.size)
    assert hi - lo == pytest.approx(expected, rel=0.15)


def test_bootstrap_ci_other_statistic_and_edges():
    values = [1.0, 2.0, 3.0, 4.0, 100.0]
    lo, hi = bootstrap_ci(values, statistic=np.median, n_resamples=500)
    assert lo <= 3.0 <= hi
    assert bootstrap_ci([5.0]) == (5.0, 5.0)
    with pytest.raises(ValueError):
        bootstrap_ci([])


def test_ratio_bootstrap_ci():
    rng = np.random.default_rng(3)
    drafts = rng.integers(5, 40, size=150).astype(float)
    accepted = rng.binomial(drafts.astype(int) * 2, 0.6).astype(float)
    ratio = accepted.sum() / drafts.sum()
    lo, hi = ratio_bootstrap_ci(accepted, drafts, seed=5)
    assert lo < ratio < hi
    assert (lo, hi) == ratio_bootstrap_ci(accepted, drafts, seed=5)
    # Requests with zero drafts are allowed as long as the total is positive.
    lo2, hi2 = ratio_bootstrap_ci([0.0, 3.0, 4.0], [0.0, 2.0, 2.0], n_resamples=300)
    assert lo2 <= 7 / 4 <= hi2
    with pytest.raises(ValueError):
        ratio_bootstrap_ci([1.0], [0.0])
    with pytest.raises(ValueError):
        ratio_bootstrap_ci([1.0, 2.0], [1.0])


# ---------------------------------------------------------------- floor margin


def test_floor_margin_formula():
    p = 0.8
    assert floor_margin(1319, 1319, p) == 0.0
    assert floor_margin(2000, 1319, p) == 0.0
    assert floor_margin(100, None, p) == pytest.approx(Z95_ONE_SIDED * math.sqrt(p * (1 - p) / 100))
    # Finite population: var = p(1-p)/m * (N-m)/(N-1)
    m, big_n = 100, 1319
    expected = Z95_ONE_SIDED * math.sqrt(p * (1 - p) / m * (big_n - m) / (big_n - 1))
    assert floor_margin(m, big_n, p) == pytest.approx(expected)
    assert floor_margin(50, big_n, p) > floor_margin(100, big_n, p) > floor_margin(1000, big_n, p) > 0
    with pytest.raises(ValueError):
        floor_margin(0, 10, p)


def test_floor_margin_matches_subset_simulation():
    # A fixed calibration set of 400 questions with 300 right; runs of 100 random ones.
    big_n, m = 400, 100
    population = np.array([1.0] * 300 + [0.0] * 100)
    p = population.mean()
    rng = np.random.default_rng(11)
    accs = np.array([rng.choice(population, size=m, replace=False).mean() for _ in range(4000)])
    sd = accs.std(ddof=1)
    assert floor_margin(m, big_n, p) == pytest.approx(Z95_ONE_SIDED * sd, rel=0.06)
