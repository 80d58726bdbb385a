"""The environment switches of evalrun's vLLM plugin: which variable asks for what.

The runner sets them on a variant's server (``harness.config.plan`` spells the same
values; they are not imported from there so that vLLM's processes load only
``harness.faults``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: Environment variable naming the fault (same value as ``harness.config.plan.FAULT_ENV``).
FAULT_ENV = "EVALRUN_FAULT"
#: Set to ``1`` to log every application of the fault with before/after values.
DEBUG_ENV = "EVALRUN_FAULT_DEBUG"
#: Set to ``1`` by evalrun for a variant that asks for async scheduling: on the CPU
#: platform the plugin then keeps ``scheduler_config.async_scheduling = True`` (which
#: ``CpuPlatform.check_and_update_config`` would reset to False) and installs no-op
#: stand-ins for CUDA events and streams (:mod:`harness.faults.cpu_async`).
CPU_ASYNC_ENV = "EVALRUN_CPU_ASYNC_SCHEDULING"
#: A folder: every process the plugin is active in writes ``plugin-<pid>.json`` there
#: with its counters (:func:`harness.faults.reports.read_reports`). Setting it alone
#: activates the observers (which model runner runs, batch condense / reorder events).
REPORT_ENV = "EVALRUN_PLUGIN_REPORT_DIR"


def flag(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the variable ``name`` is set to anything but empty, ``0``, ``false`` or ``no``."""
    env = os.environ if environ is None else environ
    return env.get(name, "").strip() not in ("", "0", "false", "no")


def text(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The variable's value without surrounding blanks ("" when unset)."""
    env = os.environ if environ is None else environ
    return env.get(name, "").strip()
