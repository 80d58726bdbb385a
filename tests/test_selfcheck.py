"""Self-check: the clean engine passes every gate, each injected fault is caught by its gate.

The engine test runs ``evalrun selfcheck`` against the real vLLM CPU server with the
trained tiny model and evalrun's fault plugin; the unit tests check the judging on
constructed records.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.record_factory import typed

from harness.selfcheck import judge_selfcheck

from .conftest import require_vllm

REPO = Path(__file__).resolve().parents[1]


def gate(variant, kind, verdict, baseline=None, task="t"):
    gid = f"c/{baseline + '->' if baseline else ''}{variant}/{task}/{kind}"
    return {"id": gid, "kind": kind, "variant": variant, "baseline": baseline, "task": task,
            "verdict": verdict, "passed": {"PASS": True, "FAIL": False}.get(verdict), "detail": "n"}


FAULTS = {"reference": None, "spec": None, "di": "draft-input", "sr": "state-rollback"}


def record(gates):
    return typed({"configs": [{"name": "c", "gates": gates, "variants": {}, "comparisons": []}]})


def good_gates():
    return [
        gate("reference", "accuracy_floor", "PASS"),
        gate("spec", "min_acceptance_length", "PASS"),
        gate("spec", "min_output_match", "PASS", baseline="reference"),
        gate("di", "min_acceptance_length", "FAIL"),
        gate("di", "min_output_match", "PASS", baseline="reference"),
        gate("sr", "min_output_match", "FAIL", baseline="reference"),
        gate("sr", "accuracy_floor", "FAIL"),  # not an expectation either way
    ]


def test_all_expectations_hold():
    checks = judge_selfcheck(record(good_gates()), FAULTS)
    assert len(checks) == 6 and all(c.held for c in checks)


def test_fault_not_caught_is_reported():
    gs = good_gates()
    gs[3] = gate("di", "min_acceptance_length", "PASS")      # the acceptance gate missed the fault
    checks = judge_selfcheck(record(gs), FAULTS)
    bad = [c for c in checks if not c.held]
    assert [(c.variant, c.expected, c.actual) for c in bad] == [("di", "FAIL", "PASS")]


def test_clean_gate_failing_is_reported():
    gs = good_gates()
    gs[1] = gate("spec", "min_acceptance_length", "FAIL")
    assert [c.variant for c in judge_selfcheck(record(gs), FAULTS) if not c.held] == ["spec"]


def test_missing_required_gate_is_an_error():
    gs = [g for g in good_gates() if not (g["variant"] == "di" and g["kind"] == "min_acceptance_length")]
    with pytest.raises(ValueError, match="no min_acceptance_length gate"):
        judge_selfcheck(record(gs), FAULTS)


@pytest.mark.engine
def test_selfcheck_on_real_engine(tmp_path):
    require_vllm()
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "selfcheck", "--results-dir", str(tmp_path), "--run-id", "sc", "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=3000, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    run_dir = tmp_path / "sc"
    assert (run_dir / "run.json").is_file(), proc.stderr[-5000:]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    checks = json.loads(proc.stdout)
    assert checks and all(c["held"] for c in checks)
    rec = json.loads((run_dir / "run.json").read_text())
    c = rec["configs"][0]
    v = c["variants"]
    # every faulty server really ran the fault (the plugin logs it)
    for name, fault in (("spec_draft_input", "draft-input"), ("spec_state_rollback", "state-rollback")):
        log = (run_dir / v[name]["log"]).read_text()
        assert f"evalrun fault {fault} active" in log
        assert "evalrun fault" not in (run_dir / v["spec"]["log"]).read_text()
    t = {name: v[name]["tasks"]["arith"] for name in v}
    mal = {name: (t[name]["spec_decode"] or {}).get("mean_acceptance_length") for name in t}
    om = {x["candidate"]: x for x in c["comparisons"] if x["baseline"] == "reference" and x["task"] == "arith"}
    # clean: the trained drafter gets most drafts accepted and outputs match reference
    assert mal["spec"] >= 2.0 and om["spec"]["output_match_rate"] >= 0.95
    # draft-input: acceptance clearly down (by at least a third of the clean gain), outputs unchanged
    assert mal["spec_draft_input"] <= mal["spec"] - (mal["spec"] - 1) / 3
    assert om["spec_draft_input"]["output_match_rate"] >= 0.95
    # state-rollback: outputs diverge from reference and accuracy falls
    assert om["spec_state_rollback"]["output_match_rate"] <= 0.5
    acc = {name: t[name]["accuracy"]["flexible-extract"] for name in t}
    assert acc["spec_state_rollback"] <= acc["reference"] - 0.3
    assert acc["spec"] == pytest.approx(acc["reference"], abs=0.05)
