"""The false-alarm budget: one probability that an unchanged build fails any gate of a config
in one night, spent over every tested gate by Holm's procedure, and the margin tests the
gates take their p-values from.

The procedure (docs/gates.md, "The false-alarm budget"): every gate whose verdict can be
moved by noise (accuracy drops, acceptance-length and per-position drops, output match
against a noise reference, the sampled verdict) is a one-sided test of "the data show a
loss beyond the gate's margin" and gives a p-value (:class:`GateTest`). The family is every
such gate of the config that can reach its share; Holm's step-down procedure (Holm 1979,
Scand. J. Statist. 6:65-70; :func:`harness.analysis.familywise.holm_adjust`) over that
family at level ``false_alarm_budget`` keeps the probability that any of them fails an
unchanged build at most the budget, under any dependence between the gates. A gate whose
smallest attainable p-value is above its share (budget / family size) cannot fail at its
level: it is planned report-only (:func:`split_family`), judged NOT RUN with the reason.
The remaining gates are deterministic checks (errors, truncation, engine facts, floors):
they do not move with noise and are outside the family (the dry run names them).

Margin tests (a tolerance is a non-inferiority margin: a gate fails only when its test
shows a loss beyond it):

* paired accuracy (:func:`paired_margin_p`): exact, conditional on the discordant count;
* an accuracy floor (:func:`floor_p`): the exact one-sided binomial test of "accuracy below
  the floor" (a non-inferiority test of one proportion);
* a ratio of sums per request (mean acceptance length, per-position acceptance;
  :func:`ratio_estimate`, :func:`margin_p`): the request is the unit, the ratio
  estimator's variance is cluster-robust (Cochran, Sampling Techniques, 3rd ed., 1977,
  sec. 6.3, with the n/(n-1) small-sample factor), compared by Welch's t with
  Satterthwaite's degrees of freedom. Without per-request counts the stated conservative
  fallback is the largest variance a per-request value in [0, hi] can have at its mean
  (Bhatia and Davis 2000, Amer. Math. Monthly 107:353-357) with the request count as the
  sample size, i.e. every draft of a request taken as perfectly correlated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from harness.analysis.familywise import holm_adjust

__all__ = [
    "DEFAULT_FALSE_ALARM_BUDGET", "GateTest", "RatioEstimate", "floor_min_p", "floor_p", "margin_p",
    "paired_margin_p", "paired_min_p", "point_rule_false_fail", "ratio_estimate", "split_family", "holm_family",
]

#: Default ``false_alarm_budget``: at most one red night in a hundred on an unchanged build.
DEFAULT_FALSE_ALARM_BUDGET = 0.01


@dataclass(frozen=True)
class GateTest:
    """The test behind a gate's failing verdict.

    Attributes:
        p_value: one-sided p-value of "a loss beyond the margin" (two-sided where the gate
            is), in [0, 1].
        min_p: the smallest p-value the test can reach at this size (report-only above
            its share).
        what: one phrase naming the test, for the detail.
    """

    p_value: float
    min_p: float
    what: str


def paired_margin_p(b: int, c: int, n: int, margin: float) -> float:
    """Exact one-sided p-value that a paired accuracy drop exceeds ``margin``.

    With b questions right only in the baseline, c right only in the candidate, D = b + c
    and n paired questions, the drop is (b - c) / n = (D / n)(2q - 1), q the probability
    that a discordant question favours the baseline. Conditional on D (Mantel-Haenszel's
    conditioning of McNemar's test, McNemar 1947), "drop <= margin" is q <= q0 = (1 +
    margin n / D) / 2 and the p-value is ``P(Binomial(D, q0) >= b)`` (1.0 when q0 >= 1 or
    D = 0). With margin 0 it is the exact one-sided McNemar test. On an unchanged build
    q = 1/2 <= q0, so the test is exact-or-conservative there.

    Raises:
        ValueError: negative counts, n < b + c, or a negative margin.
    """
    if b < 0 or c < 0 or n < b + c or margin < 0:
        raise ValueError(f"paired_margin_p: need 0 <= b, c, b + c <= n and margin >= 0, got {b}, {c}, {n}, {margin}")
    d = b + c
    if d == 0:
        return 1.0
    q0 = (1.0 + margin * n / d) / 2.0
    if q0 >= 1.0:
        return 1.0
    from scipy import stats as _st

    return float(_st.binom.sf(b - 1, d, q0))


def paired_min_p(n: int, margin: float) -> float:
    """Smallest p-value :func:`paired_margin_p` can reach with n paired questions: every
    question right only in the baseline, ``((1 + margin) / 2) ** n`` (1.0 for n = 0)."""
    return 1.0 if n <= 0 else ((1.0 + margin) / 2.0) ** n


def floor_p(correct: int, n: int, floor: float) -> float:
    """Exact one-sided p-value that the accuracy is below ``floor``: H0 ``p >= floor`` against
    ``p < floor`` with ``correct`` of ``n`` questions right, ``P(Binomial(n, floor) <= correct)``
    (``scipy.stats.binomtest``, ``alternative="less"``; Clopper and Pearson 1934). ``floor`` is
    clipped to [0, 1]: a floor at or below 0 can never be shown violated (p = 1).

    Raises:
        ValueError: ``n < 1`` or ``correct`` outside [0, n].
    """
    if n < 1 or not 0 <= correct <= n:
        raise ValueError(f"floor_p: need n >= 1 and 0 <= correct <= n, got {correct}, {n}")
    f = min(max(floor, 0.0), 1.0)
    if f <= 0.0:
        return 1.0
    from scipy import stats as _st

    return float(_st.binomtest(correct, n, f, alternative="less").pvalue)


def floor_min_p(n: int, floor: float) -> float:
    """Smallest p-value :func:`floor_p` can reach with ``n`` questions: every answer wrong,
    ``P(Binomial(n, floor) = 0) = (1 - floor) ** n`` (1.0 for n = 0 or a floor at or below 0)."""
    f = min(max(floor, 0.0), 1.0)
    return 1.0 if n <= 0 or f <= 0.0 else (1.0 - f) ** n


def point_rule_false_fail(n: int, accuracy: float, limit: float) -> float:
    """Probability that a point rule ``correct / n >= limit`` (vLLM's floor, in floating
    point) fails a build whose true accuracy is ``accuracy``, its n answers independent:
    ``P(Binomial(n, accuracy) <= k)``, k the largest count with ``k / n < limit`` (0.0 when
    there is none; 1.0 for n = 0: vLLM's ``0 / 0`` is scored 0)."""
    if n <= 0:
        return 1.0 if limit > 0 else 0.0
    k = max((c for c in range(n + 1) if c / n < limit), default=None)
    if k is None:
        return 0.0
    from scipy import stats as _st

    return float(_st.binom.cdf(k, n, min(max(accuracy, 0.0), 1.0)))


@dataclass(frozen=True)
class RatioEstimate:
    """A ratio of sums over requests with its standard error.

    Attributes:
        value: sum(numerators) / sum(denominators).
        se: its standard error (request as the unit).
        n: requests.
        per_request: True: cluster-robust from per-request counts; False: the conservative
            fallback (module docstring).
    """

    value: float
    se: float
    n: int
    per_request: bool

    @property
    def df(self) -> int:
        """Degrees of freedom of its variance: n - 1 (at least 1)."""
        return max(self.n - 1, 1)


def ratio_estimate(num: Sequence[float] | None, den: Sequence[float] | None, *, total_num: float,
                   total_den: float, requests: int, hi: float) -> RatioEstimate | None:
    """The ratio total_num / total_den with its standard error, the request as the unit.

    Args:
        num, den: per-request numerators and denominators (e.g. accepted tokens and drafts),
            or None when the requests do not carry them.
        total_num, total_den: the task's totals (used when ``num`` is None).
        requests: requests of the task (the fallback's sample size).
        hi: the largest value a request's own ratio can take (k draft tokens for accepted
            tokens per draft, 1 for a per-position rate).

    Returns:
        With per-request counts: ``se^2 = n / (n - 1) * sum((a_i - R d_i)^2) / (sum d)^2``
        (the linearized ratio-estimator variance, Cochran 1977 sec. 6.3); without: ``se^2 =
        R (hi - R) / requests`` (Bhatia-Davis bound). None when the denominator is 0.
    """
    if num is not None and den is not None and len(num) >= 2 and sum(den) > 0:
        sd = float(sum(den))
        r = float(sum(num)) / sd
        n = len(num)
        ss = sum((a - r * d) ** 2 for a, d in zip(num, den))
        return RatioEstimate(r, math.sqrt(n / (n - 1) * ss) / sd, n, True)
    if total_den <= 0:
        return None
    r = total_num / total_den
    var = max(r, 0.0) * max(hi - r, 0.0) / max(requests, 1)
    return RatioEstimate(r, math.sqrt(var), max(requests, 1), False)


def margin_p(stat: float, var: float, df: float) -> float:
    """One-sided p-value that ``stat`` (an estimated loss beyond the margin, e.g. drop -
    margin) is above 0, with variance ``var``: ``P(T_df > stat / sqrt(var))`` (Student's t;
    Welch 1947). Zero variance: 0.0 when stat > 0, else 1.0."""
    if var <= 0.0:
        return 0.0 if stat > 0 else 1.0
    from scipy import stats as _st

    return float(_st.t.sf(stat / math.sqrt(var), df))


def welch_df(parts: Sequence[tuple[float, float]]) -> float:
    """Satterthwaite's degrees of freedom of a sum of variances ``(var_i, df_i)``
    (Satterthwaite 1946, Biometrics Bull. 2:110-114); 1.0 when the sum is 0."""
    tot = sum(v for v, _ in parts)
    den = sum(v * v / d for v, d in parts if d > 0)
    return tot * tot / den if den > 0 else 1.0


def split_family(min_ps: Sequence[float], budget: float) -> list[bool]:
    """Which tested gates can fail at their share of ``budget``: the largest k such that the
    k smallest attainable p-values are each at most ``budget / k``; those k gates form the
    family (True), the others are report-only (False). In input order."""
    order = sorted(range(len(min_ps)), key=lambda i: min_ps[i])
    keep = 0
    for k in range(len(order), 0, -1):
        if all(min_ps[order[j]] <= budget / k for j in range(k)):
            keep = k
            break
    inside = set(order[:keep])
    return [i in inside for i in range(len(min_ps))]


def holm_family(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values of the family (compared with the budget)."""
    return holm_adjust(list(p_values))
