"""Family-wise false-fail probability: the exact sum checked against a simulation that
uses the gate's own test (scipy's exact binomial test), not the code under test."""

from __future__ import annotations

import numpy as np  # noqa: TID253 - the test's own reference; a cost of this file's collection only
import pytest
from scipy import stats  # noqa: TID253 - the test's own reference; a cost of this file's collection only

from harness.analysis.familywise import drop_gate_false_fail, family_false_fail
from harness.analysis.gatekinds.max_accuracy_drop import MaxAccuracyDrop
from harness.analysis.gates import evaluate_gates
from harness.analysis.measurements import Measurements, TaskMeasurement
from harness.config.loader import load_config
from harness.records.samples import Sample
from harness.report.dry_run import family_false_fail_of


def simulate(n, d, limit, alpha, k, holm, sims=20000, seed=1):
    rng = np.random.default_rng(seed)
    big_d = rng.binomial(n, d, size=(sims, k))
    b = rng.binomial(big_d, 0.5)
    p = stats.binom.sf(b - 1, big_d, 0.5)          # P(Bin(D, 1/2) >= b)
    drop_fail = (2 * b - big_d) / n > limit
    if holm:  # Holm step-down, written out
        order = np.argsort(p, axis=1)
        ps = np.take_along_axis(p, order, axis=1)
        thresholds = alpha / (k - np.arange(k))
        ok_until = np.cumprod(ps < thresholds, axis=1).astype(bool)
        sig = np.zeros_like(ok_until)
        np.put_along_axis(sig, order, ok_until, axis=1)
    else:
        sig = p < alpha
    return float(np.mean(np.any(drop_fail | sig, axis=1)))


@pytest.mark.parametrize("holm", [False, True])
def test_exact_family_false_fail_agrees_with_simulation(holm):
    n, d, limit, alpha, k = 1319, 0.06, 0.05, 0.05, 5
    exact = family_false_fail([(n, d, limit, alpha)] * k, holm=holm)
    sim = simulate(n, d, limit, alpha, k, holm)
    se = (sim * (1 - sim) / 20000) ** 0.5
    assert abs(exact - sim) < 4 * se + 1e-3, (exact, sim)


def test_single_gate_is_at_most_alpha_without_a_drop_limit():
    # the exact McNemar test is conservative: size <= alpha
    assert drop_gate_false_fail(1319, 0.06, None, 0.05) <= 0.05
    # no discordance: nothing can flip, nothing can fail
    assert drop_gate_false_fail(200, 0.0, 0.05, 0.05) == 0.0


def test_holm_lowers_the_family_figure_in_the_dry_run(tmp_path):
    base = ("model_name: m\naccuracy_threshold: 0.9\nserver_args: >-\n"
            "  --speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":2}'\n")
    a = tmp_path / "a.yaml"
    a.write_text(base)
    b = tmp_path / "b.yaml"
    b.write_text(base + "evalrun:\n  multiple_testing: holm\n")
    fa, fb = family_false_fail_of(load_config(a)), family_false_fail_of(load_config(b))
    assert fa["accuracy_drop_gates"] == 2 and fb["holm"] is True
    assert fb["accuracy_drop_false_fail"] < fa["accuracy_drop_false_fail"]


def _samples(variant, right):
    return tuple(Sample(config="c", variant=variant, task="t", question_id=f"q{i}", prompt_hash="h", gold="1",
                        completion="#### 1", token_ids=(1,), finish_reason="stop",
                        answers={"strict-numeric": "1", "flexible-numeric": "1"},
                        correct={"strict-numeric": r, "flexible-numeric": r}) for i, r in enumerate(right))


def test_holm_changes_the_verdict_of_a_marginal_accuracy_drop():
    # 200 questions; candidate A loses 12 and gains 4 (one-sided McNemar p = P(Bin(16,1/2) >= 12)),
    # candidate B loses 6 and gains 6 (p about 0.61): A alone is significant at 0.05, A with
    # Holm over two gates needs 2p < 0.05
    n = 200
    ref = [True] * 100 + [False] * 100
    a = list(ref)
    for i in range(12):
        a[i] = False
    for i in range(100, 104):
        a[i] = True
    b = list(ref)
    for i in range(6):
        b[i] = False
    for i in range(100, 106):
        b[i] = True
    p_a = float(stats.binom.sf(11, 16, 0.5))
    assert p_a < 0.05 and 2 * p_a >= 0.05
    m = Measurements(tasks={("ref", "t"): TaskMeasurement(samples=_samples("ref", ref)),
                            ("A", "t"): TaskMeasurement(samples=_samples("A", a)),
                            ("B", "t"): TaskMeasurement(samples=_samples("B", b))})

    def gates(mt):
        return [MaxAccuracyDrop(id=f"c/ref->{v}/t/max_accuracy_drop", config="c", variant=v, task="t",
                                baseline="ref", limit=0.5, pipeline="flexible-numeric", alpha=0.05,
                                multiple_testing=mt) for v in ("A", "B")]

    plain = evaluate_gates(gates("none"), m)
    holm = evaluate_gates(gates("holm"), m)
    assert [g.passed for g in plain] == [False, True]
    assert [g.passed for g in holm] == [True, True]
    assert "Holm-adjusted" in holm[0].detail
    assert n == len(ref)
