"""Diff and calibration read every task's own answer pipelines from its record: an
``lm_eval`` task is scored under lm-eval's filters and metrics (here ``acc``
and ``acc_norm``), which its record lists in ``lm_eval.pipelines``; a ``gsm8k`` task
under the ``#### N`` format's four. Before, both reports walked GSM8K's four names only
and left an lm-eval task's figures out.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.records.run_record import load_run
from harness.report.calibration import render_calibration_markdown, summarize
from harness.report.diff import diff_runs
from harness.report.diff_render import render_diff_markdown
from harness.tasks.answers import GSM8K_PIPELINES
from tests.record_factory import complete_record

N = 10
LM_PIPES = ["acc", "acc_norm"]


def _sample(task: str, j: int, correct: dict[str, bool]) -> dict:
    return {"config": "cfg", "variant": "reference", "task": task, "question_id": f"{task}/test/{j}",
            "prompt_hash": f"h{j}", "gold": "A", "completion": "A", "token_ids": None, "finish_reason": None,
            "answers": {p: "A" for p in correct}, "correct": correct, "error": None, "attempts": 1,
            "latency_s": 0.0}


def _write_run(root: Path, run_id: str, right: int) -> Path:
    """A run of one variant with an lm-eval task (``mmlu``) and a GSM8K task (``gsm8k``),
    ``right`` of :data:`N` questions right under every pipeline."""
    run_dir = root / run_id
    tasks = {}
    for task, pipes in (("mmlu", LM_PIPES), ("gsm8k", ["strict-numeric", "flexible-numeric"])):
        rows = [_sample(task, j, {p: j < right for p in pipes}) for j in range(N)]
        rel = f"samples/cfg/reference/{task}.jsonl"
        (run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / rel).write_text("".join(json.dumps(r) + "\n" for r in rows))
        tasks[task] = {"status": "ran", "samples": rel, "num_requests": N,
                       "accuracy": {p: right / N for p in pipes}, "correct": {p: right for p in pipes},
                       "scored": {p: N for p in pipes}}
    tasks["mmlu"]["lm_eval"] = {"task": {"lm_eval_task": "mmlu"}, "results": None, "pipelines": LM_PIPES}
    cfg = {"name": "cfg", "pipeline": "flexible-numeric",
           "tasks": {"mmlu": {"kind": "lm_eval", "lm_eval_task": "mmlu"}, "gsm8k": {"kind": "gsm8k"}},
           "variants": {"reference": {"engine": None, "error": None, "tasks": tasks}}}
    rec = {"run_id": run_id, "status": "completed", "passed": True, "exit_code": 0, "configs": [cfg]}
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps(complete_record(rec)))
    return run_dir


def test_diff_shows_an_lm_eval_tasks_own_pipelines(tmp_path):
    a, b = _write_run(tmp_path, "a", 8), _write_run(tmp_path, "b", 6)
    d = diff_runs(a, b)
    by_task = {t.task: t for t in d.tasks}
    assert list(by_task["mmlu"].accuracy) == LM_PIPES
    acc = by_task["mmlu"].accuracy["acc_norm"]
    assert (acc.a_correct, acc.a_scored, acc.b_correct, acc.b_scored) == (8, N, 6, N)
    assert acc.paired and sorted(acc.lost) == ["mmlu/test/6", "mmlu/test/7"]
    # a GSM8K task keeps the four pipelines of its kind, lm-eval's absent ones included
    assert tuple(by_task["gsm8k"].accuracy) == GSM8K_PIPELINES
    assert by_task["gsm8k"].accuracy["strict-match"].a_scored == 0
    md = render_diff_markdown(d)
    assert "acc_norm" in md


def test_calibration_shows_an_lm_eval_tasks_own_pipelines(tmp_path):
    runs = [(load_run(p), p) for p in (_write_run(tmp_path, f"run{i}", k) for i, k in ((1, 8), (2, 6)))]
    sm = summarize(runs, k=3.0)
    (c,) = sm["configs"]
    by_task = {e["task"]: e for e in c["tasks"]}
    # the lm-eval task's own pipelines, then the config's gate pipeline it has no figure of
    assert list(by_task["mmlu"]["accuracy"]) == LM_PIPES + ["flexible-numeric"]
    assert by_task["mmlu"]["accuracy"]["acc"]["values"] == [0.8, 0.6]
    assert by_task["mmlu"]["accuracy"]["flexible-numeric"]["values"] == [None, None]
    assert tuple(by_task["gsm8k"]["accuracy"]) == GSM8K_PIPELINES
    assert "acc_norm" in render_calibration_markdown(sm)
