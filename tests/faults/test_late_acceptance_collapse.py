"""The ``late-acceptance-collapse`` fault's wrapper on a fake scheduler (no vLLM needed): drafts
of requests past the output position are spoiled after vLLM's own update stored them."""

from __future__ import annotations

import types

from harness.faults.catalog.late_acceptance_collapse import COLLAPSE_AT, past_position, spoil_wrapper, spoiled


def fake_update(self, draft_token_ids):
    # what vLLM's Scheduler.update_draft_token_ids does for running requests (no grammar)
    for req_id, ids in zip(draft_token_ids.req_ids, draft_token_ids.draft_token_ids):
        self.requests[req_id].spec_token_ids = list(ids)


def test_requests_past_the_position_get_spoiled_drafts_and_others_keep_theirs():
    early = types.SimpleNamespace(request_id="a", num_output_tokens=COLLAPSE_AT - 1, spec_token_ids=[])
    late = types.SimpleNamespace(request_id="b", num_output_tokens=COLLAPSE_AT, spec_token_ids=[])
    sched = types.SimpleNamespace(requests={"a": early, "b": late})
    drafts = types.SimpleNamespace(req_ids=["a", "b"], draft_token_ids=[[5, 9], [0, 7]])
    spoil_wrapper("late-acceptance-collapse", past_position)(fake_update)(sched, drafts)
    assert early.spec_token_ids == [5, 9]
    # each id moved by one inside the vocabulary: 0 -> 1, 7 -> 6
    assert late.spec_token_ids == [1, 6]
    assert spoiled([3, 0, 1]) == [2, 1, 0]
