"""Gate kinds ``zero_acceptance_share`` and ``paired_acceptance_drop``: planned only where asked,
judged per request / per question with scipy's tests."""

from __future__ import annotations

import random

from scipy import stats  # noqa: TID253 - the test's own reference; a cost of this file's collection only

from harness.analysis.gatekinds.paired_acceptance_drop import PairedAcceptanceDrop
from harness.analysis.gatekinds.zero_acceptance_share import ZeroAcceptanceShare
from harness.analysis.gates import evaluate_gate
from harness.analysis.measurements import Measurements
from harness.config.gates import plan_gates
from harness.config.loader import load_config
from tests.analysis.test_per_request import sample

SPEC = "{speculative_config: {method: mtp, num_speculative_tokens: 2}}"


def test_planned_only_where_asked(tmp_path):
    p = tmp_path / "c.yaml"
    base = (f"model: m\nvariants: {{ref: {{}}, a: {SPEC}, b: {SPEC}}}\ntasks: {{t: {{num_questions: 3}}}}\n")
    p.write_text(base + "comparisons: [{baseline: a, candidate: b}, {baseline: ref, candidate: b}]\n")
    gates = plan_gates(load_config(p))
    assert not [g for g in gates if isinstance(g, (ZeroAcceptanceShare, PairedAcceptanceDrop))]
    p.write_text(base + "gates: {max_zero_acceptance_share: 0.05}\ncomparisons: [{baseline: a, candidate: b, "
                 "max_paired_acceptance_drop: 0.1}, {baseline: ref, candidate: b, max_paired_acceptance_drop: 0.1}]\n")
    gates = plan_gates(load_config(p))
    assert [g.id for g in gates if isinstance(g, ZeroAcceptanceShare)] == [
        "c/a/t/zero_acceptance_share", "c/b/t/zero_acceptance_share"]
    assert [g.id for g in gates if isinstance(g, PairedAcceptanceDrop)] == ["c/a->b/t/paired_acceptance_drop"]


def zero_gate(rows):
    g = ZeroAcceptanceShare(id="c/v/t/zero_acceptance_share", config="c", variant="v", task="t", limit=0.05)
    m = Measurements()
    m.task_record("v", "t").samples = rows
    return evaluate_gate(g, m)


def test_requests_that_never_accept_while_others_do_fail_by_name():
    rows = [sample(f"q{i}", [0, 0, 0, 0, 0] if i % 4 == 0 else [2, 1, 2, 2]) for i in range(40)]
    rows.append(sample("short", [0, 0]))  # under 4 verify steps: not counted
    r = zero_gate(rows)
    want = stats.binomtest(10, 40, 0.05, alternative="greater").pvalue
    assert r.passed is False and r.observed == 10 / 40 and f"p={want:.4g}" in r.detail
    assert set(r.questions) == {f"q{i}" for i in range(0, 40, 4)}
    # one of 40: binomial p = 1 - 0.95^40 = 0.87
    assert zero_gate([sample(f"q{i}", [0] * 5 if i == 0 else [2] * 5) for i in range(40)]).passed is True
    # everyone rejecting is the acceptance-length gates' case, not this one's
    assert zero_gate([sample(f"q{i}", [0] * 5) for i in range(40)]).passed is True
    assert zero_gate([sample("q", None)]).passed is None


def paired(a_rows, b_rows):
    g = PairedAcceptanceDrop(id="c/a->b/t/paired_acceptance_drop", config="c", variant="b", baseline="a", task="t",
                             limit=0.1)
    m = Measurements()
    m.task_record("a", "t").samples = a_rows
    m.task_record("b", "t").samples = b_rows
    return evaluate_gate(g, m)


def test_a_paired_drop_per_question_fails_and_noise_passes():
    rng = random.Random(1)
    steps = {f"q{i}": [rng.choice([1, 2, 2]) for _ in range(6)] for i in range(30)}
    a = [sample(q, s, "a") for q, s in steps.items()]
    same = [sample(q, s, "b") for q, s in steps.items()]
    assert paired(a, same).passed is True
    worse = [sample(q, [max(0, x - 1) for x in s], "b") for q, s in steps.items()]
    r = paired(a, worse)
    ra = [sum(s) / 12 for s in steps.values()]
    rb = [sum(max(0, x - 1) for x in s) / 12 for s in steps.values()]
    want = stats.wilcoxon([y - x + 0.1 for x, y in zip(ra, rb)], zero_method="wilcox", alternative="less").pvalue
    assert r.passed is False and f"p={want:.4g}" in r.detail
    assert abs(r.observed - (sum(ra) - sum(rb)) / 30) < 1e-12
    assert paired(a, [sample("q0", None, "b")]).passed is None
