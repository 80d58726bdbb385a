"""evalrun's vLLM plugin entry point: :func:`register`, which vLLM calls in every process.

``pyproject.toml`` declares ``[project.entry-points."vllm.general_plugins"]
evalrun_faults = "harness.faults.plugin:register"``. vLLM calls :func:`register` once per
process (API server, engine core, each worker) through
``vllm.plugins.load_general_plugins``; a worker started by ``fork`` inherits the patches
of its parent instead (vLLM then skips plugin loading because its ``plugins_loaded`` flag
is inherited too), which is why the patches are applied eagerly in every process rather
than only in the worker. The package's overview is :mod:`harness.faults`.

This module also names the plugin's public API for the rest of evalrun (the runner, the
record, the config's fault names), so callers import one module.
"""

from __future__ import annotations

import os

from harness.faults.cpu_async import install_cpu_async, restore_torch
from harness.faults.env import CPU_ASYNC_ENV, DEBUG_ENV, FAULT_ENV, REPORT_ENV, flag, text
from harness.faults.fault import Expectation, Fault, GateRef
from harness.faults.log import info
from harness.faults.noise import NOISE_ENV, NOISE_SEED_ENV, NoiseSetting, NoiseSettingError, level_from_env
from harness.faults.numerics import install_noise
from harness.faults.observers import WORKER_INIT, check_model_runner, install_observers, runner_check_installed
from harness.faults.patching import applied_patches, undo_patches
from harness.faults.registry import FAULTS, check_patch_targets, known_faults, requested_fault
from harness.faults.reports import FLUSH_INTERVAL_S, count, counts, exercised, flush_report, read_reports, start_flusher
from harness.faults.spec_metrics import install_spec_metrics
from harness.faults.state import STATE
from harness.faults.target import FaultConfigError, PatchTarget

__all__ = [
    "CPU_ASYNC_ENV", "DEBUG_ENV", "FAULTS", "FAULT_ENV", "FLUSH_INTERVAL_S", "NOISE_ENV", "NOISE_SEED_ENV",
    "REPORT_ENV", "STATE",
    "Expectation", "Fault", "FaultConfigError", "GateRef", "PatchTarget", "applied_patches",
    "check_model_runner", "check_patch_targets", "count", "counts", "exercised", "flush_report",
    "known_faults", "read_reports", "register", "requested_fault", "unpatch_all",
]


def register() -> None:
    """vLLM ``general_plugins`` entry point: apply the fault named by ``EVALRUN_FAULT``,
    keep async scheduling on the CPU (``EVALRUN_CPU_ASYNC_SCHEDULING=1``), perturb every
    forward's logits (``EVALRUN_NUMERICS_NOISE``, :mod:`harness.faults.numerics`), give
    requests ending on a stop string their per-request speculative metrics
    (:mod:`harness.faults.spec_metrics`, inert without ``--per-request-spec-decode-metrics``),
    and count and report (``EVALRUN_PLUGIN_REPORT_DIR``).

    Inert (patches and imports nothing beyond the standard library) when none of the
    four variables is set. Idempotent within a process.

    Raises:
        FaultConfigError: unknown fault name, or a patch target is missing in the
            installed vLLM. vLLM logs and swallows errors raised by ``plugin.load()``,
            but not those raised by the plugin function itself, so a misspelt fault
            stops the server at start-up instead of running an unfaulted engine.
    """
    fault = requested_fault()
    cpu_async = flag(CPU_ASYNC_ENV)
    noise = _noise_setting()
    if fault is None and not cpu_async and noise is None and not text(REPORT_ENV):
        return
    STATE.fault = fault
    STATE.cpu_async = cpu_async
    if cpu_async:
        install_cpu_async()
    install_observers()
    install_spec_metrics()  # evalrun's workaround of a vLLM 0.32 limit (harness.faults.spec_metrics)
    if fault is not None:
        if fault.runner is not None and not runner_check_installed():
            raise FaultConfigError(
                f"{FAULT_ENV}={fault.name}: cannot check which model runner runs "
                f"({WORKER_INIT.module}.{WORKER_INIT.qualname} could not be patched); refusing the fault")
        fault.install(fault)
        info("evalrun fault %s active in process %d", fault.name, os.getpid())
    if noise is not None:
        install_noise(noise)  # composes with a fault: each patches its own target
    start_flusher()


def _noise_setting() -> NoiseSetting | None:
    """The numerics noise of ``EVALRUN_NUMERICS_NOISE`` (None: off). Without
    ``EVALRUN_NUMERICS_NOISE_SEED`` the first process draws the seed and sets the variable,
    so the processes it starts use the same one.

    Raises:
        FaultConfigError: either variable is invalid (vLLM stops at start-up).
    """
    try:
        setting = level_from_env()
    except NoiseSettingError as e:
        raise FaultConfigError(str(e)) from None
    if setting is not None:
        os.environ[NOISE_SEED_ENV] = str(setting.seed)
    return setting


def unpatch_all() -> None:
    """Restore every patched attribute and forget the plugin's state (tests; a server
    never needs this)."""
    undo_patches()
    restore_torch()
    STATE.reset()
