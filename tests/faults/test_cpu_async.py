"""harness.faults.cpu_async: async scheduling kept on the CPU platform."""

from __future__ import annotations

import inspect
import os
import types

import harness.faults.cpu_async as cpu_async
import harness.faults.plugin as faults
from harness.config.loader import load_config
from harness.config.plan import CPU_ASYNC_ENV, build_plan
from tests.faults.fakes import needs_vllm


def test_plan_sets_cpu_async_env_only_for_async_variants():
    assert CPU_ASYNC_ENV == faults.CPU_ASYNC_ENV
    repo = os.path.join(os.path.dirname(__file__), "..", "..")
    plan = build_plan([load_config(os.path.join(repo, "configs", "tiny-qwen3next-mtp-cpu.yaml"))])
    env = {v.name: v.env for v in plan.configs[0].variants}
    assert set(env) == {"reference", "spec_sync", "spec_async"}
    assert env["spec_async"][CPU_ASYNC_ENV] == "1"
    assert CPU_ASYNC_ENV not in env["spec_sync"] and CPU_ASYNC_ENV not in env["reference"]


def test_keep_requested_async_only_restores_an_explicit_true():
    def cfg(v):
        return types.SimpleNamespace(scheduler_config=types.SimpleNamespace(async_scheduling=v))

    c = cfg(False)  # what CpuPlatform.check_and_update_config leaves
    assert cpu_async.keep_requested_async(True, c) and c.scheduler_config.async_scheduling is True
    for asked in (None, False):
        c = cfg(False)
        assert not cpu_async.keep_requested_async(asked, c) and c.scheduler_config.async_scheduling is False
    assert faults.counts()["cpu_async.kept"] == 1


@needs_vllm
def test_cpu_async_patch_keeps_async_through_vllms_own_platform_hook(monkeypatch):
    # vLLM's own CpuPlatform.check_and_update_config resets async_scheduling; with the
    # plugin's variable set the requested True survives it, and CUDA events/streams are
    # no-op stand-ins (this host has no CUDA); unpatching restores both.
    import torch
    from vllm.platforms.cpu import CpuPlatform

    src = inspect.getsource(inspect.unwrap(CpuPlatform.check_and_update_config.__func__))
    assert "scheduler_config.async_scheduling = False" in src
    event, stream = torch.cuda.Event, torch.cuda.Stream
    monkeypatch.setenv(faults.CPU_ASYNC_ENV, "1")
    faults.register()
    assert "vllm.platforms.cpu.CpuPlatform.check_and_update_config" in faults.applied_patches()
    if not torch.cuda.is_available():
        assert torch.cuda.Event is cpu_async.NoOpEvent and torch.Event is cpu_async.NoOpEvent
        s = torch.cuda.current_stream()
        s.wait_stream(torch.cuda.Stream())
        with torch.cuda.stream(s):
            torch.cuda.Event(blocking=True).record()
    faults.unpatch_all()
    assert torch.cuda.Event is event and torch.cuda.Stream is stream
    assert "evalrun" not in repr(CpuPlatform.check_and_update_config)
