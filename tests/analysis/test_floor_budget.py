"""``accuracy_floor`` under the false-alarm budget (docs/gates.md, "The false-alarm budget"):
the floor as a non-inferiority test (exact one-sided binomial), its smallest attainable p-value,
the report-only rule on a tiny task, the old rule kept with the budget off, and vLLM's point
rule kept outside the budget with its stated false-fail. Unit tier; every expected p-value is
summed here from binomial terms with ``math.comb``, not taken from scipy or the code."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import pytest

from harness.analysis import gates as AG
from harness.analysis.budget import floor_min_p, floor_p, point_rule_false_fail
from harness.analysis.measurements import Measurements
from harness.analysis.scoring import score_task
from harness.config.gates import plan_gates
from harness.config.loader import load_config
from harness.records.samples import Sample
from harness.report.budget_plan import budget_plan, render_budget

REPO = Path(__file__).resolve().parents[2]


def _cdf(k: int, n: int, p: float) -> float:
    """P(Binomial(n, p) <= k), summed term by term in exact rationals (p read as its decimal)."""
    q = Fraction(str(p))
    return float(sum(math.comb(n, i) * q ** i * (1 - q) ** (n - i) for i in range(k + 1)))


@pytest.mark.parametrize(("correct", "n", "floor"), [(57, 80, 0.8), (40, 80, 0.8), (0, 5, 0.8), (8, 9, 0.5),
                                                     (80, 80, 0.8), (700, 1000, 0.72)])
def test_the_floor_p_value_is_the_lower_binomial_tail(correct, n, floor):
    assert floor_p(correct, n, floor) == pytest.approx(_cdf(correct, n, floor), rel=1e-9, abs=1e-300)


def test_the_smallest_p_value_is_every_answer_wrong():
    assert floor_min_p(80, 0.8) == pytest.approx(0.2 ** 80)
    assert floor_min_p(2, 0.8) == pytest.approx(0.04) == pytest.approx(floor_p(0, 2, 0.8))
    assert floor_min_p(0, 0.8) == 1.0 and floor_min_p(10, 0.0) == 1.0 and floor_p(0, 10, -0.1) == 1.0


def test_the_point_rule_false_fail_at_the_threshold():
    # vLLM's rule on 1319 questions, threshold 0.85, tolerance 0.08: fails below 0.77 * 1319 = 1015.63,
    # i.e. with 1015 or fewer right
    assert point_rule_false_fail(1319, 0.85, 0.85 - 0.08) == pytest.approx(_cdf(1015, 1319, 0.85), rel=1e-6)
    # 100 questions at 0.9 - 0.05: fails with 84 or fewer right
    assert point_rule_false_fail(100, 0.9, 0.9 - 0.05) == pytest.approx(_cdf(84, 100, 0.9), rel=1e-9)
    assert point_rule_false_fail(10, 0.9, 0.0) == 0.0
    # docs/gates.md, "vLLM's point rule and its false-fail": the H200 list (1319 questions,
    # tolerance 0.08) and smaller tasks
    for n, thr, want in ((1319, 0.93, 9.6e-24), (1319, 0.69, 3.6e-10), (1319, 0.85, 8.6e-15), (100, 0.9, 0.010),
                         (100, 0.5, 0.044), (250, 0.9, 8.0e-5), (250, 0.5, 0.0047)):
        got = point_rule_false_fail(n, thr, thr - 0.08)
        assert got == pytest.approx(want, rel=0.02)
        k = max(c for c in range(n + 1) if c / n < thr - 0.08)
        assert got == pytest.approx(_cdf(k, n, thr), rel=1e-6)


CFG = """\
model: m
variants:
  reference: {}
  spec: {speculative_config: {method: mtp, num_speculative_tokens: 2}}
tasks:
  arith: {kind: synthetic, num_questions: 80}
  tiny: {kind: synthetic, num_questions: 2}
gates:
  accuracy_threshold: 0.9
  tolerance: 0.1
  calibration_questions: 100
"""


def _samples(variant, task, n, right):
    return [Sample("c", variant, task, f"q{i}", "h", "5", completion="x", token_ids=(1, 2, 3), finish_reason="stop",
                   answers={"flexible-numeric": "5"}, correct={"flexible-numeric": i < right}) for i in range(n)]


def _judge(tmp_path, text, rights):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    c = load_config(p)
    m = Measurements()
    for (v, t), (n, r) in rights.items():
        xs = _samples(v, t, n, r)
        m.task_record(v, t).samples, m.task_record(v, t).score = xs, score_task(xs)
    return c, {r.id.split("/", 1)[1]: r for r in AG.evaluate_gates(plan_gates(c), m) if r.kind == "accuracy_floor"}


def test_noise_below_the_floor_passes_and_a_real_loss_fails(tmp_path):
    # the sampled CPU config under gpu noise: accuracy 0.71-0.78 against the floor 0.8 on 80 questions
    _, res = _judge(tmp_path, CFG, {("reference", "arith"): (80, 57), ("spec", "arith"): (80, 40),
                                    ("reference", "tiny"): (2, 0), ("spec", "tiny"): (2, 2)})
    ok, bad = res["reference/arith/accuracy_floor"], res["spec/arith/accuracy_floor"]
    assert ok.passed is True and ok.observed == pytest.approx(57 / 80) and ok.limit == 0.8
    assert f"p={_cdf(57, 80, 0.8):.4g}" in ok.detail
    # the test counts the run's size itself: the calibration widening is not applied on top
    assert "calibration_questions 100 not applied" in ok.detail
    assert bad.passed is False and f"p={_cdf(40, 80, 0.8):.4g}" in bad.detail and "FAILED" in bad.detail
    # 2 questions: even both wrong gives p = 0.2 ** 2 = 0.04 > 0.01, so the gate is report-only
    tiny = res["reference/tiny/accuracy_floor"]
    assert tiny.passed is None and "report-only" in tiny.detail


def test_without_a_budget_the_old_rule_is_kept(tmp_path):
    _, res = _judge(tmp_path, "false_alarm_budget: null\n" + CFG,
                    {("reference", "arith"): (80, 57), ("spec", "arith"): (80, 70),
                     ("reference", "tiny"): (2, 0), ("spec", "tiny"): (2, 2)})
    # floor 0.8 widened by 1.6449 * sqrt(0.9 * 0.1 * (100 - 80) / (80 * 99)) for 80 of 100 questions
    margin = 1.6448536269514722 * math.sqrt(0.9 * 0.1 * 20 / (80 * 99))
    r = res["reference/arith/accuracy_floor"]
    assert r.passed is False and r.limit == pytest.approx(round(0.8 - margin, 6))
    assert r.detail == (f"flexible-numeric accuracy 0.7125 (57/80) vs floor {round(0.8 - margin, 6):.4f} "
                        f"(floor 0.8 widened by {margin:.4f} for 80 of 100 calibration questions)")
    assert res["spec/arith/accuracy_floor"].passed is True
    assert res["reference/tiny/accuracy_floor"].passed is False      # no report-only rule without a budget


def test_a_vllm_form_floor_keeps_vllms_rule_outside_the_budget():
    c = load_config(REPO / "configs" / "Qwen3-Next-80B-A3B-Instruct.yaml")
    assert c.false_alarm_budget == 0.01
    floors = [g for g in plan_gates(c) if g.kind == "accuracy_floor"]
    assert floors and all(not g.planned_test() for g in floors)
    b = budget_plan(c)
    assert b is not None
    out = {o["id"]: o for o in b["outside"]}
    want = _cdf(1015, 1319, 0.85)          # 0.85 - 0.08 = 0.77; 1015 / 1319 < 0.77 <= 1016 / 1319
    for g in floors:
        assert out[g.id]["alpha"] == pytest.approx(want, rel=1e-6)
        assert "vLLM's point rule" in str(out[g.id]["why"])
    assert "accuracy_floor" not in b["deterministic"]
    assert b["false_fail_bound"] == pytest.approx(0.01)              # the budget's bound is the budget's
    assert b["outside_false_fail"] == pytest.approx(1 - (1 - want) ** len(floors), rel=1e-6)
    assert any("outside the budget" in line and "vLLM's point rule" in line for line in render_budget(c))


def test_power_of_the_floor_test_on_the_sampled_config():
    """docs/gates.md, "The floor as a test": 80 questions, floor 0.8, share 0.01 / 8. The test
    fails at 51 or fewer right; the old floor, widened for 80 of 100 calibration questions to
    0.7752, at 62 or fewer. Powers summed here from binomial terms."""
    share = 0.01 / 8
    k = max(c for c in range(81) if floor_p(c, 80, 0.8) < share)
    assert k == 51 and _cdf(51, 80, 0.8) < share <= _cdf(52, 80, 0.8)
    assert floor_p(57, 80, 0.8) == pytest.approx(0.0388, abs=1e-4)       # the noisiest real night, 0.71
    margin = 1.6448536269514722 * math.sqrt(0.9 * 0.1 * 20 / (80 * 99))
    assert max(c for c in range(81) if c / 80 < round(0.8 - margin, 6)) == 62
    for acc, old, new in ((0.9, 0.0008, 3e-10), (0.8, 0.3292, 0.00054), (0.75, 0.7364, 0.017), (0.7, 0.9469, 0.14),
                          (0.65, 0.9945, 0.45), (0.6, 0.9997, 0.79)):
        assert _cdf(62, 80, acc) == pytest.approx(old, abs=5e-5)
        assert _cdf(51, 80, acc) == pytest.approx(new, rel=0.03)
