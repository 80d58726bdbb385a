"""The ``spec-prompt-edge`` fault: the state-rollback off-by-one on prompts of k + 1 tokens only."""

from __future__ import annotations

import types

import harness.faults.plugin as faults
from harness.faults.catalog.spec_prompt_edge import prompt_edge_rows
from harness.faults.catalog.state_rollback import state_rollback_wrapper
from tests.faults.fakes import fake_runner, fake_update, needs_torch


@needs_torch
def test_spec_prompt_edge_perturbs_only_prompts_of_k_plus_one_tokens():
    # k = 2: only a request whose prompt has 3 tokens gets the off-by-one; b (4 tokens)
    # keeps its true count though it verified drafts too.
    import torch

    wrapped = state_rollback_wrapper("spec-prompt-edge", prompt_edge_rows)(fake_update)
    runner = fake_runner(3, ["a", "b", "c"])
    runner.speculative_config = types.SimpleNamespace(num_speculative_tokens=2)
    runner.requests = {r: types.SimpleNamespace(num_prompt_tokens=n) for r, n in (("a", 3), ("b", 4), ("c", 3))}
    out_ids = torch.tensor([[5, -1, -1], [6, 7, 8], [9, -1, -1]], dtype=torch.int32)
    sched = types.SimpleNamespace(scheduled_spec_decode_tokens={"a": [1, 2], "b": [3, 4]})
    before = faults.counts().get("spec-prompt-edge.changed", 0)
    wrapped(runner, out_ids, sched)
    # a: 0 of 2 accepted -> 1 + 1 = 2; b: untouched 3; c: no drafts (prefill) -> 1
    assert runner.input_batch.num_accepted_tokens_cpu_tensor[:3].tolist() == [2, 3, 1]
    assert faults.counts().get("spec-prompt-edge.changed", 0) - before == 1


@needs_torch
def test_spec_prompt_edge_changes_nothing_for_long_prompts():
    import torch

    wrapped = state_rollback_wrapper("spec-prompt-edge", prompt_edge_rows)(fake_update)
    runner = fake_runner(2, ["a", "b"])
    runner.speculative_config = types.SimpleNamespace(num_speculative_tokens=2)
    runner.requests = {"a": types.SimpleNamespace(num_prompt_tokens=245),
                       "b": types.SimpleNamespace(num_prompt_tokens=2)}
    out_ids = torch.tensor([[5, -1, -1], [6, 7, -1]], dtype=torch.int32)
    sched = types.SimpleNamespace(scheduled_spec_decode_tokens={"a": [1, 2], "b": [3, 4]})
    wrapped(runner, out_ids, sched)
    assert runner.input_batch.num_accepted_tokens_cpu_tensor[:2].tolist() == [1, 2]
