"""Unexpected errors, malformed engine answers and unwritable results folders are data.

A FAKE server (tests/fake_vllm.py) stands in for the engine: the real one cannot be
made to raise in a chosen stage, answer malformed JSON or fill the disk on demand.
The tasks are evalrun's synthetic arithmetic set (no GSM8K needed).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

import harness.analysis.comparison as comparison_mod
import harness.engine.client as client_mod
import harness.runner as runner_mod
import harness.tasks.judging as judging_mod
from harness.calibrate import describe_error_runs
from harness.cli import main
from harness.engine.client import parse_completion
from harness.engine.info import EngineInfoError, read_engine_facts
from harness.engine.server import processes
from harness.records import atomic
from harness.records.run_record import load_run
from harness.report.calibration import render_calibration_markdown, summarize

FAKE = Path(__file__).resolve().parents[1] / "fake_vllm.py"
REPO = Path(__file__).resolve().parents[2]


def config(tmp_path: Path, ref_env: dict | None = None, spec_env: dict | None = None, n: int = 6,
           gates: str = "") -> Path:
    text = textwrap.dedent(
        f"""\
        model: fake-model
        startup_max_wait_seconds: 30
        request_timeout_seconds: 30
        max_concurrency: 2
        variants:
          reference:
            env: {json.dumps(ref_env or {"FAKE_MODE": "ok"})}
          spec:
            speculative_config: {{method: mtp, num_speculative_tokens: 2}}
            env: {json.dumps(spec_env or {"FAKE_MODE": "ok"})}
        tasks:
          gsm8k: {{kind: synthetic, num_questions: {n}, num_fewshot: 1, max_tokens: 8}}
        comparisons:
          - {{baseline: reference, candidate: spec}}
        {gates}"""
    )
    p = tmp_path / "fake.yaml"
    p.write_text(text)
    return p


def run_cli(tmp_path: Path, cfg: Path, *extra: str) -> int:
    return main(["--config", str(cfg), "--python", str(FAKE), "--results-dir", str(tmp_path / "results"),
                 "--run-id", "r", "--quiet", "--no-baseline", *extra])


def servers_gone(rec: dict) -> bool:
    """No server process evalrun started is alive (exited, or a zombie awaiting its parent)."""
    for v in rec["configs"][0]["variants"].values():
        pid = (v.get("server") or {}).get("pid")
        if pid is None or not psutil.pid_exists(pid):
            continue
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return not processes().unstopped() and not [s for s in processes().live_servers() if s.alive()]


# --------------------------------------------------------------------------- client


@pytest.mark.parametrize("body, field", [
    ({"choices": [{"text": 5, "token_ids": [1], "finish_reason": "stop"}]}, "choices.0.text"),
    ({"choices": [{"text": "a", "token_ids": "1 2", "finish_reason": "stop"}]}, "choices.0.token_ids"),
    ({"choices": [{"text": "a", "token_ids": [1, True]}]}, "choices.0.token_ids.1"),
    ({"choices": [{"text": "a", "finish_reason": 3}]}, "choices.0.finish_reason"),
    ({"choices": [{"text": "a", "stop_reason": [1]}]}, "choices.0.stop_reason"),
    ({"choices": []}, "choices"),
    ({"choices": [{"token_ids": [1]}]}, "choices.0.text"),
    ([{"text": "a"}], "body"),
])
def test_malformed_completion_names_the_field(body, field):
    with pytest.raises(ValueError) as e:
        parse_completion(json.dumps(body).encode())
    assert str(e.value).startswith(field + ":"), str(e.value)


def test_wellformed_completion_keeps_every_field():
    c = parse_completion(json.dumps({"id": "x", "choices": [{
        "text": " #### 5", "token_ids": [5, 6], "finish_reason": "stop", "stop_reason": "\n\n", "logprobs": None,
    }]}).encode())
    assert (c.text, c.token_ids, c.finish_reason, c.stop_reason) == (" #### 5", [5, 6], "stop", "\n\n")
    assert parse_completion(b'{"choices": [{"text": "", "stop_reason": 151645}]}').stop_reason == 151645
    with pytest.raises(ValueError, match="not JSON"):
        parse_completion(b"<html>502</html>")


@pytest.mark.usefixtures("capsys")  # the run's output is captured, not shown
def test_two_malformed_answers_of_twenty_fail_the_error_rate_gate_and_the_run_goes_on(tmp_path):
    cfg = config(tmp_path, spec_env={"FAKE_MODE": "ok", "FAKE_MALFORMED": "4,11"}, n=20)
    code = run_cli(tmp_path, cfg)
    rec = load_run(tmp_path / "results" / "r")
    assert code == 1 and rec.exit_code == 1 and rec.status == "completed" and rec.error is None
    c = rec.configs[0]
    ref, spec = c.variants["reference"].tasks["gsm8k"], c.variants["spec"].tasks["gsm8k"]
    assert (ref.num_requests, ref.error_count) == (20, 0)
    assert (spec.num_requests, spec.error_count, spec.error_rate) == (20, 2, 0.1)
    assert spec.scored["flexible-numeric"] == 18          # never scored as wrong answers
    samples = [json.loads(x) for x in (tmp_path / "results" / "r" / spec.samples).read_text().splitlines()]
    errors = sorted(s["error"] for s in samples if s["error"])
    assert len(errors) == 2 and all("malformed response" in e for e in errors)
    assert any("choices.0.text: Input should be a valid string (got 5)" in e for e in errors)
    assert any("choices.0.token_ids: Input should be a valid list (got '5 6 7 8')" in e for e in errors)
    failed = [g for g in rec.gates() if g.passed is False]
    assert [(g.kind, g.variant) for g in failed] == [("max_error_rate", "spec")]   # the only failure
    assert failed[0].observed == pytest.approx(0.1)
    assert servers_gone(rec.model_dump(mode="json"))


@pytest.mark.parametrize("env, expect", [
    ({"FAKE_MALFORMED_INFO": "list"}, "/server_info is not a JSON object (got list)"),
    ({"FAKE_MALFORMED_INFO": "sched"}, "vllm_config.scheduler_config is not a mapping (got str"),
    ({"FAKE_MALFORMED_VERSION": "1"}, "cannot read the engine's version from /version"),
])
def test_malformed_engine_info_is_the_variants_engine_error(tmp_path, env, expect):
    code = run_cli(tmp_path, config(tmp_path, spec_env={"FAKE_MODE": "ok", "VLLM_SERVER_DEV_MODE": "1", **env}))
    rec = load_run(tmp_path / "results" / "r")
    spec = rec.configs[0].variants["spec"]
    assert rec.status == "completed" and code == 1       # variant_effective cannot pass without the facts
    assert expect in (spec.engine_error or ""), spec.engine_error
    assert spec.tasks["gsm8k"].error_count == 0           # the requests still ran
    eff = [g for g in rec.gates() if g.kind == "variant_effective" and g.variant == "spec"]
    assert eff and eff[0].passed is False


def test_garbage_metrics_is_the_tasks_metrics_error(tmp_path):
    code = run_cli(tmp_path, config(tmp_path, spec_env={"FAKE_MODE": "ok", "FAKE_METRICS": "garbage"}))
    rec = load_run(tmp_path / "results" / "r")
    t = rec.configs[0].variants["spec"].tasks["gsm8k"]
    assert rec.status == "completed" and code == 1
    assert t.spec_decode is None and "cannot parse Prometheus text" in (t.spec_decode_error or "")


def test_engine_facts_type_checks():
    ok = {"vllm_config": {"scheduler_config": {"async_scheduling": False}, "model_config": {"max_model_len": 64}}}
    assert read_engine_facts(ok, "0.32.0", "c/v").max_model_len == 64
    bad = [
        ({"vllm_config": {"scheduler_config": {"async_scheduling": "yes"}}}, "async_scheduling is not bool"),
        ({"vllm_config": {"scheduler_config": {"async_scheduling": True}, "model_config": {"max_model_len": True}}},
         "max_model_len is not int"),
        ({"vllm_config": {"scheduler_config": {"async_scheduling": True},
                          "speculative_config": {"num_speculative_tokens": "2"}}}, "num_speculative_tokens is not int"),
    ]
    for info, msg in bad:
        with pytest.raises(EngineInfoError, match=msg):
            read_engine_facts(info, "0.32.0", "c/v")
    with pytest.raises(EngineInfoError, match="'version' is not a string"):
        read_engine_facts(ok, 32, "c/v")


# --------------------------------------------------------------------------- unexpected errors


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
    "scoring": (lambda mp: mp.setattr(runner_mod, "score_task", _raise_on_call(runner_mod.score_task, 2,
                                                                               ZeroDivisionError("division by zero"))),
                "spec", "gsm8k", "builtins.ZeroDivisionError"),
    "statistics": (lambda mp: mp.setattr(comparison_mod, "output_match", _raise_on_call(
                       comparison_mod.output_match, 1, ValueError("math domain error"))),
                   "reference->spec", "gsm8k", "builtins.ValueError"),
    "gates": (lambda mp: mp.setattr(runner_mod, "evaluate_gates", _raise_on_call(runner_mod.evaluate_gates, 1,
                                                                                 KeyError("min_output_match"))),
              None, None, "builtins.KeyError"),
    "writing": (lambda mp: mp.setattr(runner_mod, "write_jsonl", _raise_on_call(
                    runner_mod.write_jsonl, 2, OSError(errno.EACCES, "Permission denied"))),
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

    monkeypatch.setattr(runner_mod, "render_markdown", boom)
    monkeypatch.setattr(runner_mod, "write_junit", boom)
    code = run_cli(tmp_path, config(tmp_path))
    rec = load_run(tmp_path / "results" / "r")
    assert code == 0 and rec.status == "completed" and rec.passed is True
    err = capsys.readouterr().err
    assert "summary.md not written: RuntimeError: template broke" in err
    assert "junit.xml not written: RuntimeError: template broke" in err
    assert (tmp_path / "results" / "r" / "summary.html").is_file()


# --------------------------------------------------------------------------- results folder


def test_full_disk_mid_run_keeps_the_good_record_and_no_partial_file(tmp_path, monkeypatch, capsys):
    real = atomic.write_atomic
    runs = {"n": 0, "measured": False}

    def full_disk_after_first_record(path, data, encoding="utf-8"):
        # the disk fills right after the first record that holds the task's measurement
        # (the record is also written at the start, status running, with no config yet)
        if Path(path).name != "run.json":
            return real(path, data, encoding)
        runs["n"] += 1
        if not runs["measured"]:
            doc = json.loads(data)
            runs["measured"] = any("gsm8k" in v.get("tasks", {})
                                   for c in doc["configs"] for v in c["variants"].values())
            return real(path, data, encoding)

        def no_space(fd):
            raise OSError(errno.ENOSPC, "No space left on device")

        with monkeypatch.context() as m:
            m.setattr(os, "fsync", no_space)
            return real(path, data, encoding)

    monkeypatch.setattr(atomic, "write_atomic", full_disk_after_first_record)
    code = run_cli(tmp_path, config(tmp_path))
    run_dir = tmp_path / "results" / "r"
    assert code == 2 and runs["n"] >= 4                   # start, the task, then failing: _finish, the error record
    err = capsys.readouterr().err
    assert str(run_dir) in err and "No space left on device" in err and "Traceback" not in err
    rec = load_run(run_dir)                               # the first, good record is untouched
    measured = [v for v in rec.configs[0].variants.values() if "gsm8k" in v.tasks]
    assert rec.status == "running" and measured and measured[0].tasks["gsm8k"].num_requests == 6
    assert not [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")]


def test_write_atomic_failure_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "run.json"
    atomic.write_atomic(target, '{"good": true}\n')
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~atomic._umask())

    def refuse(src, dst):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(atomic.os, "replace", refuse)
    with pytest.raises(OSError) as e:
        atomic.write_atomic(target, '{"partial": ')
    assert e.value.errno == errno.EROFS and e.value.filename == str(target)
    monkeypatch.undo()
    assert target.read_text() == '{"good": true}\n' and sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_results_folder_that_cannot_be_created_stops_before_any_server(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code = main(["--config", str(config(tmp_path)), "--python", str(FAKE), "--results-dir", str(blocker / "results"),
                 "--run-id", "r", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and f"results folder {blocker / 'results'}: cannot be created" in err
    assert "starting the vLLM server" not in err and "Traceback" not in err


def test_results_folder_without_free_space_stops_before_any_server(tmp_path, monkeypatch, capsys):
    real = shutil.disk_usage
    monkeypatch.setattr(atomic.shutil, "disk_usage", lambda p: real(p)._replace(free=5 * 2**20))
    code = run_cli(tmp_path, config(tmp_path))
    err = capsys.readouterr().err
    assert code == 2 and f"results folder {tmp_path / 'results'}: only 5.0 MiB free" in err
    assert not (tmp_path / "results" / "r").exists()     # no run folder, no server


# --------------------------------------------------------------------------- lm-eval that does not import


def test_lm_eval_that_does_not_import_is_not_run_never_a_crash(tmp_path):
    """A broken lm-eval (here: its import blocked) makes lm-eval's pipelines NOT RUN;
    evalrun's own pipelines are scored and the run ends normally."""
    cfg = config(tmp_path, gates="gates: {accuracy_pipeline: strict-match, accuracy_threshold: 0.1}\n")
    script = textwrap.dedent(f"""\
        import sys
        sys.modules["lm_eval"] = None          # `import lm_eval` raises ImportError
        from harness.cli import main
        sys.exit(main({["--config", str(cfg), "--python", str(FAKE), "--results-dir", str(tmp_path / "results"),
                        "--run-id", "r", "--quiet", "--no-baseline"]!r}))
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "Traceback" not in p.stderr, p.stderr
    rec = load_run(tmp_path / "results" / "r")
    assert rec.status == "completed" and p.returncode == rec.exit_code
    assert rec.provenance.lm_eval.pipelines == [] and "cannot build its gsm8k task" in rec.provenance.lm_eval.error
    t = rec.configs[0].variants["spec"].tasks["gsm8k"]
    assert "strict-match" not in t.accuracy and t.accuracy["flexible-numeric"] is not None
    reading = [g for g in rec.gates() if "strict-match" in g.detail]
    assert reading and all(g.passed is None for g in reading), [(g.id, g.passed, g.detail) for g in rec.gates()]
