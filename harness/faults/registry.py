"""Every fault of :mod:`harness.faults.catalog`, found by module: the name a config or
``EVALRUN_FAULT`` gives, the patch targets checked against the installed vLLM, and the
table of the self-check's expectations that docs/FAULTS.md carries."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping

from harness.faults import catalog
from harness.faults.env import FAULT_ENV, text
from harness.faults.fault import Fault
from harness.faults.target import FaultConfigError


def _discover() -> dict[str, Fault]:
    """``FAULT`` of every module of :mod:`harness.faults.catalog`, by fault name.

    Raises:
        TypeError: a module declares no ``FAULT``; ValueError: two modules declare one name.
    """
    found: dict[str, Fault] = {}
    for info in sorted(pkgutil.iter_modules(catalog.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{catalog.__name__}.{info.name}")
        fault = getattr(module, "FAULT", None)
        if not isinstance(fault, Fault):
            raise TypeError(f"{module.__name__}: a fault module declares FAULT = Fault(...)")
        if fault.name in found:
            raise ValueError(f"{module.__name__}: fault {fault.name!r} is declared twice")
        found[fault.name] = fault
    return found


#: Every fault, by name (the value of ``EVALRUN_FAULT`` and of a variant's ``fault:``).
FAULTS: dict[str, Fault] = _discover()


def known_faults() -> list[str]:
    """Names accepted in ``EVALRUN_FAULT`` (and in a variant's ``fault:``), sorted."""
    return sorted(FAULTS)


def requested_fault(environ: Mapping[str, str] | None = None) -> Fault | None:
    """The fault named by ``EVALRUN_FAULT``, or None when unset or empty.

    Raises:
        FaultConfigError: the name is not a known fault.
    """
    name = text(FAULT_ENV, environ)
    if not name:
        return None
    fault = FAULTS.get(name)
    if fault is None:
        raise FaultConfigError(
            f"{FAULT_ENV}={name!r} is not a known evalrun fault; known faults: "
            + ", ".join(known_faults())
            + f" (unset {FAULT_ENV} to run without a fault)"
        )
    return fault


def check_patch_targets(name: str | None = None) -> list[str]:
    """Problems of the patch targets in the installed vLLM (empty list = all fine).

    Args:
        name: one fault, or None for all of them.
    """
    faults = [FAULTS[name]] if name is not None else list(FAULTS.values())
    out: list[str] = []
    for f in faults:
        for t in f.targets:
            out += [f"{f.name}: {p}" for p in t.problems()]
    return out


def expectations_table() -> str:
    """The self-check's expectations of every fault as a Markdown table (docs/FAULTS.md
    carries it; ``tests/faults/test_expectations.py`` compares the two)."""
    lines = ["| fault | scheduling | must fail | must pass | under synchronous scheduling |",
             "| --- | --- | --- | --- | --- |"]
    for name in known_faults():
        f = FAULTS[name]
        e = f.expectation
        sync = {None: "-", True: "patched code runs; every gate passes",
                False: "patched code never runs; every gate passes"}[e.sync_executes]
        lines.append(f"| `{name}` | {f.scheduling} | {', '.join(f'`{g.label()}`' for g in e.must_fail) or '-'} | "
                     f"{', '.join(f'`{g.label()}`' for g in e.must_pass) or '-'} | {sync} |")
    return "\n".join(lines) + "\n"
