"""The ``async-placeholder-token`` fault: its wrapper on vLLM's own function."""

from __future__ import annotations

import inspect
import types

import harness.faults.plugin as faults
from harness.faults.catalog.async_placeholder_token import placeholder_token_wrapper
from tests.faults.fakes import needs_vllm


@needs_vllm
def test_placeholder_token_wrapper_on_vllms_own_function():
    # vLLM's own prepare_next_token_ids_padded on a fake proposer and batch: the fixed
    # backup is the last committed token (num_tokens_no_spec - 1); with the fault it is
    # looked up at the optimistic sequence length, i.e. a placeholder slot (-1 -> 0).
    import numpy as np
    import torch
    from vllm.platforms.cpu import CpuPlatform
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
    from vllm.v1.utils import CpuGpuBuffer

    CpuPlatform.register_triton_kernel_overrides()  # the CPU engine's kernels, as in a server
    original = inspect.unwrap(SpecDecodeBaseProposer.__dict__["prepare_next_token_ids_padded"])
    wrapped = placeholder_token_wrapper("async-placeholder-token")(original)
    me = types.SimpleNamespace(backup_next_token_ids=CpuGpuBuffer(4, dtype=torch.int32, device="cpu", with_numpy=True))
    prompt = [5, 6, 7, 8]
    reqs = {"a": types.SimpleNamespace(get_token_id=lambda i: (prompt + [9])[i] if i < 5 else -1),
            "b": types.SimpleNamespace(get_token_id=lambda i: (prompt + [9, 10])[i] if i < 6 else -1)}
    batch = types.SimpleNamespace(num_reqs=2, req_ids=["a", "b"], vocab_size=100,
                                  num_tokens_no_spec=np.array([5, 6]))
    # row a: a discarded row (uses the backup); row b: sampled 11 then a rejected draft
    sampled = torch.tensor([[-1, -1, -1], [11, -1, -1]], dtype=torch.int32)
    discard = torch.tensor([True, False])
    fixed_next, fixed_valid = original(me, sampled, reqs, batch, discard)
    assert fixed_next.tolist() == [9, 11] and fixed_valid.tolist() == [0, 1]
    faults.STATE.runner = lambda: types.SimpleNamespace(optimistic_seq_lens_cpu=torch.tensor([7, 8], dtype=torch.int32))
    next_ids, valid = wrapped(me, sampled, reqs, batch, discard)
    # row a's backup looked up at index 7 (beyond its 5 tokens): placeholder -1, clamped to 0
    assert next_ids.tolist() == [0, 11] and valid.tolist() == [0, 1]
    c = faults.counts()
    assert c["async-placeholder-token.executions"] == 1
    assert c["async-placeholder-token.changed"] == 1
    assert c["async-placeholder-token.backup_placeholder"] == 2  # both rows' backups became -1
    # under async scheduling row b was in the previous step's batch (its last token lives
    # on the device): the placeholder the host-side lookup returns is fed to the drafter
    batch.prev_req_id_to_index = {"b": 0}
    next_ids, _ = wrapped(me, sampled, reqs, batch, discard)
    assert next_ids.tolist() == [0, 0]
    assert faults.counts()["async-placeholder-token.changed"] == 1 + 2
