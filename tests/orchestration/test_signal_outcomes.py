"""A stopping signal at any moment of the end of a run gives one outcome: the exit code,
the last line on the terminal and ``run.json`` agree, with no traceback. A record whose
verdict was on disk before the signal keeps it; otherwise the run is INTERRUPTED (2).

The signals are real (``os.kill`` of this process, through evalrun's own handlers);
what is replaced is the measuring part of the run (no server: no config result, so
the verdict of the empty gate list is PASSED) and the stage at which the signal comes
(the stage's function sends the signal, then does its work). The real-time version
with the FAKE server and a separate evalrun process is in test_ci_signals.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import harness.cli.app as cli_app
import harness.cli.calibrate as calibrate
import harness.cli.selfcheck as selfcheck
import harness.config.select as select
import harness.records.baselines as baselines
import harness.records.recorder as recorder_mod
import harness.records.run_folder as run_folder
import harness.report.summary as summary_mod
import harness.run.outcome as run_outcome
import harness.run.runner as runner
import harness.tasks.lm_eval_gsm8k as lm
from harness.cli import main

from ..conftest import default_signals
from .test_runner_fake_server import FAKE, config

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

#: the word each record state must be said with (the README's table of outcomes)
WORD = {("completed", True): "PASSED", ("interrupted", None): "INTERRUPTED", ("error", None): "ERROR"}


@pytest.fixture(autouse=True)
def _no_servers(monkeypatch):
    """The run without its measuring part: no data check, no pre-launch check, no
    config (so no server), lm-eval's provenance read as absent."""
    monkeypatch.setattr(runner, "_short_data", lambda *a, **k: False)
    monkeypatch.setattr(runner, "_preflight", lambda *a, **k: (False, {}, None))
    monkeypatch.setattr(runner, "_warm_imports", lambda: None)
    monkeypatch.setattr(runner, "_config_results", lambda *a, **k: iter(()))

    monkeypatch.setattr(lm, "lm_eval_info", lambda: {"version": None, "gsm8k_task_version": None,
                                                     "gsm8k_config": None, "pipelines": [], "error": "stub"})
    olds = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)}
    yield
    for s, h in olds.items():
        signal.signal(s, h)


def _signal_at(monkeypatch, module, name: str, sig: int = signal.SIGTERM, when=lambda: True) -> list[int]:
    """Make ``module.name`` send ``sig`` to this process first (when ``when()``), then do
    its work; returns the list that counts the signals sent."""
    original = getattr(module, name)
    sent: list[int] = []

    def stage(*a, **k):
        if when():
            sent.append(sig)
            os.kill(os.getpid(), sig)
        return original(*a, **k)

    monkeypatch.setattr(module, name, stage)
    return sent


def _run(tmp_path: Path, capsys, *extra: str) -> tuple[int, dict, str, Path]:
    code = main(["--config", str(config(tmp_path, {}, {})), "--python", str(FAKE), "--results-dir",
                 str(tmp_path / "results"), "--run-id", "r", "--quiet", *extra])
    run_dir = tmp_path / "results" / "r"
    err = capsys.readouterr().err
    return code, json.loads((run_dir / "run.json").read_text()), err, run_dir


def _agree(code: int, rec: dict, err: str) -> str:
    """Exit code, record and last line agree, and no traceback; the outcome word."""
    word = WORD[(rec["status"], rec["passed"])]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert code == rec["exit_code"], (code, rec["exit_code"])
    last = err.strip().splitlines()[-1]
    assert word in last and f"exit {code}" in last, last
    return word


def test_without_a_signal_the_stubbed_run_passes(tmp_path, capsys):
    code, rec, err, run_dir = _run(tmp_path, capsys)
    assert (code, rec["status"], rec["passed"]) == (0, "completed", True)
    assert (run_dir / "summary.html").exists()


@pytest.mark.parametrize("where", ["before", "during"])
def test_a_signal_before_the_verdict_is_on_disk_is_interrupted(tmp_path, capsys, monkeypatch, where):
    if where == "before":
        _signal_at(monkeypatch, run_outcome, "write_final")
    else:  # inside the final write, once the recorder is done
        made: list[recorder_mod.RunRecorder] = []   # the run's recorder (its RunContext holds it)
        init = recorder_mod.RunRecorder.__init__

        def note(self, *a, **k):
            init(self, *a, **k)
            made.append(self)

        monkeypatch.setattr(recorder_mod.RunRecorder, "__init__", note)
        _signal_at(monkeypatch, recorder_mod, "write_run", when=lambda: any(r.done for r in made))
    code, rec, err, run_dir = _run(tmp_path, capsys)
    assert _agree(code, rec, err) == "INTERRUPTED" and code == 2
    assert rec["interrupted_by"] == "SIGTERM"
    assert "# evalrun run r: INTERRUPTED" in (run_dir / "summary.md").read_text()


def test_a_signal_before_the_first_record_is_written_still_leaves_one(tmp_path, capsys, monkeypatch):
    calls = []
    _signal_at(monkeypatch, recorder_mod, "write_run", when=lambda: not calls and not calls.append(1))
    code, rec, err, _ = _run(tmp_path, capsys)
    assert _agree(code, rec, err) == "INTERRUPTED"


@pytest.mark.parametrize("stage", ["summary", "junit", "html", "tables"])
def test_a_signal_after_the_verdict_keeps_it(tmp_path, capsys, monkeypatch, stage):
    module, name = {"summary": (run_outcome, "render_markdown"), "junit": (run_outcome, "write_junit"),
                    "html": (run_outcome, "write_html"), "tables": (summary_mod, "render_terminal")}[stage]
    sent = _signal_at(monkeypatch, module, name)
    code, rec, err, run_dir = _run(tmp_path, capsys, "--junit", str(tmp_path / "copy.xml"))
    assert _agree(code, rec, err) == "PASSED" and code == 0
    assert rec["interrupted_by"] is None
    # the reports CI reads say the kept outcome (written again when the signal cut them short)
    assert "# evalrun run r: PASSED" in (run_dir / "summary.md").read_text()
    for xml in (run_dir / "junit.xml", tmp_path / "copy.xml"):
        text = xml.read_text()   # an interrupted run's JUnit has an error case r/outcome
        assert 'errors="0"' in text and 'failures="0"' in text and "INTERRUPTED" not in text
    if stage in ("summary", "junit"):   # the reports are written again: that second signal changes nothing
        assert len(sent) == 2
    assert (run_dir / "summary.html").exists() == (stage == "tables")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP, signal.SIGQUIT])
def test_every_stopping_signal_during_the_tables_keeps_the_verdict(tmp_path, capsys, monkeypatch, sig):
    _signal_at(monkeypatch, summary_mod, "render_terminal", sig)
    code, rec, err, _ = _run(tmp_path, capsys)
    assert _agree(code, rec, err) == "PASSED" and sig.name in err.strip().splitlines()[-1]


def test_a_signal_while_an_error_is_reported_keeps_the_error(tmp_path, capsys, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("a bug in a stage")

    monkeypatch.setattr(runner, "_config_results", boom)
    _signal_at(monkeypatch, run_outcome, "write_html")
    code, rec, err, _ = _run(tmp_path, capsys)
    assert _agree(code, rec, err) == "ERROR" and rec["error"]["message"] == "a bug in a stage"


def test_a_signal_during_the_baseline_update_keeps_the_verdict(tmp_path, capsys, monkeypatch):
    _signal_at(monkeypatch, baselines, "write_baselines")
    code, rec, err, _ = _run(tmp_path, capsys, "--update-baseline")
    assert _agree(code, rec, err) == "PASSED"
    assert "baseline update) skipped" in err.strip().splitlines()[-1]


def test_a_signal_before_any_run_folder_exists_is_interrupted_without_a_record(tmp_path, capsys, monkeypatch):
    _signal_at(monkeypatch, select, "load_selected")
    code = main(["--config", str(config(tmp_path, {}, {})), "--results-dir", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == "evalrun: interrupted (SIGTERM); INTERRUPTED (exit 2)"
    assert not (tmp_path / "results").exists()


def test_a_signal_at_the_end_of_calibrate_is_interrupted_without_a_traceback(tmp_path, capsys, monkeypatch):
    _signal_at(monkeypatch, calibrate, "_write_summary")
    code = main(["calibrate", "--config", str(config(tmp_path, {}, {})), "--repeat", "2",
                 "--results-dir", str(tmp_path / "results"), "--run-id", "cal", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == "evalrun calibrate: interrupted (SIGTERM); INTERRUPTED (exit 2)"
    assert not (tmp_path / "results" / "cal" / "calibration.json").exists()


def test_a_signal_after_a_repeat_verdict_still_ends_calibrate_as_interrupted(tmp_path, capsys, monkeypatch):
    # the repeat's record keeps PASSED; calibrate's own outcome (no summary) is INTERRUPTED, said last
    _signal_at(monkeypatch, run_outcome, "write_html")
    code = main(["calibrate", "--config", str(config(tmp_path, {}, {})), "--repeat", "2",
                 "--results-dir", str(tmp_path / "results"), "--run-id", "cal", "--quiet"])
    err = capsys.readouterr().err
    rec = json.loads((tmp_path / "results" / "cal" / "run1" / "run.json").read_text())
    assert code == 2 and "Traceback" not in err and rec["status"] == "completed" and rec["exit_code"] == 0
    assert err.strip().splitlines()[-1] == (
        "evalrun calibrate: interrupted (SIGTERM) in run 1 of 2; INTERRUPTED (exit 2)")


def test_a_signal_as_the_run_folder_is_released_keeps_the_verdict(tmp_path, capsys, monkeypatch):
    # after the reports, in run()'s own cleanup: the record is final, the command has not returned

    _signal_at(monkeypatch, run_folder.RunFolderClaim, "release")
    code, rec, err, _ = _run(tmp_path, capsys)
    assert _agree(code, rec, err) == "PASSED"


def test_a_signal_while_the_error_screen_prints_keeps_the_error(tmp_path, capsys, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("a bug in a stage")

    monkeypatch.setattr(runner, "_config_results", boom)
    _signal_at(monkeypatch, cli_app, "say_error")
    code, rec, err, _ = _run(tmp_path, capsys)
    assert _agree(code, rec, err) == "ERROR"


def test_a_signal_while_selfcheck_judges_is_interrupted_without_a_traceback(tmp_path, capsys, monkeypatch):
    _signal_at(monkeypatch, selfcheck, "judge_selfcheck")
    code = main(["selfcheck", "--results-dir", str(tmp_path / "results"), "--run-id", "sc"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == "evalrun selfcheck: interrupted (SIGTERM); INTERRUPTED (exit 2)"
    assert not (tmp_path / "results" / "sc" / "selfcheck.json").exists()


DRIVER = """
import os, signal, sys
import harness.run.runner as runner, harness.report.summary as summary, harness.tasks.lm_eval_gsm8k as lm
from harness.cli import main
runner._short_data = lambda *a, **k: False
runner._preflight = lambda *a, **k: (False, {}, None)
runner._warm_imports = lambda: None
runner._config_results = lambda *a, **k: iter(())
lm.lm_eval_info = lambda: {"version": None, "gsm8k_task_version": None, "gsm8k_config": None,
                           "pipelines": [], "error": "stub"}
tables = summary.render_terminal
def render_terminal(record):
    os.kill(os.getpid(), signal.SIGTERM)
    return tables(record)
summary.render_terminal = render_terminal
sys.exit(main(sys.argv[1:]))
"""


def test_sigterm_during_the_final_tables_exits_with_the_records_code_in_a_real_process(tmp_path):
    """The same stubs in a process of its own: its real exit status (a KeyboardInterrupt
    escaping to the interpreter would make it 130 / -SIGINT with a traceback)."""
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, "--config", str(config(tmp_path, {}, {})), "--results-dir",
         str(tmp_path / "results"), "--run-id", "r", "--quiet"],
        cwd=repo, capture_output=True, text=True, timeout=120, preexec_fn=default_signals,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )
    rec = json.loads((tmp_path / "results" / "r" / "run.json").read_text())
    assert _agree(proc.returncode, rec, proc.stderr) == "PASSED" and proc.returncode == 0
