"""Observers: which model runner a worker uses (and refusing a fault that would not reach
it), batch condense / reorder events. Active whenever the plugin is; they call vLLM's
original unchanged and count."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Protocol

from harness.faults.env import FAULT_ENV, REPORT_ENV
from harness.faults.fault import Fault
from harness.faults.log import info, logger
from harness.faults.patching import MARK, applied_patches, patch_as
from harness.faults.reports import count, flush_report
from harness.faults.state import STATE
from harness.faults.target import FaultConfigError, PatchTarget

WORKER_INIT = PatchTarget(
    module="vllm.v1.worker.worker_base",
    qualname="WorkerWrapperBase.init_device",
    params=(),
    reads=("worker",),
)
CONDENSE = PatchTarget(
    module="vllm.v1.worker.gpu_input_batch",
    qualname="InputBatch.condense",
    params=(),
    reads=("_req_ids", "spec_token_ids", "num_reqs"),
)
SWAP = PatchTarget(
    module="vllm.v1.worker.gpu_input_batch",
    qualname="InputBatch.swap_states",
    params=("i1", "i2"),
    reads=("spec_token_ids",),
)


class _InputBatch(Protocol):
    """What the observers read of vLLM's ``InputBatch``."""

    _req_ids: list[str | None]
    spec_token_ids: list[list[int]]
    num_reqs: int


def _class_path(obj: object) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def check_model_runner(runner: object, fault: Fault | None) -> str:
    """Record which model runner this worker uses; refuse a fault whose target is not it.

    Args:
        runner: the worker's ``model_runner`` (any object).
        fault: the active fault, or None.

    Returns:
        ``module.Class`` of the runner, plus the V1 class it derives from when it is
        a subclass (e.g. ``vllm.v1.worker.cpu_model_runner.CPUModelRunner (a
        vllm.v1.worker.gpu_model_runner.GPUModelRunner)``).

    Raises:
        FaultConfigError: ``fault.runner`` names a class ``runner`` is not an
            instance of (for example vLLM's V2 runner, ``vllm.v1.worker.gpu.model_runner``,
            which CUDA builds use by default from vLLM 0.33 on): the patches would
            never run. The message names both and how to select the V1 runner.
    """
    name = _class_path(runner)
    if fault is None or fault.runner is None:
        return name
    mod, _, cls_name = fault.runner.rpartition(".")
    target = getattr(importlib.import_module(mod), cls_name)
    if not isinstance(runner, target):
        raise FaultConfigError(
            f"{FAULT_ENV}={fault.name}: the fault patches the code path of {fault.runner} "
            f"(vLLM's V1 model runner), but this worker runs {name}, which does not use it; "
            f"the fault would never execute. Run the server with VLLM_USE_V2_MODEL_RUNNER=0 "
            f"to select the V1 runner, or run without the fault."
        )
    return name if type(runner) is target else f"{name} (a {fault.runner})"


def _worker_init_wrapper(original: Callable[..., object]) -> Callable[..., object]:
    def init_device(self: object, *a: object, **kw: object) -> object:
        result = original(self, *a, **kw)
        runner = getattr(getattr(self, "worker", None), "model_runner", None)
        if runner is not None:
            fault = STATE.fault
            STATE.model_runner = check_model_runner(runner, fault)
            STATE.keep_runner(runner)
            info("evalrun plugin: model runner in process %d is %s%s", os.getpid(), STATE.model_runner,
                 f"; fault {fault.name} patches {', '.join(applied_patches())}" if fault else "")
            flush_report()
        return result

    return init_device


def _condense_wrapper(original: Callable[..., object]) -> Callable[..., object]:
    def condense(self: _InputBatch, *a: object, **kw: object) -> object:
        before = {r: i for i, r in enumerate(self._req_ids) if r is not None}
        result = original(self, *a, **kw)
        count("batch.condense_calls")
        moved = with_drafts = 0
        for i, r in enumerate(self._req_ids[: self.num_reqs]):
            if r is not None and before.get(r, i) != i:
                moved += 1
                with_drafts += bool(self.spec_token_ids[i])
        count("batch.rows_moved_by_condense", moved)
        count("batch.rows_moved_with_drafts_in_flight", with_drafts)
        return result

    return condense


def _swap_wrapper(original: Callable[..., object]) -> Callable[..., object]:
    def swap_states(self: _InputBatch, i1: int, i2: int, *a: object, **kw: object) -> object:
        drafts = bool(self.spec_token_ids[i1]) or bool(self.spec_token_ids[i2])
        result = original(self, i1, i2, *a, **kw)
        count("batch.reorder_swaps")
        count("batch.reorder_swaps_with_drafts_in_flight", drafts)
        return result

    return swap_states


def install_observers() -> None:
    """Count batch condense / reorder events and record the model runner (every process).

    Patches (wrappers that call the original unchanged and count):

    * ``vllm.v1.worker.worker_base.WorkerWrapperBase.init_device``: after the worker
      built its model runner, :func:`check_model_runner` records its class and
      refuses an active fault whose target runner is not in use.
    * ``vllm.v1.worker.gpu_input_batch.InputBatch.condense`` (called by
      ``GPUModelRunner._update_states`` after finished requests leave the batch):
      rows that moved to another index, and how many of them had draft tokens
      scheduled (``spec_token_ids`` non-empty: drafts in flight).
    * ``InputBatch.swap_states`` (called by
      ``vllm.v1.attention.backends.utils.reorder_batch_to_split_decodes_and_prefills``
      from ``GPUModelRunner._may_reorder_batch``, which puts decodes before prefills
      for the GDN / Mamba backends): swaps, and those involving a row with drafts.

    The targets are this module's globals when called (a test may replace one).
    """
    for target, make in ((WORKER_INIT, _worker_init_wrapper), (CONDENSE, _condense_wrapper),
                         (SWAP, _swap_wrapper)):
        try:
            patch_as("observe", target, make, what=REPORT_ENV)
        except FaultConfigError as e:
            # observers only count: a vLLM that renamed their target still runs, unobserved
            # (a fault needs the runner check: register() refuses it without one)
            count("observer_missing")
            logger.warning("evalrun plugin: observer not installed: %s", e)


def runner_check_installed() -> bool:
    """Whether the worker-init observer (the runner check) is in place in this process."""
    fn = WORKER_INIT.resolve()[2]
    return bool(getattr(fn, MARK, None))
