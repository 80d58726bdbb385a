"""The ``noop`` fault: patches nothing, needs no model runner, and counts as exercised once
a process reported it active."""

from __future__ import annotations

from harness.faults.catalog.noop import FAULT
from harness.faults.plugin import exercised


def test_noop_patches_nothing_and_needs_no_runner():
    assert FAULT.targets == () and FAULT.runner is None
    FAULT.install(FAULT)  # nothing to patch, nothing raised


def test_noop_is_exercised_when_a_process_reported_it_active():
    assert exercised({"processes": 2, "faults": ["noop"], "counts": {}}, "noop") == (True, "")
    assert exercised({"processes": 2, "faults": [], "counts": {}}, "noop") == (False, "noop not active")
