"""The plugin's state in one process: one object, :data:`STATE`.

Everything the plugin remembers between vLLM's calls lives here (what was patched,
counters, the active fault, the model runner, the report flusher), so that
:func:`harness.faults.plugin.unpatch_all` resets it in one step and nothing else of the
package holds module state.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.faults.fault import Fault
    from harness.faults.noise import NoiseSetting


@dataclass
class PluginState:
    """What the plugin knows in this process.

    Attributes:
        fault: the active fault (None: observers or CPU async scheduling only).
        cpu_async: whether ``EVALRUN_CPU_ASYNC_SCHEDULING`` asked to keep async scheduling.
        model_runner: ``module.Class`` of the worker's model runner, once built.
        counts: counters of this process (``<fault>.executions``, ``<fault>.changed``,
            ``batch.*``, ``cpu_async.kept``, ``observer_missing``).
        applied: ``(owner, attribute, original)`` of every patch applied, in order.
        fired: faults that already logged their first firing.
        runner: a weak reference to the worker's model runner (call it: the runner or None).
        flusher: the pid whose report flusher thread runs (None: none started).
        dirty: counters changed since the last report was written.
        torch_saved: torch's own classes while the CPU stand-ins replace them.
        noise: the numerics noise of this process (None: off; :mod:`harness.faults.numerics`).
    """

    fault: Fault | None = None
    cpu_async: bool = False
    model_runner: str | None = None
    counts: Counter[str] = field(default_factory=Counter)
    applied: list[tuple[object, str, object]] = field(default_factory=list)
    fired: set[str] = field(default_factory=set)
    runner: Callable[[], object] | None = None
    flusher: int | None = None
    dirty: bool = False
    torch_saved: dict[str, object] = field(default_factory=dict)
    noise: NoiseSetting | None = None

    def current_runner(self) -> object:
        """The model runner of this worker process (None before it exists or elsewhere)."""
        return self.runner() if self.runner is not None else None

    def keep_runner(self, runner: object) -> None:
        """Remember the worker's model runner without keeping it alive."""
        self.runner = weakref.ref(runner)

    def reset(self) -> None:
        """Forget the fault, counters, firings and the runner (the patches are undone by
        :func:`harness.faults.plugin.unpatch_all`, which calls this)."""
        self.fault = None
        self.cpu_async = False
        self.model_runner = None
        self.counts.clear()
        self.fired.clear()
        self.runner = None
        self.flusher = None
        self.dirty = False
        self.noise = None


#: The plugin's state in this process.
STATE = PluginState()
