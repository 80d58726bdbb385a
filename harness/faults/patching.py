"""Patching vLLM at run time: a wrapper applied once per process with a mark, the list of
what was applied, and undoing it (the targets: :mod:`harness.faults.target`)."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable

from harness.faults.env import FAULT_ENV
from harness.faults.state import STATE
from harness.faults.target import FaultConfigError, PatchTarget

#: Marker attribute set on every wrapper this package installs (its value: the label).
MARK = "__evalrun_fault__"

#: ``make(original) -> wrapper``: how a fault or an observer builds its replacement.
MakeWrapper = Callable[[Callable[..., object]], Callable[..., object]]


def patch_as(label: str, target: PatchTarget, make: MakeWrapper, what: str) -> None:
    """Replace ``target`` by ``make(original)``, marked ``label``; idempotent per process.

    Raises:
        FaultConfigError: the target is missing or its signature changed (``what``
            names the setting that asked for the patch).
    """
    problems = target.problems()
    if problems:
        raise FaultConfigError(f"{what}: cannot patch the installed vLLM: " + "; ".join(problems))
    owner, attr, original = target.resolve()
    if getattr(original, MARK, None) == label:
        return  # register() ran twice in this process (or the parent already patched)
    assert callable(original)  # resolve() returns callables only
    wrapper = functools.wraps(original)(make(original))
    setattr(wrapper, MARK, label)
    setattr(owner, attr, wrapper)
    STATE.applied.append((owner, attr, original))


def patch_fault(fault_name: str, target: PatchTarget, make: MakeWrapper) -> None:
    """Replace ``target`` by ``make(original)`` for the fault ``fault_name``; idempotent.

    Raises:
        FaultConfigError: the target is missing or its signature changed.
    """
    patch_as(fault_name, target, make, what=f"{FAULT_ENV}={fault_name}")


def _owner_name(owner: object) -> str:
    if isinstance(owner, types.ModuleType):
        return owner.__name__
    assert isinstance(owner, type)
    return f"{owner.__module__}.{owner.__qualname__}"


def applied_patches() -> list[str]:
    """``module.Class.attr`` (or ``module.function``) of every patch applied in this
    process (for tests, logs and the plugin report)."""
    return [f"{_owner_name(owner)}.{attr}" for owner, attr, _ in STATE.applied]


def undo_patches() -> None:
    """Restore every attribute patched through :func:`patch_as` (and recorded in
    ``STATE.applied``), latest first."""
    while STATE.applied:
        owner, attr, original = STATE.applied.pop()
        setattr(owner, attr, original)
