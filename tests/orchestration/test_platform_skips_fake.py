"""vLLM's platform skips in ``evalrun --config`` on the FAKE server's platform probe
(tests/fake_vllm.py answers as a CPU host; ``FAKE_PLATFORM=unknown`` as an interpreter
without vLLM): vLLM's real config ``Qwen3-30B-A3B-MXFP4A16.yaml`` (vLLM skips it off CUDA;
tests/data/vllm_gsm8k/configs/skips_and_checks/README.md names its source) starts no server
and is never a pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fake_run import run_cli

pytestmark = pytest.mark.integration  # the fake's probe is a subprocess (tests/README.md)

CFG = (Path(__file__).resolve().parents[1] / "data" / "vllm_gsm8k" / "configs" / "skips_and_checks"
       / "Qwen3-30B-A3B-MXFP4A16.yaml")
MARLIN = "Skipping Qwen3-30B-A3B-MXFP4A16 on non-CUDA platforms. Marlin kernels are not supported."


def _run(tmp_path, gsm8k_dir):
    code = run_cli(tmp_path, CFG, "--data-dir", str(gsm8k_dir))
    run_dir = tmp_path / "results" / "r"
    return code, json.loads((run_dir / "run.json").read_text()), run_dir


def test_a_config_vllm_skips_here_is_skipped_with_vllms_reason(tmp_path, gsm8k_dir):
    code, rec, run_dir = _run(tmp_path, gsm8k_dir)
    c = rec["configs"][0]
    ref = c["variants"]["reference"]
    assert ref["server"]["status"] == "not_started" and ref["error"].endswith(MARLIN)
    assert not list((run_dir / "logs").rglob("*.log"))  # no server started
    assert c["gates"] and all(g["passed"] is None and MARLIN in g["detail"] for g in c["gates"])
    assert rec["passed"] is None and code == 0  # as a not-applicable variant: never PASS


def test_an_unknown_platform_neither_runs_nor_passes(tmp_path, gsm8k_dir, monkeypatch):
    monkeypatch.setenv("FAKE_PLATFORM", "unknown")
    code, rec, _ = _run(tmp_path, gsm8k_dir)
    c = rec["configs"][0]
    assert c["variants"]["reference"]["server"]["status"] == "not_started"
    assert all(g["passed"] is None and "platform is unknown" in g["detail"] for g in c["gates"])
    assert rec["passed"] is None and code == 2
