"""Fail closed against the REAL vLLM.

* The pre-launch argument check runs the installed vLLM's own parser (no server is
  started): a flag this release does not have is rejected in seconds, naming it.
* A real server started without ``VLLM_SERVER_DEV_MODE=1`` has no ``/server_info``:
  its ``variant_effective`` gate must FAIL (exit 1), not vanish.
* A real server given an argument the parser accepts but the engine refuses exits
  during start-up: status ``exited_early`` with its exit code, seen long before the
  start-up deadline.

Tests that start a server are marked ``engine``; run them under
``flock /tmp/evalrun-engine.lock`` on a shared machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.engine.preflight import ServerCommand, check_server_commands

from ..conftest import require_vllm

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

REPO = Path(__file__).resolve().parents[2]
CPU_CONFIG = REPO / "configs" / "tiny-qwen3next-mtp-cpu.yaml"


def _commands(cfg_path: Path) -> list[ServerCommand]:
    plan = build_plan([load_config(cfg_path)], python=sys.executable)
    return [ServerCommand(v.id, cfg_path, tuple(a.replace("{port}", "8000") for a in v.argv), v.env)
            for cp in plan.configs for v in cp.variants]


def test_the_installed_vllm_parser_accepts_the_cpu_config_and_names_an_unknown_flag(tmp_path):
    require_vllm()
    d = yaml.safe_load(CPU_CONFIG.read_text())
    d["name"] = "bad-flag"
    d["variants"]["spec_sync"]["server_args"] = "--no-such-flag-from-vllm-main 1"
    bad = tmp_path / "bad-flag.yaml"
    bad.write_text(yaml.safe_dump(d))
    t0 = time.monotonic()
    problems = check_server_commands(_commands(CPU_CONFIG) + _commands(bad))
    assert time.monotonic() - t0 < 300
    # only the variant with the flag fails; the CPU default config's commands all parse
    assert [(p.variant, p.kind) for p in problems] == [("bad-flag/spec_sync", "args_rejected")]
    assert "unrecognized arguments: --no-such-flag-from-vllm-main" in problems[0].message
    assert str(bad) in problems[0].describe()


def test_cli_refuses_a_flag_this_vllm_does_not_have_with_exit_2_and_a_record(tmp_path):
    """The whole command line with the real parser: exit 2, no traceback, no server."""
    require_vllm()
    d = yaml.safe_load(CPU_CONFIG.read_text())
    d["name"] = "bad-flag"
    d["variants"]["spec_sync"]["server_args"] = "--no-such-flag-from-vllm-main 1"
    d["tasks"] = {"arith": {**d["tasks"]["arith"], "num_questions": 4}}
    d["comparisons"] = []
    cfg = tmp_path / "bad-flag.yaml"
    cfg.write_text(yaml.safe_dump(d))
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "--config", str(cfg), "--results-dir", str(tmp_path / "r"),
         "--run-id", "x", "--quiet"], cwd=REPO, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = proc.stderr.replace("\n", "")  # rich wraps long lines
    assert "Traceback" not in err
    assert "--no-such-flag-from-vllm-main" in err and str(cfg) in err
    rec = json.loads((tmp_path / "r" / "x" / "run.json").read_text())
    (pb,) = rec["preflight"]["problems"]
    assert pb["variant"] == "bad-flag/spec_sync" and pb["kind"] == "args_rejected"
    assert not (tmp_path / "r" / "x" / "logs").exists()   # no server was started


@pytest.mark.engine
def test_real_server_facts_unreadable_fails_and_a_refused_argument_exits_early(tmp_path):
    """One run on the real CPU engine with the tiny model, two variants:
    ``nodev`` (no VLLM_SERVER_DEV_MODE: /server_info is 404) and ``toolong``
    (``--max-model-len`` far beyond the model's 2048 positions: the parser accepts it,
    the engine refuses it at start-up)."""
    require_vllm()
    d = yaml.safe_load(CPU_CONFIG.read_text())
    d["name"] = "fail-closed"
    d["startup_max_wait_seconds"] = 900
    d["variants"] = {
        "nodev": {"env": {"VLLM_SERVER_DEV_MODE": "0"}},
        "toolong": {"server_args": "--max-model-len 1000000"},
    }
    d["server_args"] = d["server_args"].replace("--max-model-len 2048", "")
    d["tasks"] = {"arith": {**d["tasks"]["arith"], "num_questions": 4}}
    d["comparisons"] = []
    cfg = tmp_path / "fail-closed.yaml"
    cfg.write_text(yaml.safe_dump(d))
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "--config", str(cfg), "--results-dir", str(tmp_path / "r"),
         "--run-id", "x"], cwd=REPO, capture_output=True, text=True, timeout=2400,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "VLLM_CPU_KVCACHE_SPACE": "1"},
    )
    rec = json.loads((tmp_path / "r" / "x" / "run.json").read_text())
    gates = {g["id"]: g for g in rec["configs"][0]["gates"]}
    # kind 1: the engine facts could not be read -> the gate fails, the run exits 1
    g = gates["fail-closed/nodev/variant_effective"]
    assert g["passed"] is False and "/server_info" in g["detail"], g
    nodev = rec["configs"][0]["variants"]["nodev"]
    assert nodev["server"]["status"] == "ready" and nodev["tasks"]["arith"]["num_requests"] == 4
    # kind 3: the engine refused the argument during start-up
    s = rec["configs"][0]["variants"]["toolong"]["server"]
    assert s["status"] == "exited_early" and s["exit_code"] not in (None, 0), s
    assert s["seconds"] < 600                      # seen when it happened, not at the 900 s deadline
    assert proc.returncode == 1 and rec["passed"] is False, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr.split("--- last lines ---")[0]
