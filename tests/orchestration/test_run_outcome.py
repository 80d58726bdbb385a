"""The run's place across threads (harness/run/context.py ``Place``): a variant's thread
notes where an exception happened, the thread that records it takes that place. The run's
outcomes, through runs on the FAKE server (tests/fake_vllm.py; the real engine cannot be
made to raise in a chosen stage): an unexpected exception in each stage is a kept error
record that every reader of records takes, and a report that cannot be rendered is a
warning. Outcomes of signals are in test_signal_outcomes.py."""

from __future__ import annotations

import errno
import json
import threading

import pytest

import harness.analysis.comparison as comparison_mod
import harness.engine.client as client_mod
import harness.run.config_steps as config_steps_mod
import harness.run.outcome as run_outcome_mod
import harness.run.variant_steps as variant_steps_mod
import harness.tasks.judging as judging_mod
from harness.cli import main
from harness.cli.calibrate import describe_error_runs
from harness.records.run_record import load_run
from harness.report.calibration import render_calibration_markdown, summarize
from harness.run.context import Place
from tests.fake_run import config, run_cli, servers_gone

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)


def test_a_place_noted_in_a_thread_is_the_place_the_recording_thread_takes():
    place = Place()
    place.at("gates", config="c", variant=None, task=None)   # the recording thread's own place
    caught: list[BaseException] = []

    def variant_thread() -> None:
        place.at("scoring", config="c", variant="spec", task="gsm8k")
        try:
            raise ZeroDivisionError("division by zero")
        except ZeroDivisionError as e:
            place.stamp(e)
            place.at("writing", variant="other")   # a later stamp by an outer thread must not replace it
            place.stamp(e)
            caught.append(e)

    t = threading.Thread(target=variant_thread)
    t.start()
    t.join()
    assert (place.stage, place.variant) == ("gates", None)   # one place per thread
    place.restore(caught[0])
    assert (place.stage, place.config, place.variant, place.task) == ("scoring", "c", "spec", "gsm8k")


def test_an_exception_without_a_noted_place_leaves_the_place():
    place = Place()
    place.at("model", config="c")
    place.restore(ValueError("x"))
    assert (place.stage, place.config, place.variant, place.task) == ("model", "c", None, None)


def _raise_for_spec(real, exc):
    """Wrap ``real(config, variant, ...)``: raise ``exc`` when the variant is ``spec``."""

    def wrapper(*a, **kw):
        if "spec" in a[:3]:
            raise exc
        return real(*a, **kw)

    return wrapper


def _raise_on_call(real, n, exc):
    """Wrap ``real``: the n-th call (1-based) raises ``exc``."""
    calls = {"n": 0}

    def wrapper(*a, **kw):
        calls["n"] += 1
        if calls["n"] == n:
            raise exc
        return real(*a, **kw)

    return wrapper


TYPE_ERROR = TypeError("expected string or bytes-like object, got 'int'")

#: stage -> (patch target, wrapper factory, expected variant, expected task, expected exception type)
STAGES = {
    "judging": (lambda mp: mp.setattr(judging_mod, "judge_completions",
                                      _raise_for_spec(judging_mod.judge_completions, TYPE_ERROR)),
                "spec", "gsm8k", "builtins.TypeError"),
    "client": (lambda mp: mp.setattr(client_mod.AsyncCompletionClient, "complete",
                                     _raise_on_call(client_mod.AsyncCompletionClient.complete, 8,
                                                    AttributeError("'NoneType' object has no attribute 'post'"))),
               "spec", "gsm8k", "builtins.AttributeError"),
    "scoring": (lambda mp: mp.setattr(variant_steps_mod, "score_task", _raise_on_call(
                    variant_steps_mod.score_task, 2, ZeroDivisionError("division by zero"))),
                "spec", "gsm8k", "builtins.ZeroDivisionError"),
    "statistics": (lambda mp: mp.setattr(comparison_mod, "output_match", _raise_on_call(
                       comparison_mod.output_match, 1, ValueError("math domain error"))),
                   "reference->spec", "gsm8k", "builtins.ValueError"),
    "gates": (lambda mp: mp.setattr(config_steps_mod, "evaluate_gates", _raise_on_call(
                  config_steps_mod.evaluate_gates, 1, KeyError("min_output_match"))),
              None, None, "builtins.KeyError"),
    "writing": (lambda mp: mp.setattr(variant_steps_mod, "write_jsonl", _raise_on_call(
                    variant_steps_mod.write_jsonl, 2, OSError(errno.EACCES, "Permission denied"))),
                "spec", "gsm8k", "builtins.PermissionError"),
}


@pytest.mark.parametrize("stage", list(STAGES))
def test_unexpected_exception_in_each_stage_is_a_kept_error_record(tmp_path, monkeypatch, capsys, stage):
    patch, variant, task, etype = STAGES[stage]
    patch(monkeypatch)
    code = run_cli(tmp_path, config(tmp_path))
    run_dir = tmp_path / "results" / "r"
    rec = load_run(run_dir)                              # the record is there and valid
    assert code == 2 and rec.exit_code == 2 and rec.status == "error" and rec.passed is None
    e = rec.error
    assert (e.type, e.stage, e.config, e.variant, e.task) == (etype, stage, "fake", variant, task)
    assert e.traceback.startswith("Traceback (most recent call last)") and e.message in e.traceback
    assert e.message in (run_dir / "logs" / "evalrun-error.log").read_text()
    # what was measured before it is kept: the reference variant's task and its samples
    ref = rec.configs[0].variants["reference"].tasks["gsm8k"]
    assert ref.num_requests == 6 and len((run_dir / ref.samples).read_text().splitlines()) == 6
    if stage in ("statistics", "gates"):                  # both variants ran before the comparison
        assert rec.configs[0].variants["spec"].tasks["gsm8k"].num_requests == 6
    assert servers_gone(json.loads((run_dir / "run.json").read_text()))
    err = capsys.readouterr().err
    assert "ERROR" in err and str(run_dir / "run.json") in err and e.message in err
    assert f"stage {stage}" in err and "Traceback" not in err   # the traceback is in the record, not the terminal
    if stage == "judging":  # the engine's answers of the task whose judging raised are kept, unjudged
        raw_file = run_dir / "samples" / "fake" / "spec" / "gsm8k.raw.jsonl"
        raw = [json.loads(x) for x in raw_file.read_text().splitlines()]
        assert len(raw) == 6 and all(r["text"] == " 2 + 3 = 5 #### 5" and r["token_ids"] == [5, 6, 7, 8] for r in raw)
    md = (run_dir / "summary.md").read_text()
    assert md.startswith("# evalrun run r: ERROR") and e.describe() in md


def test_error_record_is_read_by_diff_history_merge_calibrate(tmp_path, monkeypatch, capsys):
    STAGES["judging"][0](monkeypatch)
    assert run_cli(tmp_path, config(tmp_path), "--shard", "1/1") == 2
    monkeypatch.undo()
    run_dir = tmp_path / "results" / "r"
    capsys.readouterr()
    what = "unexpected builtins.TypeError ended it (stage judging, config fake, variant spec, task gsm8k)"
    assert main(["diff", str(run_dir), str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "has status error" in err and what in err and "got 'int'" in err
    code = main(["merge", str(run_dir), "--results-dir", str(tmp_path / "merged"), "--run-id", "m"])
    err = capsys.readouterr().err
    line = "status error: builtins.TypeError: expected string or bytes-like object, got 'int' (stage judging"
    assert code == 2 and line in err
    merged = load_run(tmp_path / "merged" / "m")
    assert merged.status == "error" and merged.error.stage == "judging" and merged.exit_code == 2
    assert main(["history", str(tmp_path / "merged")]) == 0
    out = capsys.readouterr()
    assert line in out.err and "| ERROR" in out.out and "reference" in out.out   # the kept task, verdict ERROR

    rec = load_run(run_dir)
    lines = describe_error_runs([rec])
    assert len(lines) == 1 and line in lines[0] and "1 task result(s) measured before it are kept" in lines[0]
    md = render_calibration_markdown(summarize([(rec, run_dir), (rec, run_dir)]))
    assert line in md and "its figures are partial" in md


def test_report_that_cannot_be_rendered_is_a_warning_never_the_verdict(tmp_path, monkeypatch, capsys):
    def boom(*a, **kw):
        raise RuntimeError("template broke")

    monkeypatch.setattr(run_outcome_mod, "render_markdown", boom)
    monkeypatch.setattr(run_outcome_mod, "write_junit", boom)
    code = run_cli(tmp_path, config(tmp_path))
    rec = load_run(tmp_path / "results" / "r")
    assert code == 0 and rec.status == "completed" and rec.passed is True
    err = capsys.readouterr().err
    assert "summary.md not written: RuntimeError: template broke" in err
    assert "junit.xml not written: RuntimeError: template broke" in err
    assert (tmp_path / "results" / "r" / "summary.html").is_file()
