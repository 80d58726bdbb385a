"""The typed contract across stages: schema-1 records and baselines name evalrun's
pipelines anew, and a per-task setting reaches every gate of that task (the plan is the
single source of gates)."""

from __future__ import annotations

import json

import pytest

from harness.analysis.gatekinds.accuracy_floor import AccuracyFloor
from harness.analysis.gatekinds.baseline_accuracy_drop import BaselineAccuracyDrop
from harness.analysis.gatekinds.max_accuracy_drop import MaxAccuracyDrop
from harness.analysis.gates import evaluate_gates, judged_baseline_gates
from harness.analysis.measurements import Measurements
from harness.analysis.scoring import score_task
from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.records.baselines import BaselineDoc, load_baseline
from harness.records.run_record import parse_run
from harness.records.samples import Sample
from tests.record_factory import complete_record

CFG = """\
name: c
model: m
false_alarm_budget: null
variants:
  reference: {}
  spec: {speculative_config: {method: mtp, num_speculative_tokens: 2}}
tasks:
  t1: {num_questions: 10, gates: {accuracy_pipeline: strict-numeric}}
  t2: {num_questions: 10}
gates:
  accuracy_threshold: 0.5
  tolerance: 0.0
  baseline_max_accuracy_drop: 0.05
comparisons:
  - {baseline: reference, candidate: spec, max_accuracy_drop: 0.05}
"""


def sample(variant, task, i, strict, flexible):
    return Sample("c", variant, task, f"{task}/{i}", f"h{i}", "5", completion="x", token_ids=(1, 2),
                  finish_reason="stop", answers={"strict-numeric": None, "flexible-numeric": "5"},
                  correct={"strict-numeric": strict, "flexible-numeric": flexible})


def test_task_pipeline_reaches_floor_paired_and_baseline_gates(tmp_path):
    (tmp_path / "c.yaml").write_text(CFG)
    (cp,) = build_plan([load_config(tmp_path / "c.yaml")]).configs
    # reference: strict right on 8 of 10, flexible right on all 10
    # spec:      strict right on 4 of 10, flexible right on all 10
    ref = {t: [sample("reference", t, i, i < 8, True) for i in range(10)] for t in ("t1", "t2")}
    spec = {t: [sample("spec", t, i, i < 4, True) for i in range(10)] for t in ("t1", "t2")}

    m = Measurements()
    for v, by in (("reference", ref), ("spec", spec)):
        for t, xs in by.items():
            m.task_record(v, t).samples = xs
            m.task_record(v, t).score = score_task(xs)
    res = {g.id: g for g in evaluate_gates(cp.gates, m)}
    # the planned gates carry the task's pipeline
    floors = {g.task: g.pipeline for g in cp.gates if isinstance(g, AccuracyFloor)}
    drops = {g.task: g.pipeline for g in cp.gates if isinstance(g, MaxAccuracyDrop)}
    based = {g.task: g.pipeline for g in cp.baseline_gates if isinstance(g, BaselineAccuracyDrop)}
    assert floors == drops == based == {"t1": "strict-numeric", "t2": "flexible-numeric"}
    # floor: spec t1 reads strict-numeric 4/10 (fails 0.5), t2 flexible-numeric 10/10
    assert res["c/spec/t1/accuracy_floor"].observed == pytest.approx(0.4)
    assert res["c/spec/t1/accuracy_floor"].passed is False
    assert res["c/spec/t2/accuracy_floor"].observed == pytest.approx(1.0)
    # paired drop: t1 strict 0.8 -> 0.4 = 0.4 (4 right only in reference); t2 flexible: 0
    assert res["c/reference->spec/t1/max_accuracy_drop"].observed == pytest.approx(0.4)
    assert set(res["c/reference->spec/t1/max_accuracy_drop"].questions) == {"t1/4", "t1/5", "t1/6", "t1/7"}
    assert res["c/reference->spec/t2/max_accuracy_drop"].observed == pytest.approx(0.0)
    # baseline gates: a baseline where spec was right everywhere under both pipelines
    qs = {f"{t}/{i}": {"prompt_hash": f"h{i}", "gold": "5",
                       "correct": {"strict-numeric": True, "flexible-numeric": True}}
          for t in ("t1", "t2") for i in range(10)}
    doc = {"schema": "evalrun-baseline/2", "config": "c", "written_at": "x", "pipeline": "flexible-numeric",
           "source_run": {"run_id": "good", "path": "/x"},
           "variants": {"spec": {"tasks": {t: {
               "num_requests": 10, "error_count": 0, "accuracy": {}, "accuracy_ci": {}, "correct": {}, "scored": {},
               "questions": {k: v for k, v in qs.items() if k.startswith(t + "/")}} for t in ("t1", "t2")}}}}
    m.baseline = BaselineDoc.model_validate(doc)
    b = {g.id: g for g in judged_baseline_gates(cp.baseline_gates, m)}
    # t1 under strict-numeric: 10/10 -> 4/10 = drop 0.6; t2 under flexible-numeric: no drop
    assert b["c/spec/t1/baseline_accuracy_drop"].observed == pytest.approx(0.6)
    assert b["c/spec/t1/baseline_accuracy_drop"].passed is False
    assert b["c/spec/t2/baseline_accuracy_drop"].observed == pytest.approx(0.0)
    assert b["c/spec/t2/baseline_accuracy_drop"].passed is True


def test_v1_records_and_baselines_name_evalrun_pipelines_anew(tmp_path):
    """Schema 1 called evalrun's own pipelines strict-match / flexible-extract; those
    names now mean lm-eval's filters, so reading a v1 file renames them."""
    v1 = complete_record({"run_id": "old", "configs": [{"name": "c", "pipeline": "flexible-extract", "variants": {
        "v": {"tasks": {"t": {"accuracy": {"strict-match": 0.5, "flexible-extract": 0.75}}}}}}]})
    v1["schema_version"] = 1
    rec = parse_run(json.dumps(v1), "old/run.json")
    assert rec.configs[0].pipeline == "flexible-numeric"
    assert rec.configs[0].variants["v"].tasks["t"].accuracy == {"strict-numeric": 0.5, "flexible-numeric": 0.75}
    b1 = {"schema": "evalrun-baseline/1", "config": "c", "written_at": "x", "pipeline": "strict-match",
          "source_run": {"run_id": "good", "path": "/x"}, "variants": {"v": {"tasks": {"t": {
              "num_requests": 1, "error_count": 0, "accuracy": {"flexible-extract": 1.0}, "accuracy_ci": {},
              "correct": {"flexible-extract": 1}, "scored": {"flexible-extract": 1},
              "questions": {"q": {"prompt_hash": "h", "gold": "5", "correct": {"flexible-extract": True}}}}}}}}
    (tmp_path / "c.json").write_text(json.dumps(b1))
    doc = load_baseline(tmp_path / "c.json")
    assert doc.pipeline == "strict-numeric" and doc.task("v", "t").correctness("flexible-numeric") == {"q": ("h", True)}
