"""The nightly's schedule and cost previewed from any host: ``--dry-run --gpus 8`` on a host
without GPUs plans the 8-device node (and says the devices are assumed); a real run with
``--gpus 8`` there refuses before anything starts. No engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.engine import devices as D

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "model_lists" / "models-h200.txt"
PY = "/usr/bin/python3"  # no torch here: the device probe finds none


@pytest.fixture
def cpu_host(monkeypatch):
    """No CUDA_VISIBLE_DEVICES, no NVML: a host without GPUs, whatever this machine is."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(D, "_nvml_count", lambda: None)


@pytest.mark.usefixtures("cpu_host")
def test_dry_run_with_gpus_plans_the_node_on_a_cpu_host(capsys, tmp_path):
    assert main(["--config", str(H200), "--dry-run", "--json", "--gpus", "8", "--python", PY,
                 "--results-dir", str(tmp_path)]) == 0
    plan = json.loads(capsys.readouterr().out)
    whole = plan[0]["cost"]["list"]
    assert whole["devices"] == [str(i) for i in range(8)] and whole["gpu_seconds"] > 0
    assert any("planned on 8 device(s) from --gpus 8, although this host has 0" in n for n in whole["notes"])
    # the 8-way Nemotron Super servers take the whole node; the 4-way ones two at a time
    slots = [s for c in plan for s in c["cost"]["schedule"]]
    assert {len(s["devices"]) for s in slots} == {8, 4}
    assert main(["--config", str(H200), "--dry-run", "--gpus", "8", "--python", PY,
                 "--results-dir", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "8 device(s) (0,1,2,3,4,5,6,7)" in text and "CPU host" not in text


@pytest.mark.usefixtures("cpu_host")
def test_dry_run_without_gpus_on_a_cpu_host_stays_sequential(capsys, tmp_path):
    assert main(["--config", str(H200), "--dry-run", "--python", PY, "--results-dir", str(tmp_path)]) == 0
    assert "CPU host (no devices); sequential" in capsys.readouterr().out


@pytest.mark.usefixtures("cpu_host")
def test_a_run_with_gpus_on_a_host_without_them_refuses(capsys, tmp_path):
    code = main(["--config", str(H200), "--gpus", "8", "--python", PY, "--results-dir", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert "--gpus 8: asks for 8 device(s), this host has 0" in err and "only --dry-run" in err
    assert not any(tmp_path.iterdir())  # refused before a run folder exists


def test_count_above_the_devices_is_refused_and_planned_only_by_the_dry_run():
    with pytest.raises(D.DeviceError, match="asks for 8 device.s., this host has 4"):
        D.cap_devices(("0", "1", "2", "3"), "8")
    assert D.dry_run_devices(("0", "1", "2", "3"), "8")[0] == tuple(str(i) for i in range(8))
    assert D.dry_run_devices(("0", "1", "2", "3"), "2") == (("0", "1"), None)
