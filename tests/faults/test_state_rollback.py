"""The ``state-rollback`` fault: its count rule, its wrapper on fakes and on vLLM's own function."""

from __future__ import annotations

import inspect
import types

from harness.faults.catalog.state_rollback import off_by_one_counts, state_rollback_wrapper
from tests.faults.fakes import fake_runner, fake_update, needs_torch, needs_vllm


def test_off_by_one_counts():
    # k accepted+bonus of d drafts: k <= d -> k+1, k == d+1 -> k-1, d == 0 unchanged
    assert off_by_one_counts([1, 2, 3], [2, 2, 2]) == [2, 3, 2]
    assert off_by_one_counts([1, 1], [0, 1]) == [1, 2]
    assert off_by_one_counts([2], [1]) == [1]
    for d in range(1, 5):
        for k in range(1, d + 2):
            (w,) = off_by_one_counts([k], [d])
            assert w != k and 1 <= w <= d + 1 and abs(w - k) == 1



@needs_torch
def test_state_rollback_wrapper_perturbs_counts_of_spec_rows_only():
    import torch

    wrapped = state_rollback_wrapper("state-rollback")(fake_update)
    runner = fake_runner(3, ["a", "b", "c"])
    # a: 0 of 2 drafts accepted (k=1); b: all 2 accepted (k=3); c: prefill, no drafts.
    out_ids = torch.tensor([[5, -1, -1], [6, 7, 8], [9, -1, -1]], dtype=torch.int32)
    sched = types.SimpleNamespace(scheduled_spec_decode_tokens={"a": [1, 2], "b": [3, 4]})
    wrapped(runner, out_ids, sched)
    assert runner.input_batch.num_accepted_tokens_cpu_tensor[:3].tolist() == [2, 2, 1]
    assert runner.num_accepted_tokens.gpu[:3].tolist() == [2, 2, 1]


@needs_torch
def test_state_rollback_wrapper_ignores_non_hybrid_models():
    import torch

    wrapped = state_rollback_wrapper("state-rollback")(lambda self, o, s: None)
    runner = fake_runner(1, ["a"])
    runner.model_config.is_hybrid = False
    sched = types.SimpleNamespace(scheduled_spec_decode_tokens={"a": [1, 2]})
    wrapped(runner, torch.tensor([[5, -1, -1]]), sched)
    assert runner.input_batch.num_accepted_tokens_cpu_tensor[:1].tolist() == [1]



@needs_vllm
def test_state_rollback_wrapper_on_vllms_own_function():
    # The real _update_states_after_model_execute (non-align path) on a fake runner:
    # the wrapper's overwrite must survive the original's copy.
    import torch
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    original = inspect.unwrap(GPUModelRunner.__dict__["_update_states_after_model_execute"])
    wrapped = state_rollback_wrapper("state-rollback")(original)
    runner = fake_runner(3, ["a", "b", "c"])
    out_ids = torch.tensor([[5, -1, -1], [6, 7, 8], [9, -1, -1]], dtype=torch.int32)
    sched = types.SimpleNamespace(scheduled_spec_decode_tokens={"a": [1, 2], "b": [3, 4]})
    original(runner, out_ids, sched)
    assert runner.input_batch.num_accepted_tokens_cpu_tensor[:3].tolist() == [1, 3, 1]
    wrapped(runner, out_ids, sched)
    assert runner.input_batch.num_accepted_tokens_cpu_tensor[:3].tolist() == [2, 2, 1]
    assert runner.num_accepted_tokens.gpu[:3].tolist() == [2, 2, 1]
