"""Acceptance intervals from per-request counters (:mod:`harness.analysis.acceptance`).

The expected figures are worked out by hand: when every request has the same ratio, every
bootstrap resample has that ratio too, so each interval collapses to the exact value.
"""

from __future__ import annotations

import dataclasses

import pytest

from harness.analysis.acceptance import ACCEPTANCE_CI_CONCURRENT, ACCEPTANCE_CI_METHOD, acceptance_intervals

from ..sample_factory import constructed_sample


def counted(qid: str, drafts: int, draft_tokens: int, accepted: int, per_pos: tuple[float, ...]):
    """A sample with per-request speculative counters (sequential requests)."""
    return dataclasses.replace(constructed_sample(qid, True), spec_drafts=drafts, spec_draft_tokens=draft_tokens,
                               spec_accepted_tokens=accepted, spec_accepted_per_pos=per_pos)


def test_a_variant_without_speculation_has_no_intervals_and_says_why():
    out = acceptance_intervals([counted("q1", 10, 20, 15, (8, 7))], speculative=False)
    assert out["mean_acceptance_length_ci"] is None and out["acceptance_ci_requests"] == 0
    assert out["acceptance_ci_reason"] == "not applicable: the variant does not speculate"


def test_concurrent_requests_without_per_request_counts_have_no_intervals():
    out = acceptance_intervals([constructed_sample("q1", True), constructed_sample("q2", False)], speculative=True)
    assert out["acceptance_ci_reason"] == ACCEPTANCE_CI_CONCURRENT
    assert out["per_request_totals"] is None and out["acceptance_ci_method"] is None


def test_equal_ratios_give_intervals_at_the_exact_values():
    # 4 requests, each 10 drafts of 2 tokens, 15 accepted (8 at position 0, 7 at position 1):
    # mean acceptance length 1 + 15/10 = 2.5, acceptance rate 15/20 = 0.75, positions 0.8 and 0.7
    rows = [counted(f"q{i}", 10, 20, 15, (8, 7)) for i in range(4)]
    out = acceptance_intervals(rows, speculative=True)
    assert out["mean_acceptance_length_ci"] == pytest.approx([2.5, 2.5])
    assert out["acceptance_rate_ci"] == pytest.approx([0.75, 0.75])
    assert out["per_position_acceptance_ci"] == [pytest.approx([0.8, 0.8]), pytest.approx([0.7, 0.7])]
    assert out["acceptance_ci_requests"] == 4 and out["acceptance_ci_method"] == ACCEPTANCE_CI_METHOD
    assert out["per_request_totals"] == {"drafts": 40.0, "draft_tokens": 80.0, "accepted_tokens": 60.0,
                                         "accepted_per_pos": [32.0, 28.0]}


def test_a_shorter_per_position_list_counts_as_zero_acceptance_there():
    rows = [counted("q1", 10, 20, 8, (8,)), counted("q2", 10, 20, 15, (8, 7))]
    out = acceptance_intervals(rows, speculative=True)
    assert out["per_request_totals"]["accepted_per_pos"] == [16.0, 7.0]
    lo, hi = out["per_position_acceptance_ci"][1]
    assert 0.0 <= lo <= 7 / 20 <= hi <= 0.7  # the ratio of sums lies inside; resamples range 0/20 .. 14/20


def test_no_drafts_observed_gives_totals_but_no_intervals():
    out = acceptance_intervals([counted("q1", 0, 0, 0, ())], speculative=True)
    assert out["acceptance_ci_reason"] == "not available: no drafts observed"
    assert out["per_request_totals"] == {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0,
                                         "accepted_per_pos": []}
    assert out["mean_acceptance_length_ci"] is None
