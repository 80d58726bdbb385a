"""The sampled verdict and the per-request acceptance kinds in the false-alarm budget's family
(docs/gates.md, "The false-alarm budget"): with a budget their p-values are tested at their
share by Holm over the config's tested gates, replacing their own alpha; without, each keeps
its own. Unit tier; p-values and Holm's adjustment are worked out here by hand (binomial
terms with ``math.comb``; Holm's first step is m times the smallest p)."""

from __future__ import annotations

import math

import pytest

from harness.analysis import gates as AG
from harness.analysis.gatekinds.late_acceptance_drop import LateAcceptanceDrop
from harness.analysis.gatekinds.paired_acceptance_drop import PairedAcceptanceDrop
from harness.analysis.gatekinds.sampled_equivalence import SampledEquivalence
from harness.analysis.gatekinds.zero_acceptance_share import ZeroAcceptanceShare
from harness.analysis.measurements import Measurements
from harness.analysis.scoring import score_task
from harness.config.gates import plan_gates
from harness.config.loader import load_config
from harness.records.measures import SampledRecord
from harness.records.samples import Sample
from harness.report.budget_plan import budget_plan, render_budget
from tests.analysis.test_per_request import sample

SAMPLED = """\
model: m
variants:
  reference: {}
  other: {seed_offset: 1000}
tasks:
  t: {kind: synthetic, num_questions: 80, temperature: 1.0, seed_mode: per_question}
gates: {accuracy_threshold: 0.9, tolerance: 0.1}
comparisons:
  - {baseline: reference, candidate: other, max_accuracy_drop: null, min_output_match: null}
"""


def _load(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return load_config(p)


def _sampled_judged(cfg, p_value):
    m = Measurements()
    for v in ("reference", "other"):  # every answer right: each floor's p-value is 1
        xs = [Sample("c", v, "t", f"q{i}", "h", "5", completion="x", token_ids=(1, 2), finish_reason="stop",
                     answers={"flexible-numeric": "5"}, correct={"flexible-numeric": True}) for i in range(80)]
        m.task_record(v, "t").samples, m.task_record(v, "t").score = xs, score_task(xs)
    m.comparison_record("reference", "other", "t").sampled = SampledRecord(
        n=80, mean_a=-1.0, mean_b=-1.1, sum_a=-8.0, sum_b=-8.8, shift=-0.1, sd=0.3, t=-3.0, p_value=p_value,
        t_p_value=p_value, resamples=20000, scorer="reference")
    [r] = [r for r in AG.evaluate_gates(plan_gates(cfg), m) if r.kind == "sampled_equivalence"]
    return r


def test_the_sampled_verdict_is_tested_at_its_share_by_holm(tmp_path):
    cfg = _load(tmp_path, SAMPLED)
    b = budget_plan(cfg)
    assert b is not None and sorted(g["kind"] for g in b["family"]) == [
        "accuracy_floor", "accuracy_floor", "sampled_equivalence"]
    assert b["false_fail_bound"] == pytest.approx(0.01) and b["outside"] == []
    # the dry run lists every kind in the family and why each other kind stays outside
    lines = render_budget(cfg)
    assert "    tested, in the family: accuracy_floor x2, sampled_equivalence x1" in lines
    assert any(line.startswith("      max_error_rate x2: a failed request is the engine's failure") for line in lines)
    assert any(line.startswith("      variant_effective x2: ") for line in lines)
    # three tested gates, the floors' p-values 1: Holm's first step is 3 x the sampled p-value
    passed = _sampled_judged(cfg, 0.004)
    assert passed.passed is True and "Holm-adjusted 0.012" in passed.detail
    failed = _sampled_judged(cfg, 0.003)
    assert failed.passed is False and "Holm-adjusted 0.009" in failed.detail and "false_alarm_budget" in failed.detail
    # the budget off: the same p-value 0.004 against the comparison's own alpha 0.05 fails
    off = cfg.model_copy(update={"false_alarm_budget": None})
    assert _sampled_judged(off, 0.004).passed is False


def test_the_sampled_verdicts_smallest_p_is_its_exact_or_resampled_floor():
    g = SampledEquivalence(id="c/a->b/t/sampled_equivalence", config="c", variant="b", baseline="a", task="t",
                           limit=0.01, scorer="a", budget=0.01, planned_n=5)
    assert g.planned_min_p(5) == pytest.approx(2 / 2 ** 5)     # every flip enumerated: 2/2^n
    assert g.planned_min_p(14) == pytest.approx(2 / 2 ** 14)   # 2^14 = 16384 <= 20000 flips
    assert g.planned_min_p(80) == pytest.approx(1 / 20001)     # random flips: (0 + 1) / (20000 + 1)


SPEC = "{speculative_config: {method: mtp, num_speculative_tokens: 2}"
PER_REQUEST = f"""\
model: m
variants:
  ref: {{}}
  spec_sync: {SPEC}, async_scheduling: false}}
  spec_async: {SPEC}, async_scheduling: true}}
tasks:
  t: {{kind: synthetic, num_questions: 40}}
gates: {{max_zero_acceptance_share: 0.05, max_late_acceptance_drop: 0.2, position_acceptance_rtol: null}}
comparisons:
  - {{baseline: spec_sync, candidate: spec_async, max_accuracy_drop: null, min_output_match: null,
      max_acceptance_length_drop: null, max_paired_acceptance_drop: 0.1}}
"""


def _upper(k: int, n: int, p: float) -> float:
    """P(Binomial(n, p) >= k), summed term by term."""
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1))


def _zero_judged(cfg, zeros):
    m = Measurements()
    for v in ("spec_sync", "spec_async"):
        k = zeros if v == "spec_sync" else 0
        m.task_record(v, "t").samples = [sample(f"q{i}", [0] * 5 if i < k else [2] * 5, v) for i in range(40)]
    return {r.id.split("/", 1)[1]: r for r in AG.evaluate_gates(plan_gates(cfg), m)}


def test_the_per_request_kinds_are_tested_at_their_share_by_holm(tmp_path):
    cfg = _load(tmp_path, PER_REQUEST)
    gates = [g for g in plan_gates(cfg) if isinstance(g, (ZeroAcceptanceShare, LateAcceptanceDrop,
                                                          PairedAcceptanceDrop))]
    assert len(gates) == 5 and all(g.planned_test() and g.planned_n == 40 for g in gates)
    b = budget_plan(cfg)
    assert b is not None and sorted(g["kind"] for g in b["family"]) == [
        "late_acceptance_drop", "late_acceptance_drop", "paired_acceptance_drop", "zero_acceptance_share",
        "zero_acceptance_share"]
    # 7 of 40 requests never accept: p = P(Binomial(40, 0.05) >= 7) = 0.0034, below the kind's own
    # alpha 0.01; with the budget, 5 tested gates (the others' p-values are 1): Holm-adjusted 5p = 0.017
    p7 = _upper(7, 40, 0.05)
    r = _zero_judged(cfg, 7)["spec_sync/t/zero_acceptance_share"]
    assert r.passed is True and f"p={p7:.4g}, Holm-adjusted {5 * p7:.4g}" in r.detail
    off = cfg.model_copy(update={"false_alarm_budget": None})
    r_off = _zero_judged(off, 7)["spec_sync/t/zero_acceptance_share"]
    assert r_off.passed is False and f"p={p7:.4g} vs alpha 0.01" in r_off.detail
    # 9 of 40: 5 x P(Binomial(40, 0.05) >= 9) = 0.00066 < 0.01: fails under the budget too, naming them
    r9 = _zero_judged(cfg, 9)["spec_sync/t/zero_acceptance_share"]
    assert r9.passed is False and f"Holm-adjusted {5 * _upper(9, 40, 0.05):.4g}" in r9.detail
    assert set(r9.questions) == {f"q{i}" for i in range(9)}


def test_the_per_request_kinds_smallest_p_values():
    z = ZeroAcceptanceShare(id="c/v/t/zero_acceptance_share", config="c", variant="v", task="t", limit=0.05)
    assert z.planned_min_p(3) == pytest.approx(0.05 ** 3) and z.planned_min_p(0) == 1.0
    late = LateAcceptanceDrop(id="c/v/t/late_acceptance_drop", config="c", variant="v", task="t", limit=0.2)
    pair = PairedAcceptanceDrop(id="c/a->b/t/paired_acceptance_drop", config="c", variant="b", baseline="a",
                                task="t", limit=0.1)
    # the exact signed-rank test, every difference on one side: 1 / 2^n
    assert late.planned_min_p(6) == pair.planned_min_p(6) == pytest.approx(1 / 64)
    assert not (z.planned_test() or late.planned_test() or pair.planned_test())  # no budget: own alpha
