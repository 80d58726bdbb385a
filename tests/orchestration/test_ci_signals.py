"""Cancelled CI jobs, with the FAKE server slow to exit
(``FAKE_EXIT_SECONDS``: the real engine cannot be made to hang in its shutdown on demand).

The signal sequences are the CI systems' own:

* Buildkite: the agent sends SIGTERM on cancel and SIGKILL when its
  ``cancel-grace-period`` (default 10 s) has passed.
* GitHub Actions: the runner sends SIGINT, SIGTERM 7.5 s later, SIGKILL 2.5 s after that.

In every case the run record must be on disk (``interrupted``, with what was measured
before the signal) and no process of any server may outlive the job.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import junitparser
import pytest

from ..conftest import alive, default_signals
from .test_runner_fake_server import FAKE, config

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

REPO = Path(__file__).resolve().parents[2]


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    left = [p for p in pids if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if alive(p)]
    return left


def _start(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, list[int], Path]:
    """evalrun on the fake: ``reference`` answers its 6 questions, ``spec`` never gets
    ready; both servers take 60 s to exit after SIGTERM and have a child process.
    Returns evalrun's process, the pids of the spec server and its child, the run folder."""
    slow = {"FAKE_EXIT_SECONDS": "60", "FAKE_CHILD": "1"}
    cfg = config(tmp_path, {"FAKE_MODE": "ok", **slow}, {"FAKE_MODE": "slow_start:600", **slow}, startup=600)
    run_dir = tmp_path / "results" / "r"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "--config", str(cfg), "--python", str(FAKE),
         "--results-dir", str(tmp_path / "results"), "--run-id", "r", "--quiet", *extra],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)},
        preexec_fn=default_signals,
    )
    log = run_dir / "logs" / "fake" / "spec.log"
    pid_file = run_dir / "logs" / "fake" / "spec.pid.json"
    deadline = time.monotonic() + 90
    child = None
    while time.monotonic() < deadline and child is None:
        if proc.poll() is not None:
            pytest.fail(f"evalrun ended early: {proc.communicate()}")
        if pid_file.exists() and log.exists():
            for line in log.read_text().splitlines():
                if line.startswith("fake vllm: child "):
                    child = int(line.split()[-1])
        time.sleep(0.2)
    assert child is not None, "the spec server did not start"
    server = json.loads(pid_file.read_text())["pid"]
    return proc, [server, child], run_dir


def _record(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def _kept(rec: dict, signal_name: str) -> None:
    """The record says interrupted by the first signal and keeps the reference's results."""
    assert rec["status"] == "interrupted" and rec["interrupted_by"] == signal_name and rec["exit_code"] == 2
    t = rec["configs"][0]["variants"]["reference"]["tasks"]["gsm8k"]
    assert t["num_requests"] == 6 and t["error_count"] == 0


def test_a_record_exists_from_the_start_and_grows_as_results_arrive(tmp_path):
    proc, pids, run_dir = _start(tmp_path)
    try:
        rec = _record(run_dir)   # written while the spec server is still starting
        assert rec["status"] == "running" and rec["exit_code"] is None
        assert rec["configs"][0]["variants"]["reference"]["tasks"]["gsm8k"]["num_requests"] == 6
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert _wait_gone(pids, 10) == []


def test_buildkite_cancel_sigterm_then_sigkill_after_10s(tmp_path):
    proc, pids, run_dir = _start(tmp_path)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()   # the agent's SIGKILL at the end of its grace period
    out, err = proc.communicate(timeout=30)
    took = time.monotonic() - t0
    assert proc.returncode == 2, (took, err)   # evalrun finished before the SIGKILL
    assert took < 10
    assert _wait_gone(pids, 5) == []
    _kept(_record(run_dir), "SIGTERM")
    assert "SIGKILL" in err and "every server evalrun started was stopped (checked" in err

    xml = junitparser.JUnitXml.fromfile(str(run_dir / "junit.xml"))   # CI's report says INTERRUPTED
    (case,) = [c for s in xml for c in s if c.name == "r/outcome"]
    assert isinstance(case.result[0], junitparser.Error) and case.result[0].message.startswith("INTERRUPTED")
    assert "# evalrun run r: INTERRUPTED" in (run_dir / "summary.md").read_text()


def test_buildkite_sigkill_during_a_long_grace_leaves_the_record_and_no_server(tmp_path):
    # a stop grace longer than the agent's: evalrun is killed at +10 s while it waits
    proc, pids, run_dir = _start(tmp_path, "--stop-grace", "30")
    proc.send_signal(signal.SIGTERM)
    time.sleep(10)
    assert proc.poll() is None and alive(pids[0])   # still in the grace period (the child died of SIGTERM)
    _kept(_record(run_dir), "SIGTERM")                           # written before the teardown
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert _wait_gone(pids, 10) == []    # parent-death signal (server) and watchdog (its child)


def test_github_actions_cancel_sigint_sigterm_after_7_5s_then_sigkill(tmp_path):
    proc, pids, run_dir = _start(tmp_path, "--stop-grace", "30")
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=7.5)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=2.5)
        except subprocess.TimeoutExpired:
            proc.kill()
    out, err = proc.communicate(timeout=30)
    took = time.monotonic() - t0
    # the SIGTERM sped the teardown up (SIGKILL to the servers at once); on a loaded machine
    # the runner's SIGKILL at +10 s may still land while evalrun exits: the record and the
    # absence of any server are what must hold either way
    assert proc.returncode in (2, -signal.SIGKILL), (took, err)
    assert 7.5 <= took < 10.5
    assert _wait_gone(pids, 5) == []
    _kept(_record(run_dir), "SIGINT")
    rec = _record(run_dir)
    assert rec["configs"][0]["variants"]["spec"]["server"]["status"] in ("interrupted", None)


def test_github_actions_sequence_with_the_default_grace_ends_before_the_sigterm(tmp_path):
    proc, pids, run_dir = _start(tmp_path)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=7.5)   # raises (fails the test) when the default grace does not fit
    took = time.monotonic() - t0
    proc.communicate(timeout=30)
    assert proc.returncode == 2 and took < 7.5
    assert _wait_gone(pids, 5) == []
    _kept(_record(run_dir), "SIGINT")


def test_sigkill_of_evalrun_leaves_no_server(tmp_path):
    proc, pids, run_dir = _start(tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert _wait_gone(pids, 10) == []
    rec = _record(run_dir)       # the last checkpoint: reference done, spec starting
    assert rec["status"] == "running"
    assert rec["configs"][0]["variants"]["reference"]["tasks"]["gsm8k"]["num_requests"] == 6


def test_a_second_run_with_the_same_id_is_refused_at_once_naming_the_holder(tmp_path):
    proc, pids, run_dir = _start(tmp_path)
    try:
        before = (run_dir / "run.json").read_bytes()
        cfg = tmp_path / "fake.yaml"
        t0 = time.monotonic()
        second = subprocess.run(
            [sys.executable, "-m", "harness.cli", "--config", str(cfg), "--python", str(FAKE),
             "--results-dir", str(tmp_path / "results"), "--run-id", "r", "--quiet"],
            cwd=REPO, capture_output=True, text=True, timeout=120,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert second.returncode == 2 and time.monotonic() - t0 < 30
        err = second.stderr.replace("\n", " ")
        assert f"evalrun pid {proc.pid}" in err and "still running" in err and str(run_dir) in err
        assert (run_dir / "run.json").read_bytes() == before    # nothing of the first run touched
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert _wait_gone(pids, 10) == []
