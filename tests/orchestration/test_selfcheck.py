"""Self-check: the clean engine passes every gate, each injected fault is caught by its gate.

The engine test runs ``evalrun selfcheck`` against the real vLLM CPU server with the
trained tiny model and evalrun's fault plugin; the unit tests check the judging on
constructed records.
"""

from __future__ import annotations

import json

import pytest

from harness.cli.selfcheck import judge_selfcheck
from tests.record_factory import typed


def gate(variant, kind, verdict, baseline=None, task="t"):
    gid = f"c/{baseline + '->' if baseline else ''}{variant}/{task}/{kind}"
    return {"id": gid, "kind": kind, "variant": variant, "baseline": baseline, "task": task,
            "verdict": verdict, "passed": {"PASS": True, "FAIL": False}.get(verdict), "detail": "n"}


FAULTS = {"reference": None, "spec": None, "di": "draft-input", "sr": "state-rollback",
          "pt": "async-placeholder-token", "sa": "async-stale-accepted", "sa_sync": "async-stale-accepted"}


def variant(fault=None, asynchronous=False, executions=5, changed=3):
    counts = {f"{fault}.executions": executions, f"{fault}.changed": changed} if fault else {}
    exercised = bool(executions and changed) if fault else None
    return {"engine": {"async_scheduling": asynchronous}, "requested": {"async_scheduling": asynchronous},
            "plugin": {"processes": 3, "counts": counts, "exercised": exercised,
                       "not_exercised_reason": None if exercised else "fault not exercised: x"}}


def variants(**over):
    v = {"reference": variant(), "spec": variant(), "di": variant("draft-input"),
         "sr": variant("state-rollback"), "pt": variant("async-placeholder-token", True),
         "sa": variant("async-stale-accepted", True),
         "sa_sync": variant("async-stale-accepted", False, executions=0, changed=0)}
    v.update(over)
    return v


def record(gates, vs=None):
    return typed({"configs": [{"name": "c", "gates": gates, "variants": vs or variants(), "comparisons": []}]})


def good_gates():
    return [
        gate("reference", "accuracy_floor", "PASS"),
        gate("spec", "min_acceptance_length", "PASS"),
        gate("spec", "min_output_match", "PASS", baseline="reference"),
        gate("di", "min_acceptance_length", "FAIL"),
        gate("di", "min_output_match", "PASS", baseline="reference"),
        gate("sr", "min_output_match", "FAIL", baseline="reference"),
        gate("sr", "accuracy_floor", "FAIL"),  # not an expectation either way
        gate("pt", "min_acceptance_length", "FAIL"),
        gate("pt", "max_acceptance_length_drop", "FAIL", baseline="spec"),
        gate("pt", "min_output_match", "FAIL", baseline="reference"),
        gate("sa", "min_output_match", "FAIL", baseline="reference"),
        gate("sa_sync", "min_output_match", "PASS", baseline="reference"),
        gate("sa_sync", "min_acceptance_length", "PASS"),
    ]


def test_all_expectations_hold():
    checks = judge_selfcheck(record(good_gates()), FAULTS)
    # clean: 3 gates; di 2 + exercised; sr 1 + exercised; pt 3 + exercised; sa 1 + exercised;
    # sa_sync (sync contrast): "not executed" + its 2 gates
    assert len(checks) == 3 + 3 + 2 + 4 + 2 + 3 and all(c.held for c in checks)
    sync = [c for c in checks if c.variant == "sa_sync" and "executions" in c.gate]
    assert [(c.expected, c.actual) for c in sync] == [("NOT EXECUTED", "NOT EXECUTED")]


def test_fault_not_caught_is_reported():
    gs = good_gates()
    gs[3] = gate("di", "min_acceptance_length", "PASS")      # the acceptance gate missed the fault
    checks = judge_selfcheck(record(gs), FAULTS)
    bad = [c for c in checks if not c.held]
    assert [(c.variant, c.expected, c.actual) for c in bad] == [("di", "FAIL", "PASS")]


@pytest.mark.parametrize("executions, changed", [(0, 0), (12, 0)])
def test_fault_not_exercised_fails_instead_of_its_gates(executions, changed):
    # the gate "caught" the fault (FAIL as expected) but the patched code never changed
    # anything: the verdict is "not exercised", never "caught"
    vs = variants(sa=variant("async-stale-accepted", True, executions=executions, changed=changed))
    checks = judge_selfcheck(record(good_gates(), vs), FAULTS)
    bad = [c for c in checks if not c.held]
    assert [(c.variant, c.gate, c.actual) for c in bad] == [("sa", "sa/plugin/exercised", "NOT EXERCISED")]
    assert not [c for c in checks if c.variant == "sa" and c.gate.endswith("min_output_match")]


def test_async_fault_that_runs_under_sync_scheduling_is_reported():
    vs = variants(sa_sync=variant("async-stale-accepted", False, executions=4, changed=4))
    checks = judge_selfcheck(record(good_gates(), vs), FAULTS)
    assert [(c.variant, c.expected, c.actual) for c in checks if not c.held] == [
        ("sa_sync", "NOT EXECUTED", "EXECUTED")]


def test_clean_gate_failing_is_reported():
    gs = good_gates()
    gs[1] = gate("spec", "min_acceptance_length", "FAIL")
    assert [c.variant for c in judge_selfcheck(record(gs), FAULTS) if not c.held] == ["spec"]


def test_missing_required_gate_is_an_error():
    gs = [g for g in good_gates() if not (g["variant"] == "di" and g["kind"] == "min_acceptance_length")]
    with pytest.raises(ValueError, match="no min_acceptance_length gate"):
        judge_selfcheck(record(gs), FAULTS)


def test_variants_not_in_the_record_are_not_judged():
    # --variant reference --variant spec: only those ran; gates against others are skipped
    vs = {"reference": variant(), "spec": variant()}
    gs = good_gates()[:3] + [gate("spec", "max_acceptance_length_drop", "NOT RUN", baseline="spec_sync")]
    checks = judge_selfcheck(record(gs, vs), FAULTS)
    assert len(checks) == 3 and all(c.held for c in checks)


@pytest.mark.engine
def test_selfcheck_on_real_engine(selfcheck_run):
    proc, run_dir = selfcheck_run
    assert (run_dir / "run.json").is_file(), proc.stderr[-5000:]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    checks = json.loads(proc.stdout)
    assert checks and all(c["held"] for c in checks)
    rec = json.loads((run_dir / "run.json").read_text())
    c = rec["configs"][0]
    v = c["variants"]
    # every faulty server really ran its fault (the plugin logs it) and names the runner it patched
    for name in v:
        fault = v[name]["fault"]
        log = (run_dir / v[name]["log"]).read_text()
        if fault:
            assert f"evalrun fault {fault} active" in log
            assert "model runner in process" in log and "CPUModelRunner" in log
        else:
            assert "evalrun fault" not in log
    t = {name: v[name]["tasks"]["arith"] for name in v}
    mal = {name: (t[name]["spec_decode"] or {}).get("mean_acceptance_length") for name in t}
    om = {x["candidate"]: x for x in c["comparisons"] if x["baseline"] == "reference" and x["task"] == "arith"}
    acc = {name: t[name]["accuracy"]["flexible-numeric"] for name in t}
    cnt = {name: v[name]["plugin"]["counts"] for name in v}
    # clean: the trained drafter gets most drafts accepted and outputs match reference, sync and async alike
    for clean in ("spec_sync", "spec_async", "spec_async_4tok"):
        assert mal[clean] >= 2.0 and om[clean]["output_match_rate"] >= 0.95
        assert acc[clean] == pytest.approx(acc["reference"], abs=0.05)
    assert v["spec_async"]["engine"]["async_scheduling"] is True
    # the seed's bug 1 in the async path: acceptance clearly down; the placeholder is also the
    # target's next input there, so outputs diverge and accuracy falls
    assert mal["spec_async_placeholder_token"] <= mal["spec_async"] - (mal["spec_async"] - 1) / 3
    assert om["spec_async_placeholder_token"]["output_match_rate"] < 0.95
    assert acc["spec_async_placeholder_token"] <= acc["reference"] - 0.3
    assert cnt["spec_async_placeholder_token"]["async-placeholder-token.changed"] > 0
    # ... and the same patch under synchronous scheduling runs, but reaches the drafter only on
    # the rare partial-prefill row (vLLM's own use of the backup) and moves no figure
    sp = cnt["spec_sync_placeholder_token"]
    assert sp["async-placeholder-token.executions"] > 0
    assert sp.get("async-placeholder-token.changed", 0) <= sp["async-placeholder-token.executions"] // 10
    assert abs(mal["spec_sync_placeholder_token"] - mal["spec_sync"]) <= 0.05
    assert om["spec_sync_placeholder_token"]["output_match_rate"] >= 0.95
    # the seed's bug 2 in the async path (4 speculative tokens, so counts differ between
    # requests): outputs diverge while the clean 4-token control matches the reference;
    # under sync the patched function is never called
    assert om["spec_async_4tok"]["output_match_rate"] >= 0.95
    assert cnt["spec_async_stale_accepted"]["async-stale-accepted.changed"] > 0
    assert om["spec_async_stale_accepted"]["output_match_rate"] < 0.95
    assert cnt["spec_sync_stale_accepted"].get("async-stale-accepted.executions", 0) == 0
    # the bug classes in the synchronous path
    assert mal["spec_draft_input"] <= mal["spec_sync"] - (mal["spec_sync"] - 1) / 3
    assert om["spec_draft_input"]["output_match_rate"] >= 0.95
    assert om["spec_state_rollback"]["output_match_rate"] <= 0.5
    assert acc["spec_state_rollback"] <= acc["reference"] - 0.3


def test_a_shape_fault_must_pass_every_plain_gate_and_fail_the_shapes_output_match():
    # spec-prompt-edge: every gate of the plain task t passes, the shape task's output
    # match fails; the same verdicts with the roles swapped break both expectations
    faults = {"reference": None, "pe": "spec-prompt-edge"}
    vs = {"reference": variant(), "pe": variant("spec-prompt-edge")}
    gs = [gate("pe", "min_output_match", "PASS", baseline="reference"),
          gate("pe", "min_acceptance_length", "PASS"),
          gate("pe", "shape_proven", "PASS", task="edges"), gate("pe", "drafts_observed", "PASS", task="edges"),
          gate("pe", "min_output_match", "FAIL", baseline="reference", task="edges")]
    checks = judge_selfcheck(record(gs, vs), faults, frozenset({"edges"}))
    assert all(c.held for c in checks)
    assert {(c.gate.split("/", 1)[1], c.expected) for c in checks if c.fault} >= {
        ("reference->pe/t/min_output_match", "PASS"), ("pe/t/min_acceptance_length", "PASS"),
        ("reference->pe/edges/min_output_match", "FAIL"), ("pe/edges/shape_proven", "PASS")}
    caught_on_plain = [gate("pe", g["kind"], "FAIL", baseline=g["baseline"], task=g["task"])
                       if g["task"] == "t" and g["kind"] == "min_output_match" else g for g in gs]
    bad = [c for c in judge_selfcheck(record(caught_on_plain, vs), faults, frozenset({"edges"})) if not c.held]
    assert [c.gate for c in bad] == ["c/reference->pe/t/min_output_match"]
