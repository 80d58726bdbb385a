"""Async scheduling on the CPU platform: keep a requested ``--async-scheduling`` that
``CpuPlatform.check_and_update_config`` would reset, and stand in for CUDA events and
streams on a host without CUDA (``EVALRUN_CPU_ASYNC_SCHEDULING=1``)."""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
from typing import Protocol

from harness.faults.env import CPU_ASYNC_ENV
from harness.faults.log import info
from harness.faults.patching import MARK
from harness.faults.reports import count
from harness.faults.state import STATE
from harness.faults.target import FaultConfigError, PatchTarget

CPU_CHECK = PatchTarget(
    module="vllm.platforms.cpu",
    qualname="CpuPlatform.check_and_update_config",
    params=("vllm_config",),
    reads=(),
)


class _SchedulerConfig(Protocol):
    async_scheduling: bool | None


class _VllmConfig(Protocol):
    """What the plugin reads of vLLM's ``VllmConfig``."""

    @property
    def scheduler_config(self) -> _SchedulerConfig: ...


class NoOpEvent:
    """Stand-in for ``torch.cuda.Event`` / ``torch.Event`` on a CPU-only host: CPU
    work is synchronous, so recording and waiting have nothing to do."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def record(self, *args: object, **kwargs: object) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def wait(self, *args: object, **kwargs: object) -> None:
        pass

    def query(self) -> bool:
        return True


class NoOpStream:
    """Stand-in for ``torch.cuda.Stream`` (and what ``torch.cuda.current_stream``
    returns) on a CPU-only host."""

    def __init__(self, *_args: object, **_kwargs: object) -> None:
        import torch

        self.device = torch.device("cpu")

    def wait_stream(self, *args: object, **kwargs: object) -> None:
        pass

    def wait_event(self, *args: object, **kwargs: object) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def record_event(self, event: object = None) -> object:
        return event if event is not None else NoOpEvent()

    def query(self) -> bool:
        return True


def install_torch_standins() -> None:
    """Replace ``torch.cuda.Event``, ``torch.Event``, ``torch.cuda.Stream``,
    ``torch.cuda.current_stream`` and ``torch.cuda.stream`` by no-op stand-ins, on a
    host without CUDA only (``torch.cuda.is_available()`` False). vLLM's
    ``GPUModelRunner`` creates events and side streams for its non-blocking
    device-to-host copies when ``use_async_scheduling`` is True
    (``__init__``: ``async_output_copy_stream``, ``prepare_inputs_event``,
    ``valid_sampled_token_count_event``; ``AsyncGPUModelRunnerOutput``;
    ``_copy_valid_sampled_token_count``); on the CPU those copies are synchronous.
    ``cpu_model_runner._torch_cuda_wrapper`` does the same for ``torch.Event`` and
    ``torch.cuda.Stream`` but only while the runner is constructed."""
    import torch

    saved = STATE.torch_saved
    if torch.cuda.is_available() or saved:
        return
    saved.update(
        event=torch.Event, cuda_event=torch.cuda.Event, stream=torch.cuda.Stream,
        current_stream=torch.cuda.current_stream, stream_ctx=torch.cuda.stream,
    )
    # replacing torch's classes and functions on a CPU-only host is the point (type: ignore)
    torch.Event = NoOpEvent  # type: ignore[misc,assignment]
    torch.cuda.Event = NoOpEvent  # type: ignore[misc,assignment]
    torch.cuda.Stream = NoOpStream  # type: ignore[misc,assignment]
    torch.cuda.current_stream = lambda *_a, **_k: NoOpStream()  # type: ignore[assignment]
    torch.cuda.stream = lambda *_a, **_k: contextlib.nullcontext()  # type: ignore[assignment]


def restore_torch() -> None:
    """Put torch's own classes back (after :func:`install_torch_standins`)."""
    saved = STATE.torch_saved
    if not saved:
        return
    import torch

    # putting torch's own classes back (type: ignore: assigning to a class name or from object)
    torch.Event = saved["event"]  # type: ignore[misc,assignment]
    torch.cuda.Event = saved["cuda_event"]  # type: ignore[misc,assignment]
    torch.cuda.Stream = saved["stream"]  # type: ignore[misc,assignment]
    torch.cuda.current_stream = saved["current_stream"]  # type: ignore[assignment]
    torch.cuda.stream = saved["stream_ctx"]  # type: ignore[assignment]
    saved.clear()


def keep_requested_async(asked: bool | None, vllm_config: _VllmConfig) -> bool:
    """After ``CpuPlatform.check_and_update_config``: restore ``async_scheduling = True``
    when it was requested (``asked is True``) and the platform reset it.

    Returns:
        True when the value was restored (counted as ``cpu_async.kept``).
    """
    sched = vllm_config.scheduler_config
    if asked is True and sched.async_scheduling is not True:
        sched.async_scheduling = True
        count("cpu_async.kept")
        info(
            "evalrun plugin: kept the requested async scheduling on the CPU platform "
            "(CpuPlatform.check_and_update_config had set scheduler_config.async_scheduling "
            "= False) in process %d", os.getpid(),
        )
        return True
    return False


def install_cpu_async() -> None:
    """Let a variant that asks for ``--async-scheduling`` run with it on the CPU platform.

    ``vllm/platforms/cpu.py``, ``CpuPlatform.check_and_update_config``, ends its
    scheduler settings with ``scheduler_config.async_scheduling = False`` ("async
    scheduling is not required on CPU"), which ``VllmConfig.__post_init__`` calls
    after resolving the requested value. The wrapper remembers the requested value,
    runs the original and restores it (:func:`keep_requested_async`); only a request
    of exactly True is kept, so the engine default and ``--no-async-scheduling``
    are unchanged. Then :func:`install_torch_standins`. The engine reports the
    effective value in ``/server_info`` as usual.

    Raises:
        FaultConfigError: the platform hook is missing or its signature changed.
    """
    import torch

    if torch.cuda.is_available():
        return  # a CUDA host: vLLM honours --async-scheduling itself; nothing to keep
    problems = CPU_CHECK.problems()
    if problems:
        raise FaultConfigError(f"{CPU_ASYNC_ENV}=1: cannot patch the installed vLLM: " + "; ".join(problems))
    cls = importlib.import_module(CPU_CHECK.module).CpuPlatform
    original = cls.__dict__["check_and_update_config"]
    if getattr(original.__func__, MARK, None) == "cpu-async":
        return
    func = original.__func__

    @functools.wraps(func)
    def check_and_update_config(klass: type, vllm_config: _VllmConfig) -> object:
        asked = vllm_config.scheduler_config.async_scheduling
        result = func(klass, vllm_config)
        keep_requested_async(asked, vllm_config)
        return result

    setattr(check_and_update_config, MARK, "cpu-async")
    cls.check_and_update_config = classmethod(check_and_update_config)
    STATE.applied.append((cls, "check_and_update_config", original))
    install_torch_standins()
