"""The run's state and names without a server: the RunContext (harness/run/context.py) that
holds what was module state, the final word written through it (harness/run/outcome.py
``write_final``), every path of a run folder (harness/records/run_folder.py ``RunFolder``) and
the server purposes' names (harness/run/serving.py). Unit tests: no server, no subprocess."""

from __future__ import annotations

from harness.api import new_context
from harness.engine.server import EngineProcesses, processes
from harness.records.recorder import RunRecorder
from harness.records.run_folder import RunFolder
from harness.records.run_record import load_run, write_run
from harness.run.context import RunContext
from harness.run.outcome import write_final
from harness.run.serving import FIRST_PASS, RERUN, SCORING
from tests.record_factory import typed

RECORD = {"run_id": "r", "status": "running", "configs": []}


def test_outside_a_run_the_context_writes_nothing(tmp_path):
    ctx = RunContext(processes=EngineProcesses())
    ctx.checkpoint()
    ctx.interrupt("SIGTERM")
    assert ctx.recorder is None and ctx.last_final is None and not list(tmp_path.iterdir())
    assert ctx.leftover_pids() == []


def test_the_front_door_context_holds_this_processs_registry():
    assert new_context().processes is processes()
    assert new_context().place is not new_context().place  # each run its own place


def test_the_final_word_marks_the_recorder_and_is_the_last_final(tmp_path):
    rec = typed(RECORD)
    ctx = RunContext(processes=EngineProcesses())
    ctx.recorder = RunRecorder(rec, tmp_path)
    ctx.checkpoint()
    assert load_run(tmp_path).status == "running"
    rec.status = "completed"
    write_final(tmp_path, rec, ctx)
    assert ctx.recorder.done and ctx.recorder.final_written and ctx.last_final is ctx.recorder
    ctx.interrupt("SIGTERM")  # after the final word a signal writes nothing
    assert load_run(tmp_path).status == "completed"


def test_without_a_run_in_progress_the_final_word_is_just_written(tmp_path):
    rec = typed(RECORD)
    write_final(tmp_path, rec, None)
    assert load_run(tmp_path).run_id == "r"


def test_every_path_of_a_run_folder_has_one_name(tmp_path):
    f = RunFolder(tmp_path)
    assert f.record == tmp_path / "run.json"
    assert f.claim_file == tmp_path / ".evalrun-claim.json"
    assert f.error_log == tmp_path / "logs" / "evalrun-error.log"
    assert f.log("c", "v") == tmp_path / "logs" / "c" / "v.log"
    assert f.log("c", "v", "rerun") == tmp_path / "logs" / "c" / "v.rerun.log"
    assert f.pid_file("c", "v", "scoring") == tmp_path / "logs" / "c" / "v.scoring.pid.json"
    assert f.plugin("c", "v", "rerun") == tmp_path / "plugin" / "c" / "v.rerun"
    assert f.samples("c", "v", "t") == tmp_path / "samples" / "c" / "v" / "t.jsonl"
    assert f.samples("c", "v", "t", "target_logprobs") == tmp_path / "samples" / "c" / "v" / "t.target_logprobs.jsonl"
    assert f.next_attempt() == 1
    f.attempt(1).mkdir(parents=True)
    assert f.next_attempt() == 2 and f.attempt(2) == tmp_path / "attempts" / "2"


def test_the_walk_over_a_records_tasks_names_each_samples_file(tmp_path):
    rec = typed({"run_id": "r", "status": "completed", "configs": [{
        "name": "c", "variants": {"ref": {"tasks": {"gsm8k": {"samples": "samples/c/ref/gsm8k.jsonl"}}},
                                  "spec": {"tasks": {"gsm8k": {"samples": "samples/c/spec/gsm8k.jsonl"}}}}}]})
    write_run(tmp_path, rec)
    got = [(t.config, t.variant, t.task, t.path) for t in RunFolder(tmp_path).tasks(rec)]
    assert got == [("c", "ref", "gsm8k", tmp_path / "samples/c/ref/gsm8k.jsonl"),
                   ("c", "spec", "gsm8k", tmp_path / "samples/c/spec/gsm8k.jsonl")]
    assert RunFolder(tmp_path).task(rec, "c", "spec", "gsm8k").variant == "spec"
    assert RunFolder(tmp_path).task(rec, "c", "spec", "other") is None
    assert list(RunFolder(tmp_path).tasks(rec, "no-such-config")) == []


def test_a_servers_purpose_names_its_files_and_session():
    assert (FIRST_PASS.label("c/v"), FIRST_PASS.file_stem("v")) == ("c/v", "v")
    assert (RERUN.label("c/v"), RERUN.file_stem("v")) == ("c/v (rerun)", "v.rerun")
    assert (SCORING.label("c/v"), SCORING.file_stem("v"), SCORING.speculative) == ("c/v (scoring)", "v.scoring", False)
