"""Fail closed in the runner, with the FAKE server (tests/fake_vllm.py) for
what the real engine cannot do on demand: exit at start-up, never get ready, die mid
task, ignore SIGTERM, report impossible or reset counters. The real-engine versions
of unreadable engine facts and rejected arguments are in test_fail_closed_engine.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.api import new_context
from harness.cli import main

from ..conftest import default_signals
from .test_runner_fake_server import FAKE, config, run

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

REPO = Path(__file__).resolve().parents[2]


def gates(rec) -> dict:
    return {g["id"].split("/", 1)[1]: g for g in rec["configs"][0]["gates"]}


# ------------------------------------------------------------------ kind 2: launch failures


def test_rejected_arguments_stop_the_run_before_any_server_with_exit_2(tmp_path, capsys):
    cfg = config(tmp_path, {"FAKE_MODE": "ok"}, {"FAKE_MODE": "reject_args"})
    t0 = time.monotonic()
    code, rec, run_dir = run(tmp_path, cfg)
    assert code == 2 and time.monotonic() - t0 < 20
    err = capsys.readouterr().err
    err = err.replace("\n", "")  # rich wraps long lines
    assert "Traceback" not in err and "--fake-flag-from-main" in err and str(cfg) in err
    assert rec["status"] == "incomplete" and rec["exit_code"] == 2
    (pb,) = rec["preflight"]["problems"]
    assert pb["variant"] == "fake/spec" and pb["kind"] == "args_rejected" and pb["config_path"] == str(cfg)
    v = rec["configs"][0]["variants"]
    assert v["spec"]["server"]["status"] == "args_rejected"
    assert "reference" not in v or not v["reference"].get("tasks")   # nothing was started
    assert not (run_dir / "logs").exists()
    assert all(g["passed"] is None for g in rec["configs"][0]["gates"])


@pytest.mark.parametrize("kind", ["missing", "not_executable"])
def test_an_interpreter_that_cannot_run_is_exit_2_with_a_record(tmp_path, capsys, kind):
    if kind == "missing":
        python = str(tmp_path / "nonexistent" / "python")
    else:
        python = str(tmp_path / "python")
        Path(python).write_text("not a program\n")
        os.chmod(python, 0o644)
    code, rec, _ = run(tmp_path, config(tmp_path, {}, {}), python=python)
    assert code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and python in err.replace("\n", "")   # rich wraps long lines
    kinds = {p["variant"]: p["kind"] for p in rec["preflight"]["problems"]}
    assert kinds == {"fake/reference": "launch_failed", "fake/spec": "launch_failed"}


# ------------------------------------------------------------------ kind 3: start-up statuses


def test_early_exit_is_seen_at_once_with_its_exit_code(tmp_path):
    # the fake exits with code 3 at once; the start-up deadline is 300 s
    cfg = config(tmp_path, {"FAKE_MODE": "ok"}, {"FAKE_MODE": "exit_on_start"}, startup=300)
    t0 = time.monotonic()
    code, rec, _ = run(tmp_path, cfg)
    assert time.monotonic() - t0 < 60
    s = rec["configs"][0]["variants"]["spec"]["server"]
    assert s["status"] == "exited_early" and s["exit_code"] == 3 and s["seconds"] < 10
    assert rec["configs"][0]["variants"]["reference"]["server"]["status"] == "ready"
    assert code == 2


def test_not_ready_before_the_deadline_is_not_ready_timeout(tmp_path):
    cfg = config(tmp_path, {"FAKE_MODE": "ok"}, {"FAKE_MODE": "slow_start:120"}, startup=3)
    code, rec, run_dir = run(tmp_path, cfg)
    s = rec["configs"][0]["variants"]["spec"]["server"]
    assert s["status"] == "not_ready_timeout" and 3 <= s["seconds"] < 15
    assert code == 2
    pid = json.loads((run_dir / "logs" / "fake" / "spec.pid.json").read_text())
    assert (pid["stopped"] is True and not psutil.pid_exists(pid["pid"])
            or psutil.Process(pid["pid"]).status() == psutil.STATUS_ZOMBIE)


def test_death_during_a_task_is_died_mid_task(tmp_path):
    cfg = config(tmp_path, {"FAKE_MODE": "ok"}, {"FAKE_MODE": "crash_after:3"}, concurrency=1)
    code, rec, _ = run(tmp_path, cfg)
    s = rec["configs"][0]["variants"]["spec"]["server"]
    assert s["status"] == "died_mid_task" and s["exit_code"] == 1   # the fake calls os._exit(1)
    assert code == 1


# ------------------------------------------------------------------ kind 1: facts unreadable


def test_unreadable_engine_facts_fail_the_run(tmp_path):
    # like the real server, the fake has no /server_info without VLLM_SERVER_DEV_MODE=1
    cfg = config(tmp_path, {"FAKE_MODE": "ok"}, {"FAKE_MODE": "ok", "VLLM_SERVER_DEV_MODE": "0"})
    code, rec, _ = run(tmp_path, cfg)
    g = gates(rec)["spec/variant_effective"]
    assert g["passed"] is False and "/server_info" in g["detail"]
    assert gates(rec)["reference/variant_effective"]["passed"] is True
    assert code == 1 and rec["passed"] is False


def test_unreadable_version_fails_the_variant_too(tmp_path):
    cfg = config(tmp_path, {"FAKE_MODE": "ok"}, {"FAKE_MODE": "ok", "FAKE_NO_VERSION": "1"})
    code, rec, _ = run(tmp_path, cfg)
    g = gates(rec)["spec/variant_effective"]
    assert g["passed"] is False and "/version" in g["detail"]
    assert code == 1


def test_declared_not_reported_facts_are_not_run_not_passed(tmp_path):
    cfg = config(tmp_path, {"FAKE_MODE": "ok"}, {"FAKE_MODE": "ok", "VLLM_SERVER_DEV_MODE": "0"})
    cfg.write_text(cfg.read_text().replace("    env: {\"FAKE_MODE\": \"ok\", \"VLLM_SERVER_DEV_MODE\": \"0\"}",
                                           "    env: {\"FAKE_MODE\": \"ok\", \"VLLM_SERVER_DEV_MODE\": \"0\"}\n"
                                           "    engine_facts: not_reported"))
    code, rec, _ = run(tmp_path, cfg)
    assert gates(rec)["spec/variant_effective"]["passed"] is None
    assert code == 0 and rec["passed"] is None     # "not every gate judged", never PASS


# ------------------------------------------------------------------ kinds 4 and 5: counters

MIN_LEN = "gates: {min_acceptance_length: 1.1}\n"


def test_impossible_counters_fail_the_acceptance_gates(tmp_path):
    # per request the fake adds 4 drafts, 8 draft tokens and 10 accepted tokens:
    # over 6 requests 24 drafts, 48 draft tokens, 60 accepted (> 48), mean acceptance
    # length 1 + 60/24 = 3.5 > 1 + 2; it would pass min_acceptance_length 1.1 if read.
    cfg = config(tmp_path, {}, {"FAKE_METRICS": "impossible"}, extra_gates=MIN_LEN)
    code, rec, _ = run(tmp_path, cfg)
    t = rec["configs"][0]["variants"]["spec"]["tasks"]["gsm8k"]
    assert t["spec_decode"] is None
    assert "accepted tokens 60 > draft tokens 48" in t["spec_decode_error"]
    assert "1 + 60/24 = 3.500 > 1 + num_speculative_tokens = 3" in t["spec_decode_error"]
    assert t["spec_decode_counters"]["accepted_tokens"] == 60      # the evidence is kept
    g = gates(rec)
    assert g["spec/gsm8k/min_acceptance_length"]["passed"] is False
    assert g["spec/gsm8k/drafts_observed"]["passed"] is False
    assert code == 1


def test_a_reset_on_one_engine_is_a_metrics_error_naming_it(tmp_path):
    cfg = config(tmp_path, {}, {"FAKE_METRICS": "engine_reset"}, extra_gates=MIN_LEN)
    code, rec, _ = run(tmp_path, cfg)
    t = rec["configs"][0]["variants"]["spec"]["tasks"]["gsm8k"]
    assert t["spec_decode"] is None and "engine '0'" in t["spec_decode_error"]
    assert gates(rec)["spec/gsm8k/min_acceptance_length"]["passed"] is False
    assert code == 1


# ------------------------------------------------------------------ kind 7: leftovers, diff


def test_a_server_left_by_an_earlier_run_is_named_with_the_command_to_end_it(tmp_path, capsys):
    """One identified leftover (pid, start time and command line as psutil sees them),
    beside a forged pid 1 file and a sleep recorded with vLLM's command line: only the
    first gets a kill command, in the record, the terminal and summary.md."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    impostor = subprocess.Popen(["sleep", "300"], start_new_session=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    try:
        old = tmp_path / "results" / "old" / "logs" / "cfg"
        old.mkdir(parents=True)
        p = psutil.Process(sleeper.pid)
        (old / "spec.pid.json").write_text(json.dumps({
            "pid": sleeper.pid, "pgid": sleeper.pid, "create_time": p.create_time(), "cmdline": p.cmdline(),
            "owner_pid": gone.pid, "owner_create_time": 1.0, "argv": ["python", "-m", "vllm.x"], "stopped": False,
        }))
        (old / "forged.pid.json").write_text(json.dumps(
            {"pid": 1, "pgid": 1, "create_time": None, "stopped": False, "argv": ["python", "-m", "vllm.x"]}))
        (old / "impostor.pid.json").write_text(json.dumps({
            "pid": impostor.pid, "pgid": impostor.pid, "create_time": psutil.Process(impostor.pid).create_time(),
            "cmdline": [sys.executable, "-m", "vllm.entrypoints.openai.api_server"], "owner_pid": gone.pid,
            "owner_create_time": 1.0, "stopped": False,
        }))
        code, rec, run_dir = run(tmp_path, config(tmp_path, {}, {}))
        err = capsys.readouterr().err.replace("\n", "")
        by_file = {Path(lo["pid_file"]).name: lo for lo in rec["leftover_servers"]}
        assert set(by_file) == {"spec.pid.json", "forged.pid.json"}      # the impostor is not named
        lo = by_file["spec.pid.json"]
        assert lo["verdict"] == "leftover" and lo["pid"] == sleeper.pid
        assert lo["kill_command"] == f"kill -TERM -- -{sleeper.pid}; sleep 5; kill -KILL -- -{sleeper.pid}"
        assert by_file["forged.pid.json"]["verdict"] == "invalid" and by_file["forged.pid.json"]["kill_command"] is None
        summary = (run_dir / "summary.md").read_text()
        for text in (err, summary):
            assert f"kill -TERM -- -{sleeper.pid}" in text
            assert "-- -1;" not in text and f"-{impostor.pid}" not in text and f"pid {impostor.pid}" not in text
        assert code == 0
    finally:
        for proc in (sleeper, impostor):
            proc.kill()
            proc.wait()


def test_diff_of_an_interrupted_run_says_so_and_exits_2(tmp_path, capsys):
    code, rec, run_dir = run(tmp_path, config(tmp_path, {}, {}))
    assert code == 0
    other = tmp_path / "results" / "i"
    other.mkdir()
    rec2 = {k: v for k, v in rec.items() if not k.startswith("_")}
    rec2.update(run_id="i", status="interrupted", passed=None, exit_code=2)
    (other / "run.json").write_text(json.dumps(rec2))
    assert main(["diff", str(run_dir), str(other)]) == 2
    err = capsys.readouterr().err
    assert "run B" in err and "interrupted" in err
    assert main(["diff", str(run_dir), str(run_dir)]) == 0


# ------------------------------------------------------------------ kind 7: signals


def _start_evalrun(tmp_path: Path, spec_mode: str) -> tuple[subprocess.Popen, Path]:
    cfg = config(tmp_path, {"FAKE_MODE": spec_mode}, {"FAKE_MODE": spec_mode}, startup=600)
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "--config", str(cfg), "--python", str(FAKE),
         "--results-dir", str(tmp_path / "results"), "--run-id", "r"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=default_signals,  # evalrun keeps ignored signals ignored (nohup); these tests need them
    )
    pid_file = tmp_path / "results" / "r" / "logs" / "fake" / "reference.pid.json"
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pid_file.exists(), proc.communicate(timeout=30)
    time.sleep(1.0)  # the server is up and waiting (slow start)
    return proc, pid_file


def test_a_signal_ignored_at_start_stays_ignored():
    """``nohup evalrun ...`` must survive a closed terminal: SIGHUP ignored by the caller
    is not turned into a stop."""
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    olds = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT)}
    try:
        new_context().install_stop_handlers()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert callable(signal.getsignal(signal.SIGTERM))
    finally:
        signal.signal(signal.SIGHUP, old)
        for s, h in olds.items():
            signal.signal(s, h)


def _group_gone(pgid: int) -> bool:
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                return False
        except (OSError, psutil.Error):
            continue
    return True


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGQUIT])
def test_every_stopping_signal_stops_the_server_and_keeps_the_record(tmp_path, sig):
    proc, pid_file = _start_evalrun(tmp_path, "slow_start:600")
    server_pid = json.loads(pid_file.read_text())["pid"]
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert _group_gone(server_pid)
    rec = json.loads((tmp_path / "results" / "r" / "run.json").read_text())
    assert rec["status"] == "interrupted" and rec["interrupted_by"] == sig.name
    assert rec["configs"][0]["variants"]["reference"]["server"]["status"] == "interrupted"
    assert "every server evalrun started was stopped (checked" in err


def test_a_second_ctrl_c_kills_a_server_that_ignores_sigterm_and_never_skips_teardown(tmp_path):
    # the fake ignores SIGTERM and has a helper child that ignores it too (as vLLM's
    # API server and its resource tracker do during start-up)
    proc, pid_file = _start_evalrun(tmp_path, "ignore_sigterm")
    server_pid = json.loads(pid_file.read_text())["pid"]
    time.sleep(1.0)
    group = [p.pid for p in psutil.process_iter() if _pgid(p.pid) == server_pid]
    assert len(group) >= 2                                   # server + helper child
    proc.send_signal(signal.SIGINT)
    time.sleep(2.0)
    assert proc.poll() is None                               # still waiting for the group
    assert not _group_gone(server_pid)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 4                         # well inside the 5 s grace
    assert proc.returncode == 2
    assert _group_gone(server_pid)
    assert "waiting up to 5s" in err and "SIGKILL" in err
    assert "every server evalrun started was stopped (checked" in err


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None
