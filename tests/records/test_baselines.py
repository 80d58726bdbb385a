"""harness.records.baselines: ``--update-baseline`` writes what ran and names what was left out."""

from __future__ import annotations

import json

from harness.records.baselines import write_baselines
from harness.records.samples import Sample, write_jsonl
from tests.record_factory import typed


def _sample(qid, variant="v", task="t"):
    return Sample("c", variant, task, qid, "h" + qid, "5", completion="#### 5", token_ids=(1, 2),
                  finish_reason="stop", answers={"strict-numeric": "5", "flexible-numeric": "5"},
                  correct={"strict-numeric": True, "flexible-numeric": True})


def test_update_baseline_writes_what_ran_and_names_what_was_left_out(tmp_path):
    run_dir = tmp_path / "run"
    write_jsonl(run_dir / "samples/c/v/t.jsonl", [_sample("q0"), _sample("q1")])
    g_pass = {"id": "c/v/t/max_error_rate", "kind": "max_error_rate", "variant": "v", "task": "t", "passed": True,
              "op": "<="}
    g_nr = {"id": "c/v/extra/max_error_rate", "kind": "max_error_rate", "variant": "v", "task": "extra",
            "passed": None, "op": "<=", "detail": "not run: data not available (optional task)"}
    raw = {"run_id": "r1", "configs": [{
        "name": "c", "gates": [g_pass, g_nr], "comparisons": [],
        "variants": {"v": {"tasks": {"t": {"samples": "samples/c/v/t.jsonl", "num_requests": 2}}}},
    }]}
    rec = typed(raw)
    [(name, path, msg)] = write_baselines(rec, run_dir, tmp_path / "b")
    assert path == tmp_path / "b" / "c.json" and path.exists()
    doc = json.loads(path.read_text())
    assert sorted(doc["variants"]["v"]["tasks"]) == ["t"]
    assert sorted(doc["variants"]["v"]["tasks"]["t"]["questions"]) == ["q0", "q1"]
    assert "left out" in msg and "v/extra" in msg and "data not available (optional task)" in msg
    # a failed gate, or a variant whose server failed, still writes nothing
    raw["configs"][0]["gates"][0]["passed"] = False
    assert write_baselines(typed(raw), run_dir, tmp_path / "b2")[0][1] is None
    raw["configs"][0]["gates"][0]["passed"] = True
    raw["configs"][0]["variants"]["v"]["error"] = "server failed to start"
    [(_, p2, m2)] = write_baselines(typed(raw), run_dir, tmp_path / "b3")
    assert p2 is None and "server failed to start" in m2

