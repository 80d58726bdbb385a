"""Family-wise false-fail probability: the exact sum checked against a simulation that
uses the gate's own test (scipy's exact binomial test), not the code under test."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from harness.analysis.familywise import drop_gate_false_fail, family_false_fail
from harness.config.loader import load_config
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
