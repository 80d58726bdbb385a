"""harness.analysis.noise: output match against noise, from a rerun of the baseline variant
(paired test, first divergences) or from a stored noise rate (binomial test). Expected
p-values are binomial sums computed here with math.comb, not with harness code.
"""

from __future__ import annotations

import math

import pytest

from harness.analysis.noise import output_noise_rerun, output_noise_stored
from harness.analysis.scoring import output_match
from tests.sample_factory import binom_tail_ge
from tests.sample_factory import gsm8k_sample as s


def test_rerun_noise_paired_test_and_first_divergences():
    base = [s(f"q{i}", True, ids=(1, 2, 3, 4), variant="reference") for i in range(20)]
    rerun = list(base)
    rerun[0] = s("q0", True, ids=(1, 2, 9, 4), variant="reference")          # noise on q0, q1
    rerun[1] = s("q1", True, ids=(1, 9, 3, 4), variant="reference")
    cand = list(base)
    for i in (0, 2, 3, 4, 5, 6):                                             # candidate differs on 6
        cand[i] = s(f"q{i}", True, ids=(1, 2, 3, 7), variant="spec")
    nz = output_noise_rerun(base, rerun, cand)
    assert (nz.noise_compared, nz.noise_mismatched, nz.noise_rate) == (20, 2, 0.1)
    assert nz.noise_first_divergences == (("q0", 2), ("q1", 1))
    assert nz.candidate_only == ("q2", "q3", "q4", "q5", "q6") and nz.noise_only == ("q1",)
    assert nz.p_value == pytest.approx(binom_tail_ge(5, 6))                  # P(Bin(6, .5) >= 5)
    # a failed request on any side leaves the question out
    cand[7] = s("q7", None, variant="spec", error="boom")
    assert output_noise_rerun(base, rerun, cand).compared == 19


def test_stored_noise_binomial_test():
    base = [s(f"q{i}", True, ids=(1, 2), variant="reference") for i in range(30)]
    cand = [s(f"q{i}", True, ids=(1, 3) if i < 4 else (1, 2)) for i in range(30)]
    nz = output_noise_stored(output_match(base, cand), 0.05)
    p = sum(math.comb(30, k) * 0.05**k * 0.95 ** (30 - k) for k in range(4, 31))
    assert nz.p_value == pytest.approx(p) and nz.candidate_mismatched == 4
    assert output_noise_stored(output_match(base, cand), 0.0).p_value == 0.0
    with pytest.raises(ValueError):
        output_noise_stored(output_match(base, cand), 1.5)
