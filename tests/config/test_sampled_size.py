"""A sampled_equivalence gate whose sign-flip test cannot reach its alpha at the task's
size (its smallest two-sided p-value is 2/2^n, computed here by hand) is planned NOT RUN
with the reason, never a gate that can only pass; with the false-alarm budget, the family's
report-only rule decides it from the same smallest p-value."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.analysis.gatekinds.sampled_equivalence import SampledEquivalence, too_few_questions
from harness.config.gates import plan_gates
from harness.config.loader import load_config
from harness.report.budget_plan import budget_plan


@pytest.mark.parametrize(("n", "alpha", "reachable"), [
    (5, 0.05, False),    # 2/32 = 0.0625 > 0.05
    (6, 0.05, True),     # 2/64 = 0.03125
    (10, 0.001, False),  # 2/1024 = 0.00195
    (11, 0.001, True),   # 2/2048 = 0.00098
    (1, 0.5, False),     # 2/2 = 1
    (None, 0.05, True),  # unknown before the run: judged then
])
def test_too_few_questions_is_exactly_the_smallest_p_above_alpha(n, alpha, reachable):
    why = too_few_questions(n, alpha)
    assert (why is None) is reachable
    if why:
        assert f"2/2^{n}" in why and "NOT RUN" in why


def test_a_five_question_sampled_task_plans_its_gate_not_run(tmp_path: Path):
    p = tmp_path / "c.yaml"
    p.write_text("""\
name: c
model: m
variants:
  reference: {}
  spec: {speculative_config: {method: mtp, num_speculative_tokens: 2}}
tasks:
  arith: {kind: synthetic, num_questions: 5, temperature: 1.0, seed: null}
comparisons:
  - {baseline: reference, candidate: spec}
""")
    cfg = load_config(p)
    off = [g for g in plan_gates(cfg.model_copy(update={"false_alarm_budget": None}))
           if isinstance(g, SampledEquivalence)]
    assert off and all(not g.independent and "2/2^5" in g.dependence for g in off)
    # with the false-alarm budget (the default) the same rule is the family's: the smallest p-value
    # 2/2^5 = 0.0625 is above any share of the budget 0.01, so the gate is planned report-only
    gates = [g for g in plan_gates(cfg) if isinstance(g, SampledEquivalence)]
    assert gates and all(g.independent and g.planned_min_p(5) == pytest.approx(2 / 2 ** 5) for g in gates)
    b = budget_plan(cfg)
    assert b is not None
    why = {r["id"]: r["why"] for r in b["report_only"]}
    assert all("smallest attainable p 0.0625" in why[g.id] for g in gates)
