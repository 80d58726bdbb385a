"""The bisection's search and step verdicts (pure functions, no engine)."""

from __future__ import annotations

import math

import pytest

from harness.analysis.bisection import first_bad, next_probe, step_verdict


def _search(n: int, oracle) -> tuple[int | None, list[int], tuple[int, ...]]:
    """Run the search with ``oracle(i) -> verdict``; returns (found, probes after the ends,
    candidates left)."""
    verdicts = {0: oracle(0), n - 1: oracle(n - 1)}
    probes = []
    while (i := next_probe(n, verdicts)) is not None:
        assert i not in verdicts, "a build is never evaluated twice"
        probes.append(i)
        verdicts[i] = oracle(i)
    out = first_bad(n, verdicts)
    assert out.done
    return out.first_bad, probes, out.candidates


@pytest.mark.parametrize("n", range(2, 10))
def test_every_first_bad_is_found_within_the_binary_bound(n):
    # the first bad build is one of 1 .. n-1: n-1 answers, so yes/no probes need
    # ceil(log2(n-1)) in the worst case, and the search must not need more
    bound = math.ceil(math.log2(n - 1)) if n > 2 else 0
    worst = 0
    for k in range(1, n):
        found, probes, _ = _search(n, lambda i, k=k: "bad" if i >= k else "good")
        assert found == k
        assert len(probes) <= bound
        worst = max(worst, len(probes))
    assert worst == bound  # and the bound is reached: no probe is wasted on a known answer


def test_six_builds_two_ends_plus_a_binary_search():
    # six builds, the fourth (index 3) first bad: the ends, then the middle of 0..5
    # (2 or 3: the lower on a tie), then what is left
    seen = []

    def oracle(i):
        seen.append(i)
        return "bad" if i >= 3 else "good"

    found, probes, _ = _search(6, oracle)
    assert found == 3
    assert seen[:2] == [0, 5]
    assert probes == [2, 3]  # 2 good -> (2, 5): middle 3.5 -> 3 bad -> (2, 3): done
    assert len(seen) <= 2 + math.ceil(math.log2(5))


def test_a_skipped_build_is_gone_around_and_can_leave_the_answer_open():
    # index 2 cannot be judged (its server does not start); first bad is 4: 3 decides
    found, probes, cands = _search(6, lambda i: "skip" if i == 2 else ("bad" if i >= 4 else "good"))
    assert found == 4 and probes[0] == 2 and cands == (4,)
    # first bad is 2 or 3 and 2 cannot be judged: 1 good, 3 bad -> left open
    found, probes, cands = _search(6, lambda i: "skip" if i == 2 else ("bad" if i >= 3 else "good"))
    assert found is None and cands == (2, 3)


def test_ends_must_be_good_and_bad():
    with pytest.raises(ValueError, match="ends"):
        next_probe(4, {0: "bad", 3: "bad"})
    with pytest.raises(ValueError, match="at least two"):
        next_probe(1, {0: "good"})


def test_step_verdict_counts_only_the_bad_ends_gates():
    bad_end = ["c/spec/output_match", "c/spec/accuracy_drop"]
    # an unrelated flaky gate failed, the bad end's gates passed: good
    j = step_verdict(bad_end, {"c/spec/output_match": True, "c/spec/accuracy_drop": True, "c/ref/error_rate": False})
    assert j.verdict == "good" and j.other_failures == ("c/ref/error_rate",)
    # one of them failed again: bad
    j = step_verdict(bad_end, {"c/spec/output_match": False, "c/spec/accuracy_drop": True})
    assert j.verdict == "bad" and j.failed == ("c/spec/output_match",) and j.passed == ("c/spec/accuracy_drop",)
    # one not judged (NOT RUN) and none failed: skip; a missing gate counts as not judged
    assert step_verdict(bad_end, {"c/spec/output_match": None, "c/spec/accuracy_drop": True}).verdict == "skip"
    assert step_verdict(bad_end, {"c/spec/output_match": True}).not_judged == ("c/spec/accuracy_drop",)
    with pytest.raises(ValueError, match="nothing to bisect"):
        step_verdict([], {})
