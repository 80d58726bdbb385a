"""The ``startup_rpc_check`` judge (harness/analysis/judges/startup_rpc.py), planned for
vLLM's real EPLB config (tests/data/vllm_gsm8k/configs/skips_and_checks/)."""

from __future__ import annotations

from harness.analysis.judges.startup_rpc import judge_startup_rpc_check
from harness.config.gates.startup_rpc import plan_startup_rpc_check
from harness.engine.rpc_checks import RpcCheckOutcome

NAME = "check_eplb_replica_slots"


def gate():
    [g] = plan_startup_rpc_check("DeepSeek-V4-Flash-EPLB-TEP4", ["reference"], [NAME])
    return g


def test_planned_per_variant_only_when_the_config_names_checks():
    assert gate().id == "DeepSeek-V4-Flash-EPLB-TEP4/reference/startup_rpc_check"
    assert plan_startup_rpc_check("c", ["a", "b"], []) == []


def test_verdicts():
    g = gate()
    ok = RpcCheckOutcome(NAME, "passed", "all 4 worker(s) answered None", [None] * 4)
    bad = RpcCheckOutcome(NAME, "failed", "worker 2: 8 redundant expert slots differ from their source")
    err = RpcCheckOutcome(NAME, "error", "HTTP 404 (the endpoint needs VLLM_SERVER_DEV_MODE=1)")
    gone = RpcCheckOutcome(NAME, "not_run", "not run: the worker extension ... is not installed")
    assert judge_startup_rpc_check(g, [ok]).passed is True
    v = judge_startup_rpc_check(g, [bad])
    assert v.passed is False and "8 redundant" in v.detail
    assert judge_startup_rpc_check(g, [err]).passed is False            # fail closed
    v = judge_startup_rpc_check(g, [gone])
    assert v.passed is None and "not installed" in v.detail             # NOT RUN, with the reason
    assert judge_startup_rpc_check(g, []).passed is False               # no answer recorded
    assert judge_startup_rpc_check(g, None).passed is None              # no server: its other gates say so
