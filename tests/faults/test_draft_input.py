"""The ``draft-input`` and ``draft-input-placeholder`` faults' wrapper on fakes (torch only)."""

from __future__ import annotations

import types

import pytest

from harness.faults.catalog.draft_input import draft_input_wrapper
from tests.faults.fakes import needs_torch


def _fake_propose(self, num_speculative_tokens, target_token_ids, target_positions,
                  target_hidden_states, next_token_ids, token_indices_to_sample,
                  common_attn_metadata, sampling_metadata, mm_embed_inputs=None,
                  num_rejected_tokens_gpu=None, slot_mappings=None):
    self.seen = next_token_ids.tolist()
    return "drafts"


@needs_torch
@pytest.mark.parametrize("name", ["draft-input", "draft-input-placeholder"])
def test_draft_input_wrapper_replaces_next_token_ids(name):
    import torch

    wrapped = draft_input_wrapper(name)(_fake_propose)
    me = types.SimpleNamespace()
    # Padded layout: 2 requests x (1 + 2 drafts); request 0 accepted nothing (last
    # valid index 0), request 1 accepted one draft (last valid index 4).
    target = torch.tensor([10, 11, 12, 20, 21, 22], dtype=torch.int32)
    nxt = torch.tensor([99, 98], dtype=torch.int32)
    out = wrapped(me, 2, target_token_ids=target, target_positions=None,
                  target_hidden_states=None, next_token_ids=nxt,
                  token_indices_to_sample=torch.tensor([0, 4], dtype=torch.int32),
                  common_attn_metadata=None, sampling_metadata=None)
    assert out == "drafts"
    assert me.seen == ([10, 21] if name == "draft-input" else [0, 0])
    assert nxt.tolist() == [99, 98]  # the caller's tensor is not modified


@needs_torch
def test_draft_input_wrapper_unpadded_path_uses_query_ends():
    import torch

    wrapped = draft_input_wrapper("draft-input")(_fake_propose)
    me = types.SimpleNamespace()
    cad = types.SimpleNamespace(query_start_loc=torch.tensor([0, 3, 5], dtype=torch.int32))
    target = torch.tensor([1, 2, 3, 4, 5], dtype=torch.int32)
    wrapped(me, 2, target, None, None, torch.tensor([7, 8], dtype=torch.int32), None, cad, None)
    assert me.seen == [3, 5]
