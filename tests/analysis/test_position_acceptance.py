"""Per-position acceptance gates: a collapse at one draft position with an unchanged mean
acceptance length fails naming the position and both rates, against the stored baseline and
between the variants that must accept alike; the unchanged engine passes against the same
baseline; a rise beyond the band is reported beside the drop. No engine: the counts are the
counters vLLM's ``/metrics`` reports (drafts, accepted_per_pos), written by hand.

vLLM's own rule (``tests/v1/spec_decode/test_acceptance_length.py``, main branch): per
position ``actual >= expected * (1 - rtol)`` with ``DEFAULT_RTOL = 0.05``, and the overall
acceptance length within ``rtol`` of the expected value in both directions.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np  # noqa: TID253 - the test's own reference; a cost of this file's collection only
import pytest
from statsmodels.stats.proportion import proportions_ztest

from harness.analysis import gates as AG
from harness.analysis.gatekinds.baseline_position_acceptance_drop import BaselinePositionAcceptanceDrop
from harness.analysis.gatekinds.max_acceptance_length_drop import MaxAcceptanceLengthDrop
from harness.analysis.gatekinds.max_position_acceptance_drop import MaxPositionAcceptanceDrop
from harness.analysis.measurements import Measurements
from harness.analysis.stats import two_proportion_p, two_proportion_power
from harness.config import gates as G
from harness.config.loader import load_config
from harness.records.baselines import BaselineDoc, BaselineTask, BaselineVariant, SourceRun
from harness.records.measures import SpecDecodeCountersRecord, SpecDecodeRecord
from harness.report.dry_run import family_false_fail_of

REPO = Path(__file__).resolve().parents[2]
CPU = REPO / "configs" / "tiny-qwen3next-mtp-cpu.yaml"
VLLM_FORM = REPO / "tests" / "data" / "vllm_gsm8k" / "configs" / "Nemotron-3-Super-120B-A12B-BF16.yaml"
DRAFTS = 10_000


def spec(per_pos: tuple[float, ...], drafts: int = DRAFTS) -> SpecDecodeRecord:
    """The record of counters with ``per_pos`` rates of ``drafts`` drafts."""
    acc = tuple(float(round(r * drafts)) for r in per_pos)
    return SpecDecodeRecord.from_counters(SpecDecodeCountersRecord(
        drafts=float(drafts), draft_tokens=float(drafts * len(per_pos)), accepted_tokens=sum(acc),
        accepted_per_pos=acc))


BEFORE, COLLAPSED = spec((0.6, 0.3)), spec((0.9, 0.0))


def gates_of(path: Path, kind: type) -> list:
    """The gates as planned with the false-alarm budget off (the rule these tests pin; the
    budget's tests are in tests/analysis/test_budget.py)."""
    c = load_config(path).model_copy(update={"false_alarm_budget": None})
    return [g for g in G.plan_gates(c) + G.plan_baseline_gates(c) if isinstance(g, kind)]


def baseline_of(variant: str, task: str, sd: SpecDecodeRecord) -> BaselineDoc:
    bt = BaselineTask(num_requests=100, error_count=0, accuracy={}, accuracy_ci={}, correct={}, scored={},
                      spec_decode=sd)
    return BaselineDoc(config="c", written_at="2026-12-01T00:00:00Z", source_run=SourceRun(run_id="r0", path="p"),
                       pipeline="flexible-numeric", variants={variant: BaselineVariant(tasks={task: bt})})


def test_the_collapse_keeps_the_mean_acceptance_length():
    assert math.isclose(BEFORE.mean_acceptance_length, 1.9) and math.isclose(COLLAPSED.mean_acceptance_length, 1.9)


def test_planned_between_spec_variants_and_against_the_baseline_only():
    inrun = gates_of(CPU, MaxPositionAcceptanceDrop)
    assert [(g.baseline, g.variant, g.task) for g in inrun] == [("spec_sync", "spec_async", "arith")]
    assert inrun[0].limit == 0.05 and inrun[0].alpha == 0.05
    stored = gates_of(CPU, BaselinePositionAcceptanceDrop)
    assert {(g.variant, g.task) for g in stored} == {(v, t) for v in ("spec_sync", "spec_async")
                                                      for t in ("arith", "gsm8k")}
    # vLLM's form: spec_sync -> spec_async (and not reference -> spec, which has no drafts)
    assert [(g.baseline, g.variant) for g in gates_of(VLLM_FORM, MaxPositionAcceptanceDrop)] == [
        ("spec_sync", "spec_async")] * len([x for x in load_config(VLLM_FORM).variants if x.startswith("spec_async")])


def _judge_inrun(a: SpecDecodeRecord, b: SpecDecodeRecord):
    [g] = gates_of(CPU, MaxPositionAcceptanceDrop)
    m = Measurements()
    m.task_record("spec_sync", "arith").spec = a
    m.task_record("spec_async", "arith").spec = b
    return AG.evaluate_gate(g, m)


def test_collapse_between_spec_variants_fails_naming_the_position_and_both_rates():
    r = _judge_inrun(BEFORE, COLLAPSED)
    assert r.passed is False and r.observed == 1.0
    assert "FAILED: position 1: 0.3000 -> 0.0000" in r.detail and "position 0:" not in r.detail
    assert "position 0 rose 0.6000 -> 0.9000" in r.detail  # reported beside, not failed
    # the mean-length gate alone passes this collapse: the reason the per-position gate exists
    [mal] = gates_of(CPU, MaxAcceptanceLengthDrop)
    m = Measurements()
    m.task_record("spec_sync", "arith").spec = BEFORE
    m.task_record("spec_async", "arith").spec = COLLAPSED
    assert AG.evaluate_gate(mal, m).passed is True


def test_collapse_against_the_stored_baseline_fails_and_the_unchanged_engine_passes():
    [g] = [x for x in gates_of(CPU, BaselinePositionAcceptanceDrop) if (x.variant, x.task) == ("spec_async", "arith")]
    for now, passed in ((COLLAPSED, False), (BEFORE, True), (spec((0.598, 0.297)), True)):
        m = Measurements(baseline=baseline_of("spec_async", "arith", BEFORE))
        m.task_record("spec_async", "arith").spec = now
        [r] = AG.judged_baseline_gates([g], m)
        assert r.passed is passed, r.detail
        assert r.baseline == "baseline:r0"
        if not passed:
            assert "FAILED: position 1: 0.3000 -> 0.0000" in r.detail


def test_a_drop_inside_the_tolerance_passes_even_when_significant():
    # 0.300 -> 0.290 is 3.3% relative at 200,000 drafts: significant, but inside vLLM's 5% floor
    a, b = spec((0.6, 0.3), 200_000), spec((0.6, 0.29), 200_000)
    assert two_proportion_p(60_000, 200_000, 58_000, 200_000) < 1e-6
    assert _judge_inrun(a, b).passed is True


def test_a_drop_beyond_the_tolerance_on_few_drafts_is_not_significant_and_passes():
    # 0.30 -> 0.24 (20% relative) on 50 drafts: the counts cannot tell it from noise
    r = _judge_inrun(spec((0.6, 0.3), 50), spec((0.6, 0.24), 50))
    assert r.passed is True and "FAILED" not in r.detail


def test_missing_counters_fail_closed():
    r = _judge_inrun(BEFORE, spec((0.6, 0.3), 0))
    assert r.passed is False and "missing" in r.detail


def test_baseline_without_drafts_is_not_judged():
    [g] = [x for x in gates_of(CPU, BaselinePositionAcceptanceDrop) if (x.variant, x.task) == ("spec_async", "arith")]
    m = Measurements(baseline=baseline_of("spec_async", "arith", spec((0.6, 0.3), 0)))
    m.task_record("spec_async", "arith").spec = COLLAPSED
    assert AG.judged_baseline_gates([g], m) == []
    assert AG.baseline_notes([g], m) == ["spec_async/arith: the baseline has no per-position acceptance, not gated"]


def test_mean_acceptance_length_rise_beyond_the_band_is_reported_not_failed():
    [mal] = gates_of(CPU, MaxAcceptanceLengthDrop)
    m = Measurements()
    m.task_record("spec_sync", "arith").spec = spec((0.5, 0.2))
    m.task_record("spec_async", "arith").spec = spec((0.8, 0.5))
    r = AG.evaluate_gate(mal, m)
    assert r.passed is True and "ROSE by 0.600 tokens, beyond the band +-0.1" in r.detail


@pytest.mark.parametrize("x1, n1, x2, n2", [(600, 1000, 560, 1000), (30, 100, 12, 80), (5000, 10000, 5000, 10000)])
def test_two_proportion_p_is_statsmodels_pooled_z_test(x1, n1, x2, n2):
    _, p = proportions_ztest([x1, x2], [n1, n2], alternative="larger")
    assert two_proportion_p(x1, n1, x2, n2) == pytest.approx(p, rel=1e-9, abs=1e-12)


def test_power_matches_simulation():
    rng = np.random.default_rng(0)
    p1, rel, n, alpha = 0.3, 0.05, 20_000, 0.05
    x1 = rng.binomial(n, p1, 4000)
    x2 = rng.binomial(n, p1 * (1 - rel), 4000)
    hits = np.mean([two_proportion_p(a, n, b, n) < alpha for a, b in zip(x1, x2)])
    assert two_proportion_power(p1, rel, n, alpha) == pytest.approx(hits, abs=0.03)


def test_family_wise_budget_counts_the_position_gates():
    c = load_config(CPU)
    f = family_false_fail_of(c)
    assert f["position_gates"] == 1 and f["position_alpha_sum_bound"] == pytest.approx(0.05)
    off = c.model_copy(update={"gates": c.gates.model_copy(update={"position_acceptance_rtol": None})})
    f0 = family_false_fail_of(off)
    assert f0["position_gates"] == 0
    # each position gate fails an unchanged build with probability at most its alpha (Holm
    # across its positions), taken as independent of the other gates
    assert f["false_fail"] == pytest.approx(1 - (1 - f0["false_fail"]) * (1 - 0.05), abs=1e-12)


#: vLLM's expected per-position acceptance of its EAGLE3 regression configs
#: (``EAGLE3_MODEL_CONFIGS`` of ``tests/v1/spec_decode/test_acceptance_length.py``).
VLLM_EXPECTED = {"llama3-8b-eagle3": (0.7296, 0.5208, 0.3545), "qwen3-8b-eagle3": (0.6541, 0.3993, 0.2020),
                 "gpt-oss-20b-eagle3": (0.7165, 0.5120, 0.3337)}


def vllm_floor_passes(actual, expected, rtol=0.05) -> bool:
    """vLLM's per-position assertion: ``actual >= exp * (1 - rtol)`` wherever ``exp > 0``."""
    return all(a >= e * (1 - rtol) for a, e in zip(actual, expected) if e > 0)


@pytest.mark.parametrize("name", sorted(VLLM_EXPECTED))
@pytest.mark.parametrize("factor", [1.0, 0.97, 0.93, 0.8])
def test_on_vllms_numbers_the_gate_agrees_with_vllms_floor_at_large_counts(name, factor):
    exp = VLLM_EXPECTED[name]
    last = len(exp) - 1  # the last position degrades by ``factor``, the others stay
    now = tuple(e * factor if i == last else e for i, e in enumerate(exp))
    a, b = spec(exp, 200_000), spec(now, 200_000)
    r = _judge_inrun(a, b)
    assert r.passed is vllm_floor_passes(b.per_position_acceptance, a.per_position_acceptance), r.detail
    if not r.passed:
        assert f"FAILED: position {last}: {a.per_position_acceptance[last]:.4f} -> " in r.detail


def test_vllm_form_sets_the_tolerance_in_its_evalrun_block(tmp_path):
    p = tmp_path / VLLM_FORM.name
    p.write_text(VLLM_FORM.read_text() + "evalrun:\n  position_acceptance_rtol: 0.1\n")
    assert {g.limit for g in gates_of(p, MaxPositionAcceptanceDrop)} == {0.1}
    p.write_text(VLLM_FORM.read_text() + "evalrun:\n  position_acceptance_rtol: null\n")
    assert gates_of(p, MaxPositionAcceptanceDrop) == gates_of(p, BaselinePositionAcceptanceDrop) == []
