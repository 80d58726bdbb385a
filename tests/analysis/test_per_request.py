"""Per-request acceptance analyses (harness/analysis/per_request.py), on samples carrying
vLLM's ``metrics.speculative_decoding``; expected values worked out by hand or by scipy."""

from __future__ import annotations

from scipy import stats  # noqa: TID253 - the test's own reference; a cost of this file's collection only

from harness.analysis.per_request import (
    NO_PER_REQUEST,
    along_output,
    analyse,
    collapses,
    paired_by_question,
    requests_of,
    trend,
)
from harness.records.samples import Sample


def sd(steps: list[int], k: int = 2) -> dict:
    """A ``detailed`` answer for verify steps accepting ``steps`` drafts of ``k`` each."""
    hist = [steps.count(j) for j in range(k + 1)]
    n, a = len(steps), sum(steps)
    return {"mean_acceptance_length": 1 + a / n if n else 1.0, "draft_acceptance_rate": a / (k * n) if n else 0.0,
            "acceptance_histogram": hist, "num_spec_steps": n, "num_accepted_draft_tokens": a,
            "num_draft_tokens": k * n, "num_spec_tokens": k, "per_step_accepted": steps,
            "per_step_drafted": [k] * n}


def sample(q: str, steps: list[int] | None, variant: str = "spec_sync", prompt_tokens: int | None = None,
           t: float | None = None) -> Sample:
    return Sample(config="c", variant=variant, task="t", question_id=q, prompt_hash="0", gold="1", completion="x",
                  spec_decoding=None if steps is None else sd(steps), prompt_tokens=prompt_tokens,
                  sent_after_start_s=t)


def test_verify_steps_map_to_output_positions_after_the_prefill_token():
    (r,) = requests_of([sample("q", [2, 0, 1, 2])])
    # token 0 from the prefill; step 0 starts at 1 and emits 3, step 1 at 4 emits 1, step 2 at 5 emits 2
    assert r.positions() == [1, 4, 5, 7]
    assert r.rate == 5 / 8


def test_acceptance_along_the_output_by_bin():
    reqs = requests_of([sample("a", [2, 2, 2, 0, 0]), sample("b", [1, 1, 1, 1, 1, 1]), sample("c", None)])
    bins = along_output(reqs, bin_tokens=4)
    # a: steps at 1, 4, 7, 10, 11 -> bins 0, 1, 1, 2, 2; b: steps at 1, 3, 5, 7, 9, 11 -> bins 0, 0, 1, 1, 2, 2
    assert [(x["start"], x["requests"], x["steps"], x["accepted"], x["drafted"]) for x in bins] == [
        (0, 2, 3, 4, 6), (4, 2, 4, 6, 8), (8, 2, 4, 2, 8)]
    assert bins[2]["rate"] == 2 / 8 and bins[2]["rate_ci"] is not None


def test_a_request_whose_acceptance_stops_is_named_with_its_position():
    reqs = requests_of([sample("late", [2, 2, 1, 0, 0, 0, 0]), sample("never", [0, 0, 0, 0, 0]),
                        sample("short", [2, 0, 0, 0]), sample("fine", [2, 1, 2, 2])])
    # late: step 3 starts at 1 + 3 + 3 + 2 = 9, four empty steps after 5 accepted
    assert collapses(reqs) == [{"question_id": "late", "step": 3, "position": 9, "steps_after": 4,
                                "accepted_before": 5}]
    a = analyse([sample("late", [2, 2, 1, 0, 0, 0, 0]), sample("never", [0, 0, 0, 0, 0])])
    assert a["zero_accepted"] == ["never"] and a["requests"] == 2 and a["reason"] is None


def test_paired_by_question_uses_scipys_wilcoxon():
    a = requests_of([sample(f"q{i}", s) for i, s in enumerate([[2, 2], [2, 1], [1, 1], [2, 2], [0, 2]])])
    b = requests_of([sample(f"q{i}", s, "spec_async") for i, s in enumerate([[2, 0], [1, 1], [1, 1], [0, 0], [0, 1]])])
    p = paired_by_question(a, b)
    ra, rb = [1.0, 0.75, 0.5, 1.0, 0.5], [0.5, 0.5, 0.5, 0.0, 0.25]
    diffs = [y - x for x, y in zip(ra, rb)]
    assert p["questions"] == 5
    assert p["mean_diff"] == sum(diffs) / 5
    assert p["wilcoxon_p"] == stats.wilcoxon(diffs, zero_method="wilcox").pvalue
    assert p["largest_drops"][0] == ("q3", -1.0)
    assert paired_by_question(a, [])["reason"] == "no question has drafts on both variants"


def test_trends_by_prompt_length_and_uptime_use_spearman():
    rows = [sample(f"q{i}", s, prompt_tokens=n, t=float(i))
            for i, (s, n) in enumerate([([2, 2], 10), ([2, 1], 20), ([1, 0], 30), ([0, 0], 40)])]
    reqs = requests_of(rows)
    got = trend(reqs, "prompt_tokens")
    want = stats.spearmanr([10, 20, 30, 40], [1.0, 0.75, 0.25, 0.0])
    assert (got["spearman_rho"], got["p"], got["requests"]) == (want.statistic, want.pvalue, 4)
    assert trend(requests_of(rows[:2]), "sent_after_start_s")["reason"] == (
        "not available: 2 requests with drafts report sent_after_start_s")
    assert analyse([sample("q", None)])["reason"] == NO_PER_REQUEST
