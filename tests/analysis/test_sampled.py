"""The sampled verdict's statistics (harness/analysis/sampled.py), against values computed
here independently: the exact sign-flip p-value by enumerating every flip with itertools,
the t statistic by hand with the standard library, scipy's paired t-test, the normal
power formula; and its false-alarm rate under H0 for independent and for shared seeds."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest
from scipy import stats  # noqa: TID253 - the reference implementation these values are checked against

from harness.analysis.sampled import detectable_shift, sampled_test
from harness.records.completions import TargetScore

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)


def _scores(means: list[float], tokens: int = 4) -> dict[str, TargetScore]:
    return {f"q/{i}": TargetScore(f"q/{i}", tokens, m * tokens) for i, m in enumerate(means)}


def test_exact_sign_flip_p_value_and_t_statistic_by_hand():
    a = [-1.0, -0.5, -2.0, -1.5, -0.25]
    b = [-0.7, -0.6, -1.5, -1.3, -0.2]
    d = [y - x for x, y in zip(a, b)]
    obs = abs(sum(d) / len(d))
    flips = list(itertools.product((1, -1), repeat=len(d)))
    hits = sum(1 for s in flips if abs(sum(si * di for si, di in zip(s, d)) / len(d)) >= obs - 1e-12)
    st = sampled_test(_scores(a), _scores(b), "reference")
    assert st is not None and st.resamples == 0  # 2^5 flips: enumerated
    assert st.p_value == pytest.approx(hits / len(flips))
    sd = statistics.stdev(d)
    assert st.shift == pytest.approx(statistics.mean(d)) and st.sd == pytest.approx(sd)
    assert st.t == pytest.approx(statistics.mean(d) / (sd / math.sqrt(len(d))))
    assert st.t_p_value == pytest.approx(stats.ttest_rel(b, a).pvalue)
    assert st.mean_a == pytest.approx(statistics.mean(a)) and st.sum_a == pytest.approx(4 * statistics.mean(a))


def test_worst_questions_and_unscored_ones_are_named():
    a = _scores([-1.0, -1.0, -1.0])
    b = _scores([-3.0, -1.0, -0.5])
    b["q/3"] = TargetScore("q/3", 4, None, error="request failed")
    a["q/3"] = TargetScore("q/3", 4, -4.0)
    st = sampled_test(a, b, "reference")
    assert st is not None and st.n == 3 and st.unscored == ("q/3",) and st.worst == ("q/0",)


def test_identical_sides_give_p_one_and_no_shared_question_none():
    same = _scores([-1.0, -2.0])
    st = sampled_test(same, same, "reference")
    assert st is not None and st.p_value == 1.0 and st.shift == 0.0
    assert sampled_test(_scores([-1.0]), {}, "reference") is None


def test_an_empty_completion_has_mean_zero_and_an_error_none():
    assert TargetScore("q", 0, 0.0).mean_logprob == 0.0
    assert TargetScore("q", 3, -3.0).mean_logprob == -1.0
    assert TargetScore("q", 3, None, error="x").mean_logprob is None


def test_detectable_shift_is_the_normal_power_formula():
    z = statistics.NormalDist().inv_cdf
    assert detectable_shift(80, 0.1, 0.05) == pytest.approx((z(0.975) + z(0.8)) * 0.1 / math.sqrt(80))
    assert detectable_shift(80, 0.1, 0.05) == pytest.approx(0.031323, abs=1e-5)
    with pytest.raises(ValueError):
        detectable_shift(0, 0.1, 0.05)


def _simulate(n: int, shared: bool, rng: random.Random) -> float:
    """One null run: per question a target distribution over 8 tokens x 6 positions; both
    sides draw by inverse CDF with uniforms that are per question (independent) or the
    same for every question of a side (one seed on every request); the test's p-value."""
    sides = []
    for _ in range(2):
        common = [rng.random() for _ in range(6)]
        means = []
        for q in range(n):
            qr = random.Random(q)
            lp = 0.0
            for i in range(6):
                logits = [qr.gauss(0, 1.5) for _ in range(8)]
                zmax = max(logits)
                w = [math.exp(x - zmax) for x in logits]
                tot = sum(w)
                u = common[i] if shared else rng.random()
                acc, pick = 0.0, 7
                for t, x in enumerate(w):
                    acc += x / tot
                    if u < acc:
                        pick = t
                        break
                lp += math.log(w[pick] / tot)
            means.append(lp / 6)
        sides.append(means)
    st = sampled_test(_scores(sides[0]), _scores(sides[1]), "sim", resamples=999)
    assert st is not None
    return st.p_value


def test_false_alarm_rate_holds_for_independent_draws_and_not_for_one_shared_seed():
    rng = random.Random(7)
    reps = 100
    indep = sum(_simulate(30, False, rng) < 0.05 for _ in range(reps)) / reps
    shared = sum(_simulate(30, True, rng) < 0.05 for _ in range(reps)) / reps
    # binomial(100, 0.05): P(X >= 12) < 0.005
    assert indep < 0.12
    assert shared > 0.3  # one seed on every request: the questions share their luck
