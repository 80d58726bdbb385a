"""Leftover servers are identified, never guessed: real processes (``sleep``) and pid
files written by hand, as an earlier run or a forger would leave them. What a process
is comes from psutil and os directly in each test, never from the module under test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from harness.engine.leftovers import find_leftover_servers, group_kill_command, judge_pid_file
from harness.engine.server import VllmServer

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

FAKE = Path(__file__).resolve().parents[1] / "fake_vllm.py"
VLLM_CMD = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--port", "8000"]


@pytest.fixture
def sleeper():
    """A ``sleep 600`` in its own session and process group, as evalrun starts a server."""
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def gone_pid() -> int:
    """The pid of a process that has exited (an owner that is gone)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _record(proc_pid: int, owner: int, **over) -> dict:
    p = psutil.Process(proc_pid)
    info = {"pid": proc_pid, "pgid": proc_pid, "create_time": p.create_time(), "cmdline": p.cmdline(),
            "owner_pid": owner, "owner_create_time": 1.0, "variant": "cfg/spec", "argv": VLLM_CMD,
            "stopped": False}
    info.update(over)
    return info


def _write(results: Path, info, name: str = "spec", run: str = "old") -> Path:
    d = results / run / "logs" / "cfg"
    d.mkdir(parents=True, exist_ok=True)
    f = d / f"{name}.pid.json"
    f.write_text(info if isinstance(info, str) else json.dumps(info))
    return f


def test_the_forged_pid_1_file_gets_no_claim_and_no_kill_command(tmp_path):
    _write(tmp_path, {"pid": 1, "pgid": 1, "create_time": None, "stopped": False, "argv": VLLM_CMD,
                      "owner_pid": 999999, "owner_create_time": None})
    (lo,) = find_leftover_servers(tmp_path)
    assert lo.verdict == "invalid" and lo.kill_command is None and lo.pid is None
    assert "kill" not in lo.describe() and "still running" not in lo.describe()


@pytest.mark.parametrize("pid", [0, -1, -4242, True, "1", 1.5, None])
def test_a_pid_that_no_server_can_have_is_invalid(tmp_path, pid):
    f = _write(tmp_path, {"pid": pid, "pgid": pid, "create_time": 1.0, "cmdline": ["x"], "stopped": False})
    lo = judge_pid_file(f, json.loads(f.read_text()))
    assert lo is not None and lo.verdict == "invalid" and lo.kill_command is None


def test_a_sleep_with_a_recorded_vllm_command_line_is_not_named(tmp_path, sleeper, gone_pid):
    # the real start time, but the command line recorded is vLLM's, not the sleep's
    _write(tmp_path, _record(sleeper.pid, gone_pid, cmdline=VLLM_CMD))
    # the real command line, but another start time
    _write(tmp_path, _record(sleeper.pid, gone_pid, create_time=psutil.Process(sleeper.pid).create_time() - 30),
           name="ref")
    assert find_leftover_servers(tmp_path) == []


def test_a_record_without_start_time_can_only_say_cannot_tell(tmp_path, sleeper, gone_pid):
    _write(tmp_path, _record(sleeper.pid, gone_pid, create_time=None))
    _write(tmp_path, _record(sleeper.pid, gone_pid, cmdline=None), name="ref")
    out = find_leftover_servers(tmp_path)
    assert [lo.verdict for lo in out] == ["cannot_tell", "cannot_tell"]
    assert all(lo.kill_command is None and lo.pid == sleeper.pid for lo in out)
    assert "start time" in out[1].reason and "command line" in out[0].reason   # ref.pid.json sorts first
    assert all("kill" not in lo.describe() for lo in out)


def test_a_server_whose_three_facts_match_and_whose_run_is_gone_is_a_leftover(tmp_path, sleeper, gone_pid):
    _write(tmp_path, _record(sleeper.pid, gone_pid))
    (lo,) = find_leftover_servers(tmp_path)
    assert lo.verdict == "leftover" and lo.pid == sleeper.pid
    assert lo.kill_command == f"kill -TERM -- -{sleeper.pid}; sleep 5; kill -KILL -- -{sleeper.pid}"
    assert lo.command == "sleep 600"


def test_the_server_of_a_run_in_progress_is_not_a_leftover(tmp_path, sleeper):
    me = psutil.Process()
    _write(tmp_path, _record(sleeper.pid, me.pid, owner_create_time=me.create_time()))
    assert find_leftover_servers(tmp_path) == []
    # an owner that lives but has no start time on record: its run may still go on
    _write(tmp_path, _record(sleeper.pid, me.pid, owner_create_time=None))
    (lo,) = find_leftover_servers(tmp_path)
    assert lo.verdict == "cannot_tell" and lo.kill_command is None


def test_a_process_that_does_not_lead_its_own_group_gets_no_command(tmp_path, gone_pid):
    # a sleep in the test's own process group and session: not a group evalrun created
    proc = subprocess.Popen(["sleep", "600"])
    try:
        assert os.getpgid(proc.pid) != proc.pid
        _write(tmp_path, _record(proc.pid, gone_pid))
        (lo,) = find_leftover_servers(tmp_path)
        assert lo.verdict == "invalid" and lo.kill_command is None
    finally:
        proc.kill()
        proc.wait()


def test_a_recorded_group_other_than_the_server_pid_is_invalid(tmp_path, sleeper, gone_pid):
    _write(tmp_path, _record(sleeper.pid, gone_pid, pgid=1))
    (lo,) = find_leftover_servers(tmp_path)
    assert lo.verdict == "invalid" and lo.kill_command is None


def test_a_pid_file_naming_this_evalrun_is_invalid(tmp_path, gone_pid):
    me = psutil.Process()
    _write(tmp_path, {"pid": me.pid, "pgid": me.pid, "create_time": me.create_time(), "cmdline": me.cmdline(),
                      "owner_pid": gone_pid, "stopped": False})
    (lo,) = find_leftover_servers(tmp_path)
    assert lo.verdict == "invalid" and lo.kill_command is None


@pytest.mark.parametrize("text", ["", "{", "[1, 2]", "null", "[" * 100000])
def test_unreadable_or_odd_pid_files_are_invalid_not_errors(tmp_path, text):
    _write(tmp_path, text)
    (lo,) = find_leftover_servers(tmp_path)
    assert lo.verdict == "invalid" and lo.kill_command is None


def test_a_stopped_server_or_a_gone_pid_yields_nothing(tmp_path, sleeper, gone_pid):
    _write(tmp_path, _record(sleeper.pid, gone_pid, stopped=True))
    _write(tmp_path, _record(sleeper.pid, gone_pid, pid=gone_pid, pgid=gone_pid), name="ref")
    assert find_leftover_servers(tmp_path) == []


def test_no_kill_command_targets_pid_1_or_below_or_this_process_group():
    for bad in (1, 0, -1, True, os.getpid(), os.getpgrp(), os.getsid(0)):
        assert group_kill_command(bad) is None, bad
    assert group_kill_command(4242) == "kill -TERM -- -4242; sleep 5; kill -KILL -- -4242"


def test_a_real_pid_file_keeps_start_time_and_command_line_after_the_stop(tmp_path):
    """The FAKE server (tests/fake_vllm.py): the pid file of a real server start, as the
    real engine's would be, but in 2 s. Before the fix the stop rewrote it with a null
    start time (psutil cannot read a process that is gone)."""
    log = tmp_path / "logs" / "cfg" / "spec.log"
    srv = VllmServer([str(FAKE), "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--port", "{port}"],
                     {"FAKE_MODE": "ok"}, log, name="cfg/spec", startup_timeout=30)
    with srv:
        p = psutil.Process(srv.pid)
        want = {"pid": p.pid, "pgid": os.getpgid(p.pid), "create_time": p.create_time(), "cmdline": p.cmdline()}
        running = json.loads(srv.pid_file.read_text())
    stopped = json.loads(srv.pid_file.read_text())
    for doc in (running, stopped):
        assert {k: doc[k] for k in want} == want
        assert doc["owner_pid"] == os.getpid() and doc["owner_create_time"] == psutil.Process().create_time()
    assert running["stopped"] is False and stopped["stopped"] is True
    assert not list(log.parent.glob(".*.tmp"))   # the atomic writer leaves no temporary file
