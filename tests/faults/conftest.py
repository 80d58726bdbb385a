"""Every fault test starts and ends with the plugin unpatched and its variables unset."""

from __future__ import annotations

import pytest

import harness.faults.plugin as faults
from harness.faults.noise import NOISE_ENV, NOISE_SEED_ENV
from harness.faults.plugin import FAULT_ENV


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv(FAULT_ENV, raising=False)
    monkeypatch.delenv(faults.DEBUG_ENV, raising=False)
    monkeypatch.delenv(faults.CPU_ASYNC_ENV, raising=False)
    monkeypatch.delenv(faults.REPORT_ENV, raising=False)
    monkeypatch.delenv(NOISE_ENV, raising=False)
    monkeypatch.delenv(NOISE_SEED_ENV, raising=False)
    faults.unpatch_all()
    yield
    faults.unpatch_all()
