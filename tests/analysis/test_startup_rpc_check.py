"""The gate kind ``startup_rpc_check`` (harness/analysis/gatekinds/startup_rpc_check.py),
planned for vLLM's real EPLB config (tests/data/vllm_gsm8k/configs/skips_and_checks/,
source named in its README) and judged on each kind of answer."""

from __future__ import annotations

from pathlib import Path

from harness.analysis.gatekinds.startup_rpc_check import StartupRpcCheck
from harness.analysis.gates import evaluate_gate
from harness.analysis.measurements import Measurements
from harness.config.gates import plan_gates
from harness.config.loader import load_config
from harness.engine.rpc_checks import RpcCheckOutcome

EPLB = (Path(__file__).resolve().parents[1] / "data" / "vllm_gsm8k" / "configs" / "skips_and_checks"
        / "DeepSeek-V4-Flash-EPLB-TEP4.yaml")
NAME = "check_eplb_replica_slots"


def gate() -> StartupRpcCheck:
    [g] = [g for g in plan_gates(load_config(EPLB)) if isinstance(g, StartupRpcCheck)]
    return g


def test_planned_per_variant_from_vllms_key_without_a_warning():
    c = load_config(EPLB)
    assert c.startup_rpc_checks == (NAME,)
    assert not [w for w in c.warnings if "startup_rpc_checks" in w.message]
    g = gate()
    assert g.id == "DeepSeek-V4-Flash-EPLB-TEP4/reference/startup_rpc_check" and g.checks == (NAME,)


def test_a_config_without_checks_plans_none(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("model: m\nvariants: {a: {}, b: {}}\ntasks: {t: {num_questions: 3}}\n")
    assert not [g for g in plan_gates(load_config(p)) if isinstance(g, StartupRpcCheck)]
    p.write_text("model: m\nstartup_rpc_checks: [check_a, check_b]\nvariants: {a: {}, b: {}}\n"
                 "tasks: {t: {num_questions: 3}}\n")
    ids = [g.id for g in plan_gates(load_config(p)) if isinstance(g, StartupRpcCheck)]
    assert ids == ["c/a/startup_rpc_check", "c/b/startup_rpc_check"]


def _judge(outcomes):
    g = gate()
    m = Measurements()
    if outcomes is not None:
        m.variant_record("reference").startup_checks = outcomes
    return evaluate_gate(g, m)


def o(verdict, detail, results=()):
    return RpcCheckOutcome(name=NAME, verdict=verdict, detail=detail, results=list(results))


def test_verdicts():
    assert _judge([o("passed", "all 4 worker(s) answered None", [None] * 4)]).passed is True
    r = _judge([o("failed", "worker 2: 8 redundant expert slots differ from their source")])
    assert r.passed is False and "8 redundant" in r.detail and r.observed == 1
    assert _judge([o("error", "HTTP 404 (the endpoint needs VLLM_SERVER_DEV_MODE=1)")]).passed is False  # fail closed
    r = _judge([o("not_run", "not run: the worker extension ... is not installed")])
    assert r.passed is None and "not installed" in r.detail                # NOT RUN, with the reason
    r = _judge([])                                                          # the server ran, no answer recorded
    assert r.passed is False and NAME in r.detail
    assert _judge(None).passed is False


def test_a_variant_that_did_not_run_is_not_run_with_its_reason():
    m = Measurements()
    m.variant_record("reference").not_run = "the worker extension X is not installed"
    r = evaluate_gate(gate(), m)
    assert r.passed is None and "X is not installed" in r.detail
