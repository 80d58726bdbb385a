"""Environment faults get named: ``evalrun doctor``, the server-log
diagnosis, and GSM8K on an offline machine answered within seconds.

A broken torchvision is simulated by a package on PYTHONPATH that raises what the
real mismatched wheel raises (docs/cpu-engine.md):
breaking the real virtual environment to test this is not an option.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.engine.doctor import check_cache, check_data, check_engine, check_ports, diagnose_server_log

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)


@pytest.fixture
def broken_torchvision(tmp_path, monkeypatch) -> Path:
    site = tmp_path / "site"
    pkg = site / "torchvision"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        'raise RuntimeError("operator torchvision::nms does not exist")\n')
    dist = site / "torchvision-0.28.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torchvision\nVersion: 0.28.0\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    return site


@pytest.mark.usefixtures("broken_torchvision")
def test_broken_companion_wheel_is_named_with_the_fix():
    t0 = time.monotonic()
    found = {f.check: f for f in check_engine(sys.executable, with_vllm=False)}
    assert time.monotonic() - t0 < 30
    tv = found["torchvision"]
    assert tv.ok is False and "0.28.0" in tv.detail and "torchvision::nms does not exist" in tv.detail
    assert "pip uninstall -y torchvision" in tv.fix
    assert found["torch build"].ok is True and "+cpu" in found["torch build"].detail


@pytest.mark.usefixtures("broken_torchvision")
def test_server_log_diagnosis_names_the_broken_wheel():
    log = ("INFO ... Resolved architecture: Qwen3NextForCausalLM\n"
           "ERROR ... ValueError: Could not import module 'Qwen3NextForCausalLM'\n")
    why = diagnose_server_log(log, sys.executable)
    assert "companion wheel" in why and "torchvision 0.28.0 is installed but does not load" in why
    assert "Fix:" in why and "pip uninstall -y torchvision" in why
    assert diagnose_server_log("INFO all fine\n") is None


def test_offline_machine_without_gsm8k_answers_within_seconds(tmp_path, monkeypatch):
    monkeypatch.delenv("EVALRUN_DATA_DIR", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")        # nothing listens: the hub is unreachable
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))             # an empty cache
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf" / "datasets"))
    t0 = time.monotonic()
    f = check_data(None)
    took = time.monotonic() - t0
    assert took < 10, took     # datasets' own retries took about 25 s on this machine
    assert f.ok is None and "not reachable" in f.detail and "--data-dir" in f.fix


def test_data_cache_and_ports(gsm8k_dir, tmp_path):
    f = check_data(gsm8k_dir)
    assert f.ok is True and "1319 test and 7473 train" in f.detail
    c = check_cache(tmp_path / "cache")
    assert c.ok is True and "GiB free" in c.detail and "none yet" in c.detail
    assert check_ports().ok is True


def test_doctor_command_json(capsys, gsm8k_dir):
    code = main(["doctor", "--json", "--data-dir", str(gsm8k_dir)])
    findings = json.loads(capsys.readouterr().out)
    checks = [f["check"] for f in findings]
    assert checks[0] == "torch build" and "engine import" in checks
    assert checks[-3:] == ["GSM8K data", "cache folder", "free ports"]
    assert code == (1 if any(f["ok"] is False for f in findings) else 0)
