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

from harness.analysis.sampled import committed_length, detectable_shift, sampled_test, smallest_attainable_p
from harness.records.completions import TargetScore, TokenScores
from harness.run.sampled_steps import target_score

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


def _ranked(means: list[float], top1: list[int], tokens: int = 4) -> dict[str, TargetScore]:
    return {f"q/{i}": TargetScore(f"q/{i}", tokens, m * tokens, top1=k) for i, (m, k) in enumerate(zip(means, top1))}


def test_both_statistics_in_one_max_t_sign_flip_test_by_enumeration():
    # per question: mean log-probability and top-1 count (of 4 tokens) on both sides
    a, ka = [-1.0, -0.5, -2.0, -1.5, -0.25, -1.1, -0.9], [2, 3, 1, 2, 4, 2, 3]
    b, kb = [-0.9, -0.55, -2.1, -1.4, -0.3, -1.0, -0.95], [4, 3, 3, 1, 4, 4, 4]
    d = [y - x for x, y in zip(a, b)]
    e = [(y - x) / 4 for x, y in zip(ka, kb)]

    def big_t(signs):  # Westfall & Young's maxT: each sum over its sign-flip-invariant scale
        return max(abs(sum(s * v for s, v in zip(signs, col))) / math.sqrt(sum(v * v for v in col))
                   for col in (d, e))

    flips = list(itertools.product((1, -1), repeat=len(d)))
    obs = big_t((1,) * len(d))
    want = sum(big_t(f) >= obs - 1e-12 for f in flips) / len(flips)
    alone = [sum(abs(sum(s * v for s, v in zip(f, col))) >= abs(sum(col)) - 1e-12 for f in flips) / len(flips)
             for col in (d, e)]
    st = sampled_test(_ranked(a, ka), _ranked(b, kb), "reference")
    assert st is not None and st.resamples == 0
    assert st.p_value == pytest.approx(want)
    assert st.logprob_p_value == pytest.approx(alone[0]) and st.top1_p_value == pytest.approx(alone[1])
    assert st.top1_shift == pytest.approx(statistics.mean(e)) and st.top1_a == pytest.approx(statistics.mean(ka) / 4)
    # one test, no split: never above the smaller marginal times 2 (Bonferroni), here far below it
    assert min(alone) <= st.p_value <= 2 * min(alone)
    # without ranks on a side: the log-probability test alone, as before
    plain = sampled_test(_scores(a), _ranked(b, kb), "reference")
    assert plain is not None and plain.top1_shift is None and plain.p_value == pytest.approx(alone[0])


def test_smallest_attainable_p_is_two_over_two_to_the_n_and_reached_when_every_sign_agrees():
    assert [smallest_attainable_p(n) for n in (0, 1, 5, 6)] == [1.0, 1.0, 2 / 32, 2 / 64]
    n = 6
    st = sampled_test(_ranked([-1.0] * n, [1] * n), _ranked([-0.5 - i / 10 for i in range(n)], [3] * n), "r")
    assert st is not None and st.p_value == pytest.approx(smallest_attainable_p(n))
    with pytest.raises(ValueError):
        smallest_attainable_p(-1)


@pytest.mark.parametrize("pieces, stop, want", [
    (("a", "b", "\n\n", "c", "d"), "\n\n", 3),       # ids past the stop string: cut
    (("a", "b", "\n\n"), "\n\n", 3),                 # ends on it: nothing cut
    (("a", "\n", "\nQ", "x"), "\n\n", 3),            # the stop string across two ids, and past it in the last
    (("Quest", "ion", ":", "x"), "Question", 2),
    (("a", "b"), None, 2),                             # end of sequence / length: the scheduler stopped there
    (("a", "b", "c"), 151643, 3),                      # a stop token id: likewise
    (("a", "b"), "\n\n", None),                        # the stop string is not in the text: cannot cut
    (("a", None, "\n\n"), "\n\n", None),               # a piece not reported: cannot cut
])
def test_committed_length_cuts_after_the_id_completing_the_stop_string(pieces, stop, want):
    assert committed_length(pieces, stop) == want


def test_both_sides_are_scored_on_the_committed_ids_only():
    ref = TokenScores((-1.0, -2.0, -0.5), (1, 2, 1), ("a", "b", "\n\n"))
    spec = TokenScores((-1.0, -2.0, -0.5, -4.0, -3.0), (1, 2, 1, 7, 5), ("a", "b", "\n\n", "c", "d"))
    r, s = target_score("q", ref, 7, "\n\n"), target_score("q", spec, 8, "\n\n")
    assert (r.tokens, r.logprob_sum, r.top1, r.past_stop) == (3, -3.5, 2, 0)
    assert (s.tokens, s.logprob_sum, s.top1, s.past_stop) == (3, -3.5, 2, 2) and s.seed == 8
    assert s.mean_logprob == r.mean_logprob  # uncut, the speculative side would score -10.5 / 5 = -2.1 per token
    lost = target_score("q", TokenScores((-1.0, -2.0), (1, None), ("a", "b")), None, "\n\n")
    assert (lost.tokens, lost.logprob_sum, lost.top1, lost.past_stop) == (2, -3.0, None, None)
    assert target_score("q", "request q: HTTP 500", 1, None).error == "request q: HTTP 500"
