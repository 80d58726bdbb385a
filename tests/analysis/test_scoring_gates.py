"""Scoring, output match and gates on constructed samples; expected values by hand."""

from __future__ import annotations

import math

import pytest

from harness.config.loader import load_config
from harness.records.measures import EngineFactsRecord
from harness.engine.info import check_effective
from harness.records.measures import SpecDecodeCountersRecord, SpecDecodeRecord
from harness.analysis.gates import evaluate_gates
from harness.analysis.measurements import Measurements
from harness.config.plan import build_plan
from harness.records.samples import Sample, read_jsonl, write_jsonl
from harness.analysis.scoring import first_divergence, output_match, score_task


def s(qid, right, ids=(1, 2, 3), error=None, answer="5", variant="v"):
    if error:
        return Sample("c", variant, "t", qid, "h", "5", error=error)
    return Sample(
        "c", variant, "t", qid, "h", "5", completion="x", token_ids=tuple(ids), finish_reason="stop",
        answers={"strict-numeric": answer, "flexible-numeric": answer},
        correct={"strict-numeric": right, "flexible-numeric": right},
    )


def test_errors_are_not_scored_as_wrong():
    samples = [s("q1", True), s("q2", False), s("q3", True), s("q4", None, error="request q4: HTTP 500")]
    sc = score_task(samples)
    assert sc.num_requests == 4 and sc.error_count == 1 and sc.error_rate == 0.25
    fx = sc.accuracy["flexible-numeric"]
    assert (fx.correct, fx.scored) == (2, 3)
    assert fx.accuracy == pytest.approx(2 / 3)
    # Wilson 95% for 2/3 by the closed form
    z, n, p = 1.959963984540054, 3, 2 / 3
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert fx.accuracy_ci == pytest.approx((c - h, c + h))


def test_invalid_rate_counts_missing_answers():
    sc = score_task([s("q1", False, answer=None), s("q2", True)])
    assert sc.accuracy["strict-numeric"].invalid_rate == 0.5


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2


def test_output_match_counts_and_mismatches():
    a = [s("q1", True, (1, 2, 3)), s("q2", True, (4, 5)), s("q3", True, (7,)), s("q4", True)]
    b = [s("q1", True, (1, 2, 3)), s("q2", True, (4, 6)), s("q3", None, error="boom"), s("q4", True)]
    om = output_match(a, b)
    assert (om.compared, om.matched) == (3, 2)
    assert om.output_match_rate == pytest.approx(2 / 3)
    assert [(x.question_id, x.first_divergence) for x in om.mismatches] == [("q2", 1)]
    assert om.skipped == ("q3",)


def test_samples_jsonl_roundtrip(tmp_path):
    xs = [s("q1", True), s("q2", None, error="e")]
    write_jsonl(tmp_path / "a.jsonl", xs)
    assert read_jsonl(tmp_path / "a.jsonl") == xs
    (tmp_path / "bad.jsonl").write_text('{"nope": 1}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        read_jsonl(tmp_path / "bad.jsonl")


CFG = """\
model: m
variants:
  reference: {}
  spec:
    speculative_config: {method: mtp, num_speculative_tokens: 2}
    async_scheduling: true
    expected_effective: {cpu: {async_scheduling: false}}
  spec2:
    speculative_config: {method: mtp, num_speculative_tokens: 2}
    async_scheduling: true
tasks:
  t: {num_questions: 10}
gates:
  accuracy_threshold: 0.8
  tolerance: 0.1
  min_acceptance_length: 1.5
comparisons:
  - {baseline: reference, candidate: spec, max_accuracy_drop: 0.05, min_output_match: 1.0}
  - {baseline: spec, candidate: spec2, max_accuracy_drop: null, min_output_match: null, max_acceptance_length_drop: 0.1}
"""


def facts(async_sched, method="mtp", n=2):
    return EngineFactsRecord("0.32.0", "cpu", "torch.float32", async_sched, method, n, 2048, False)


def test_gates_end_to_end_on_constructed_measurements(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(CFG)
    cp = build_plan([load_config(p)]).configs[0]
    m = Measurements()
    ref = [s(f"q{i}", i < 9) for i in range(10)]                 # 0.9
    spec = [s(f"q{i}", i < 7, ids=(1, 2, 3) if i else (1, 2, 4)) for i in range(10)]  # 0.7, q0 diverges
    for v, xs in (("reference", ref), ("spec", spec), ("spec2", spec)):
        m.task_record(v, "t").score = score_task(xs)
    m.task_record("spec", "t").spec = SpecDecodeRecord.from_counters(SpecDecodeCountersRecord(100, 200, 80, (50, 30)))
    m.task_record("spec2", "t").spec = SpecDecodeRecord.from_counters(SpecDecodeCountersRecord(100, 200, 60, (40, 20)))
    m.variant_record("reference").effectiveness = check_effective(facts(False, None, None), None, None, {})
    mtp2 = {"method": "mtp", "num_speculative_tokens": 2}
    m.variant_record("spec").effectiveness = check_effective(facts(False), mtp2, True,
                                              {"cpu": {"async_scheduling": False}})
    m.variant_record("spec2").effectiveness = check_effective(facts(False), dict(mtp2), True, {})
    m.task_record("reference", "t").samples, m.task_record("spec", "t").samples = ref, spec
    m.comparison_record("reference", "spec", "t").match = output_match(ref, spec)
    res = {g.id.split("/", 1)[1]: g for g in evaluate_gates(cp.gates, m)}

    assert res["reference/t/accuracy_floor"].passed is True        # 0.9 >= 0.7
    assert res["spec/t/accuracy_floor"].passed is True             # 0.7 >= 0.7
    assert res["spec/t/accuracy_floor"].observed == pytest.approx(0.7)
    assert res["spec/t/min_acceptance_length"].observed == pytest.approx(1.8)   # 1 + 80/100
    assert res["spec2/t/min_acceptance_length"].observed == pytest.approx(1.6)
    assert res["spec->spec2/t/max_acceptance_length_drop"].observed == pytest.approx(0.2)
    assert res["spec->spec2/t/max_acceptance_length_drop"].passed is False
    drop = res["reference->spec/t/max_accuracy_drop"]
    assert drop.observed == pytest.approx(0.2) and drop.passed is False
    assert set(drop.questions) == {"q7", "q8"}                      # right in reference, wrong in spec
    om = res["reference->spec/t/min_output_match"]
    assert om.observed == pytest.approx(0.9) and om.passed is False and om.questions == ("q0",)
    assert res["spec/variant_effective"].passed is True            # declared expected on cpu
    assert "not effective" in res["spec/variant_effective"].detail
    assert res["spec2/variant_effective"].passed is False           # async asked, engine ran sync
    assert res["reference/variant_effective"].passed is True
    assert res["spec/t/drafts_observed"].passed is True


def test_zero_drafts_fails_with_message(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(CFG)
    cp = build_plan([load_config(p)]).configs[0]
    m = Measurements()
    m.task_record("spec", "t").spec = SpecDecodeRecord.from_counters(SpecDecodeCountersRecord(0, 0, 0, ()))
    res = {g.id.split("/", 1)[1]: g for g in evaluate_gates(cp.gates, m)}
    for k in ("spec/t/drafts_observed", "spec/t/min_acceptance_length"):
        assert res[k].passed is False and "no drafts observed" in res[k].detail


def test_not_run_is_never_passed(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(CFG)
    cp = build_plan([load_config(p)]).configs[0]
    m = Measurements()
    m.variant_record("spec").not_run = "server failed to start"
    res = {g.id.split("/", 1)[1]: g for g in evaluate_gates(cp.gates, m)}
    assert res["spec/t/accuracy_floor"].passed is None
    assert res["spec/t/accuracy_floor"].verdict == "NOT RUN"
    assert res["reference->spec/t/min_output_match"].passed is None


def test_floor_widened_for_smaller_run_than_calibration(tmp_path):
    text = CFG.replace("tolerance: 0.1", "tolerance: 0.0\n  calibration_questions: 1319")
    p = tmp_path / "c.yaml"
    p.write_text(text)
    cp = build_plan([load_config(p)]).configs[0]
    m = Measurements()
    m.task_record("reference", "t").score = score_task([s(f"q{i}", i < 7) for i in range(10)])  # 0.7
    g = next(x for x in evaluate_gates(cp.gates, m) if x.id.endswith("reference/t/accuracy_floor"))
    # one-sided 95%: 1.6449 * sqrt(0.8*0.2*(1319-10)/(10*1318)) = 0.2074 -> floor 0.5926
    margin = 1.6448536269514722 * math.sqrt(0.8 * 0.2 * (1319 - 10) / (10 * 1318))
    assert g.limit == pytest.approx(0.8 - margin, abs=1e-6)
    assert g.passed is True
