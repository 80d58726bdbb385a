"""The pre-launch check overlapping the work before the first server
(:func:`harness.engine.preflight.start_check`), on the FAKE server (tests/fake_vllm.py):
the real check answers in about 11 s, always after its head start; the fake's check is
made slow here by an interpreter wrapper that sleeps before answering it, and its server
refuses an argument the way vLLM's parser does, so a server started too early would show.
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from harness.engine.preflight import HEAD_START_SECONDS
from harness.engine.probes import build_identity, server_args, vllm_files

from ..orchestration.test_runner_fake_server import FAKE, config, run

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

#: how long the wrapper's check takes: well past the head start, so the run goes on
#: preparing its first config beside it
CHECK_SECONDS = HEAD_START_SECONDS + 3


def slow_check_python(tmp_path: Path) -> str:
    """An interpreter whose pre-launch check (the probe ``server_args``) answers after
    :data:`CHECK_SECONDS` (the cache's probe goes to the real interpreter, the build probe
    to the fake at once)
    and whose server, like vLLM's own parser, exits at start-up with an argument error
    when the variant's environment says ``FAKE_MODE=reject_args``."""
    w = tmp_path / "python-slow-check"
    w.write_text(
        "#!/bin/sh\n"
        f'case "$1" in */probes/{Path(vllm_files.__file__).name}) exec {sys.executable} "$@";;\n'
        f'  */probes/{Path(build_identity.__file__).name}) exec {sys.executable} {FAKE} "$@";;\n'
        f'  */probes/{Path(server_args.__file__).name}) sleep {CHECK_SECONDS}; exec {sys.executable} {FAKE} "$@";;\n'
        'esac\n'
        'if [ "$FAKE_MODE" = "reject_args" ]; then\n'
        '  echo "api_server.py: error: unrecognized arguments: --fake-flag-from-main" >&2; exit 2; fi\n'
        f'exec {sys.executable} {FAKE} "$@"\n')
    w.chmod(w.stat().st_mode | stat.S_IXUSR)
    return str(w)


def _logs(run_dir: Path) -> set[str]:
    return {p.name for p in (run_dir / "logs").rglob("*.log")}


def test_a_later_variants_bad_argument_is_refused_before_any_server_starts(tmp_path, capsys):
    cfg = config(tmp_path, {"FAKE_MODE": "ok"}, {"FAKE_MODE": "reject_args"})
    code, rec, run_dir = run(tmp_path, cfg, python=slow_check_python(tmp_path))
    err = capsys.readouterr().err.replace("\n", "")  # rich wraps long lines
    assert code == 2 and rec["status"] == "incomplete" and rec["exit_code"] == 2
    assert "Traceback" not in err and "server command rejected before launch" in err
    assert "--fake-flag-from-main" in err and str(cfg) in err
    (pb,) = rec["preflight"]["problems"]
    assert pb["variant"] == "fake/spec" and pb["kind"] == "args_rejected" and pb["config_path"] == str(cfg)
    assert rec["preflight"]["seconds"] >= CHECK_SECONDS - 0.5 and rec["preflight"]["cached"] is False
    v = rec["configs"][0]["variants"]
    assert len(rec["configs"]) == 1 and v["spec"]["server"]["status"] == "args_rejected"
    assert v["reference"]["server"]["status"] == "not_started" and not v["reference"].get("tasks")
    assert _logs(run_dir) == set()  # no server started: every one waits for the check's answer
    assert all(g["passed"] is None for g in rec["configs"][0]["gates"])


def test_the_first_variants_bad_argument_gets_the_checks_message_not_a_crash(tmp_path, capsys):
    cfg = config(tmp_path, {"FAKE_MODE": "reject_args"}, {"FAKE_MODE": "ok"})
    code, rec, run_dir = run(tmp_path, cfg, python=slow_check_python(tmp_path))
    err = capsys.readouterr().err.replace("\n", "")
    assert code == 2 and rec["status"] == "incomplete" and rec["exit_code"] == 2
    assert "Traceback" not in err and "server command rejected before launch: fake/reference" in err
    assert "exited" not in err.lower()  # the server's own exit is not what the run reports
    (pb,) = rec["preflight"]["problems"]
    assert pb["variant"] == "fake/reference" and pb["kind"] == "args_rejected"
    v = rec["configs"][0]["variants"]
    assert v["reference"]["server"]["status"] == "args_rejected" and "--fake-flag-from-main" in v["reference"]["error"]
    assert v["spec"]["server"]["status"] == "not_started"
    assert _logs(run_dir) == set()


def test_an_all_clear_after_the_head_start_is_recorded_and_cached(tmp_path):
    cfg = config(tmp_path, {"FAKE_MODE": "ok"}, {"FAKE_MODE": "ok"})
    code, rec, run_dir = run(tmp_path, cfg, python=slow_check_python(tmp_path))
    assert code == 0 and rec["passed"] is True
    assert rec["preflight"]["checked"] == 2 and rec["preflight"]["problems"] == []
    assert rec["preflight"]["cached"] is False and rec["preflight"]["seconds"] >= CHECK_SECONDS - 0.5
    cache = json.loads((tmp_path / "results" / ".preflight-cache.json").read_text())
    assert len(cache["keys"]) == 1
