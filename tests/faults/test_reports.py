"""harness.faults.reports: counters, the per-process report files, merging them, and
whether a fault was exercised."""

from __future__ import annotations

import json
import os

import pytest

import harness.faults.plugin as faults
from harness.faults.plugin import FAULTS


def test_reports_are_written_per_process_and_merged(tmp_path, monkeypatch):
    monkeypatch.setenv(faults.REPORT_ENV, str(tmp_path))
    faults.STATE.fault = FAULTS["async-stale-accepted"]
    faults.count("async-stale-accepted.executions", 7)
    faults.count("async-stale-accepted.changed", 2)
    path = faults.flush_report()
    assert path == str(tmp_path / f"plugin-{os.getpid()}.json")
    # a second process (another pid) with other counts, and a broken file
    (tmp_path / "plugin-1.json").write_text(json.dumps(
        {"pid": 1, "fault": "async-stale-accepted", "model_runner": "x.Runner", "patched": ["a.b"],
         "counts": {"async-stale-accepted.executions": 3, "batch.reorder_swaps": 5}}))
    (tmp_path / "plugin-2.json").write_text("{not json")
    rep = faults.read_reports(tmp_path)
    assert rep["processes"] == 2 and len(rep["errors"]) == 1
    assert rep["counts"] == {"async-stale-accepted.executions": 10, "async-stale-accepted.changed": 2,
                             "batch.reorder_swaps": 5}
    assert rep["faults"] == ["async-stale-accepted"] and rep["model_runners"] == ["x.Runner"]
    assert faults.exercised(rep, "async-stale-accepted") == (True, "")


@pytest.mark.parametrize("cnts, processes, why", [
    ({}, 0, "did not load"),
    ({"f.executions": 0}, 1, "never ran"),
    ({"f.executions": 4, "f.changed": 0}, 1, "never changed"),
])
def test_fault_not_exercised_reasons(cnts, processes, why):
    ok, reason = faults.exercised({"processes": processes, "counts": cnts, "faults": ["f"]}, "f")
    assert not ok and why in reason
    if processes:
        assert "fault not exercised" in reason


def test_missing_report_folder_reads_as_no_process(tmp_path):
    assert faults.read_reports(tmp_path / "absent")["processes"] == 0
