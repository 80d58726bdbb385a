"""Expected failures are matched against the builds each gate's variants ran, not one
build for the whole run: in an A/B run whose declaration names the baseline's release,
a comparison whose candidate is on another release is judged as usual (FAIL), and only a
gate all of whose builds the declaration covers is XFAIL."""

from __future__ import annotations

from pathlib import Path

from harness.analysis.expected import mark_expected
from harness.config.loader import load_config
from harness.records.provenance import EngineBuild
from harness.records.run_record import GateResult

CFG = """\
name: cfg
model: m
variants:
  reference: {}
tasks:
  arith: {kind: synthetic, num_questions: 10}
builds: {baseline: vllm==0.0.1, candidate: vllm==0.0.9}
expected_failures:
  - gates: ["*/arith/*"]  # not every gate: a declaration covering all of them is refused
    builds: vllm==0.0.1
    reason: a known bug of 0.0.1
    evidence: docs/cpu-engine.md#x
"""

OLD = EngineBuild(python="/b1/bin/python", package="vllm", version="0.0.1")
NEW = EngineBuild(python="/b9/bin/python", package="vllm", version="0.0.9")


def _gate(gid: str, variant: str, baseline: str | None) -> GateResult:
    return GateResult(id=gid, kind=gid.rsplit("/", 1)[-1], config="cfg", variant=variant, baseline=baseline,
                      op=">=", passed=False, detail="d")


def test_a_cross_build_comparison_is_matched_against_both_sides(tmp_path: Path):
    p = tmp_path / "cfg.yaml"
    p.write_text(CFG)
    config = load_config(p)
    builds = {"reference.baseline": OLD, "reference.candidate": NEW}
    cross = _gate("cfg/reference.baseline->reference.candidate/arith/max_accuracy_drop", "reference.candidate",
                  "reference.baseline")
    own_old = _gate("cfg/reference.baseline/arith/error_rate", "reference.baseline", None)
    own_new = _gate("cfg/reference.candidate/arith/error_rate", "reference.candidate", None)

    def of(g: GateResult) -> list[EngineBuild | None]:
        return [builds[g.variant]] + ([builds[g.baseline]] if g.baseline in builds else [])

    out = {g.id: g for g in mark_expected([cross, own_old, own_new], config, of)}
    assert out[cross.id].verdict == "FAIL"          # the candidate (0.0.9) is not the declared build
    assert out[cross.id].expected_failure is not None and out[cross.id].expected_failure.applies is False
    assert "0.0.1" in str(out[cross.id].expected_failure.build) and "0.0.9" in str(out[cross.id].expected_failure.build)
    assert out[own_old.id].verdict == "XFAIL"       # only 0.0.1 ran it: the declaration applies
    assert out[own_new.id].verdict == "FAIL"
    # one side unknown: cannot tell, judged as usual
    out2 = mark_expected([cross], config, lambda g: [OLD, None])
    assert out2[0].verdict == "FAIL" and out2[0].expected_failure.applies is None
