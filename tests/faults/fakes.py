"""Shared pieces of the fault tests: skip marks, the observers' patch list, a fake model
runner and vLLM's non-align accepted-count update."""

from __future__ import annotations

import importlib.util
import types

import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="vllm not installed")

OBSERVERS = [
    "vllm.v1.worker.worker_base.WorkerWrapperBase.init_device",
    "vllm.v1.worker.gpu_input_batch.InputBatch.condense",
    "vllm.v1.worker.gpu_input_batch.InputBatch.swap_states",
    # not an observer but applied whenever the plugin is: harness.faults.spec_metrics
    "vllm.v1.core.sched.scheduler.Scheduler.update_from_output",
]



def fake_update(self, output_token_ids, _scheduler_output):
    # What vLLM's original does on the non-align path.
    n = output_token_ids.size(0)
    self.num_accepted_tokens.gpu[:n] = (output_token_ids != -1).sum(dim=1)
    self.input_batch.num_accepted_tokens_cpu_tensor[:n].copy_(self.num_accepted_tokens.gpu[:n])


def fake_runner(_num_reqs: int, req_ids: list[str]):
    import torch

    class _Event:
        def synchronize(self):
            pass

        def record(self):
            pass

    return types.SimpleNamespace(
        speculative_config=object(),
        model_config=types.SimpleNamespace(is_hybrid=True),
        cache_config=types.SimpleNamespace(mamba_cache_mode="none"),
        use_async_scheduling=False,
        num_accepted_tokens=types.SimpleNamespace(gpu=torch.ones(8, dtype=torch.int32)),
        num_accepted_tokens_event=_Event(),
        input_batch=types.SimpleNamespace(
            req_ids=req_ids, num_accepted_tokens_cpu_tensor=torch.ones(8, dtype=torch.int32)
        ),
    )
