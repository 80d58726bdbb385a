"""Gate kind ``late_acceptance_drop``: planned only where asked, judged per request with the
one-sided Wilcoxon test (scipy's), naming where acceptance collapsed."""

from __future__ import annotations

import random

from scipy import stats  # noqa: TID253 - the test's own reference; a cost of this file's collection only

from harness.analysis.gatekinds.late_acceptance_drop import ALPHA, LateAcceptanceDrop
from harness.analysis.gates import evaluate_gate
from harness.analysis.measurements import Measurements
from harness.config.gates import plan_gates
from harness.config.loader import load_config
from tests.analysis.test_per_request import sample


def gate() -> LateAcceptanceDrop:
    return LateAcceptanceDrop(id="c/spec/t/late_acceptance_drop", config="c", variant="spec", task="t", limit=0.2)


def judged(rows):
    m = Measurements()
    m.task_record("spec", "t").samples = rows
    return evaluate_gate(gate(), m)


def test_planned_only_for_speculative_variants_that_ask(tmp_path):
    p = tmp_path / "c.yaml"
    base = ("model: m\nvariants: {ref: {}, spec: {speculative_config: {method: mtp, num_speculative_tokens: 2}}}\n"
            "tasks: {t: {num_questions: 3}}\n")
    p.write_text(base)
    assert not [g for g in plan_gates(load_config(p)) if isinstance(g, LateAcceptanceDrop)]
    p.write_text(base + "gates: {max_late_acceptance_drop: 0.2}\n")
    assert [g.id for g in plan_gates(load_config(p)) if isinstance(g, LateAcceptanceDrop)] == [
        "c/spec/t/late_acceptance_drop"]


def test_a_collapse_after_a_position_fails_naming_it_and_the_questions():
    # 12 requests: 8 verify steps, both drafts accepted in the first 4, none after (positions 1, 4, 7, 10, 13, ...)
    rows = [sample(f"q{i}", [2, 2, 2, 2, 0, 0, 0, 0]) for i in range(12)]
    r = judged(rows)
    # every request: late - early = -1; shifted by the limit: -0.8 each; scipy's one-sided p
    want = stats.wilcoxon([-0.8] * 12, zero_method="wilcox", alternative="less").pvalue
    assert want < ALPHA
    assert r.passed is False and r.observed == 1.0
    assert f"p={want:.4g}" in r.detail
    # step 4 starts at 1 + 4 * 3 = 13 in every request
    assert "collapsed from output position 13 (median over 12 requests" in r.detail
    assert set(r.questions) == {f"q{i}" for i in range(12)}


def test_noisy_but_flat_acceptance_passes_and_no_data_is_not_run():
    rng = random.Random(0)
    rows = [sample(f"q{i}", [rng.choice([0, 1, 2, 2]) for _ in range(10)]) for i in range(40)]
    assert judged(rows).passed is True
    nr = judged([sample("q", None)])
    assert nr.passed is None and "not run: not available: no sample carries" in nr.detail
    assert judged([sample("q", [2, 2])]).passed is None
