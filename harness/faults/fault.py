"""One injectable fault (:class:`Fault`) and what the self-check expects of it
(:class:`Expectation`), as plain data: the plugin imports nothing else of evalrun, so
gate kinds are their names here (``harness.cli.selfcheck`` looks each up among the declared
gate kinds, failing on an unknown one, and ``tests/faults/test_expectations.py`` checks every one)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from harness.faults.target import PatchTarget

#: every gate of the tasks named (in :class:`GateRef`), whatever its kind
EVERY_KIND = "*"


@dataclass(frozen=True)
class GateRef:
    """The gates of one kind on one family of a config's tasks.

    Attributes:
        kind: a declared gate kind (``"min_output_match"``, :func:`harness.config.gates.declaration`), or
            :data:`EVERY_KIND`.
        tasks: ``"plain"`` every task but the traffic shapes, ``"shape"`` the
            ``kind: shape`` tasks. Comparison gates count for their candidate variant.
    """

    kind: str
    tasks: Literal["plain", "shape"] = "plain"

    def label(self) -> str:
        """``kind`` on plain tasks, ``shape:kind`` on the shapes (docs and messages)."""
        return self.kind if self.tasks == "plain" else f"shape:{self.kind}"


def plain(*kinds: str) -> tuple[GateRef, ...]:
    """The gates of these kinds on the plain tasks."""
    return tuple(GateRef(k) for k in kinds)


def shape(*kinds: str) -> tuple[GateRef, ...]:
    """The gates of these kinds on the traffic-shape tasks."""
    return tuple(GateRef(k, "shape") for k in kinds)


@dataclass(frozen=True)
class Expectation:
    """What ``evalrun selfcheck`` requires of a fault's variant, machine-checked.

    Attributes:
        must_fail: gates that must FAIL with the fault on (in its own scheduling mode).
        must_pass: gates that must PASS all the same.
        sync_executes: for a fault of the async path (``Fault.scheduling == "async"``)
            run with synchronous scheduling: whether its patched code runs there
            (every gate must pass either way). None for the other faults.
    """

    must_fail: tuple[GateRef, ...] = ()
    must_pass: tuple[GateRef, ...] = ()
    sync_executes: bool | None = None


@dataclass(frozen=True)
class Fault:
    """One injectable fault, declared by one module of :mod:`harness.faults.catalog`.

    Attributes:
        name: the value of ``EVALRUN_FAULT``.
        summary: one line for humans (``evalrun --dry-run``, error messages).
        mirrors: which real bug of docs/FAULTS.md ("The two bugs") it reproduces.
        expected: the effect the gates should see, in words (the machine-checked form is
            ``expectation``).
        targets: what it patches (and, ``patched=False``, what it relies on).
        install: ``install(fault)`` applies the patches in this process.
        expectation: the gates the self-check requires to fail / pass.
        runner: the model runner class whose code path the patches sit on
            (``module.Class``); the worker refuses to start when another runner
            is in use (``harness.faults.observers.check_model_runner``). None: no
            runner needed (``noop``).
        scheduling: ``"async"`` when the patched code belongs to vLLM's async
            scheduling path (the self-check runs it with async scheduling and
            contrasts it with synchronous scheduling), else ``"any"``.
    """

    name: str
    summary: str
    mirrors: str
    expected: str
    targets: tuple[PatchTarget, ...]
    install: Callable[[Fault], None]
    expectation: Expectation = field(default_factory=Expectation)
    runner: str | None = "vllm.v1.worker.gpu_model_runner.GPUModelRunner"
    scheduling: Literal["async", "any"] = "any"
