"""``evalrun bisect`` judges only the records it wrote, and a stopping signal ends it.

A rerun with the same ``--bisect-id`` after only its folder was deleted finds the old
step's run folder: that step is an error (exit 2, status ``error``), never a verdict read
from the old record. A signal during a step (here: while its reports are written,
simulated by marking the process's registry as a signal handler does) ends the
bisection INTERRUPTED, exit 2. The steps' runs are stubbed: only the build's identity
is read, from a fake interpreter.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest

from harness.cli import bisect as bisect_mod
from harness.cli import main
from harness.engine.registry import processes
from tests.conftest import FAKE_VLLM, write_fake_spec_config

pytestmark = pytest.mark.integration  # the fake builds are interpreters started once each to read their identity


@pytest.fixture(autouse=True)
def _own_handlers():
    """The bisection installs stopping-signal handlers: put the test process's back."""
    olds = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)}
    yield
    for s, h in olds.items():
        signal.signal(s, h)


def _builds(folder: Path, n: int) -> list[str]:
    out = []
    for i in range(1, n + 1):
        p = folder / f"build-{i}"
        p.write_text(f"#!/bin/sh\nexport FAKE_BUILD_VERSION=0.0.{i}\nexec {sys.executable} {FAKE_VLLM} \"$@\"\n")
        p.chmod(0o755)
        out.append(str(p))
    return out


def _argv(tmp_path: Path, builds: list[str]) -> list[str]:
    cfg = write_fake_spec_config(tmp_path, num_questions=2)
    argv = ["bisect", "--config", str(cfg), "--results-dir", str(tmp_path / "results"), "--quiet", "--no-baseline",
            "--bisect-id", "bs"]
    for b in builds:
        argv += ["--build", b]
    return argv


def test_a_step_folder_left_by_an_earlier_bisection_is_an_error_not_a_verdict(tmp_path, monkeypatch, capsys):
    builds = _builds(tmp_path, 2)
    stale = tmp_path / "results" / "bs-b2-vllm-0.0.2"
    stale.mkdir(parents=True)
    (stale / "run.json").write_text("{}")
    ran: list[str] = []
    monkeypatch.setattr(bisect_mod._Runs, "step", lambda self, python, run_id: ran.append(run_id) or 1)
    code = main(_argv(tmp_path, builds))
    rec = json.loads((tmp_path / "results" / "bs" / "bisect.json").read_text())
    assert code == 2 and rec["status"] == "error" and rec["exit_code"] == 2
    assert str(stale) in rec["message"] and not ran  # never run, never judged
    assert "error" in capsys.readouterr().out


def test_a_signal_during_a_step_ends_the_bisection_interrupted(tmp_path, monkeypatch, capsys):
    builds = _builds(tmp_path, 3)

    def step(self, python, run_id):  # the step's run took a SIGTERM while writing its reports: exit code kept
        processes().mark_interrupting()
        return 1

    monkeypatch.setattr(bisect_mod._Runs, "step", step)
    try:
        code = main(_argv(tmp_path, builds))
    finally:
        processes()._interrupting.clear()
    rec = json.loads((tmp_path / "results" / "bs" / "bisect.json").read_text())
    assert code == 2 and rec["status"] == "interrupted"
    assert len(rec["steps"]) <= 1 and rec["first_bad"] is None
