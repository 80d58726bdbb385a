"""harness.analysis.scoring: scores, first divergence and output match on constructed samples;
expected values by hand."""

from __future__ import annotations

import math

import pytest

from harness.analysis.scoring import first_divergence, output_match, score_task
from tests.sample_factory import constructed_sample as s


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
