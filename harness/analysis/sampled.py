"""The sampled verdict's statistics: are two variants' sampled completions equally likely
under the target model?

Speculative decoding with rejection sampling promises the target's output distribution.
Two correct samplers draw different tokens, so the verdict compares distributions, not
tokens: every sampled completion of both variants is scored by the target model on a
non-speculative server (prompt log-probabilities, :func:`harness.engine.client.target_logprobs`),
and per question q the difference ``d_q = m_q(candidate) - m_q(baseline)`` of the mean
log-probability per completion token is formed.

H0: both variants sample from the target's distribution, independently across questions
and between the two variants (each question's own seed, another seed on each side, or no
seed). Then the two completions of a question are exchangeable, so each ``d_q`` is
symmetric about 0 and independent of the others: flipping the signs of any subset of
the ``d_q`` leaves their joint distribution unchanged. The sign-flip permutation test of
the mean difference (Fisher 1935; ``scipy.stats.permutation_test`` with
``permutation_type="samples"``) is then exact at any n, with no normality assumption
(the paired t-test, reported beside it, needs one; Wilcoxon's signed-rank test needs the
same symmetry but tests the median). Two-sided: a sampler that drifts toward the draft's
distribution, or sharpens it (higher likelihood) or flattens it (lower), shifts ``d``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import NormalDist

from harness.analysis.measurements import Measurements
from harness.config.gates import SampledEquivalence
from harness.config.gates.sampled import too_few_questions
from harness.records.completions import TargetScore
from harness.records.measures import SampledRecord

#: Sign flips drawn when 2^n exceeds it (beyond, every flip is enumerated: exact); the
#: p-value's Monte Carlo error at p = 0.05 is then sqrt(0.05 * 0.95 / 20000) = 0.0015.
RESAMPLES = 20000
#: Seed of the sign flips: the verdict is a pure function of the scores.
FLIP_SEED = 20261202


def sampled_test(a: Mapping[str, TargetScore], b: Mapping[str, TargetScore], scorer: str,
                 resamples: int = RESAMPLES) -> SampledRecord | None:
    """The paired sign-flip test of the target's mean log-probability per token.

    Args:
        a, b: question id -> :class:`TargetScore` of the baseline's / candidate's
            completions (scores with an error are left out, their ids in ``unscored``).
        scorer: the variant whose server scored them (recorded).
        resamples: sign flips drawn when ``2**n > resamples`` (else all are enumerated).

    Returns:
        :class:`SampledRecord`; None when no question is scored on both sides. The
        p-value is ``scipy.stats.permutation_test``'s: with R random flips
        ``(1 + #{|mean*| >= |mean|}) / (R + 1)`` (valid at any R), exact with all 2^n.
    """
    import numpy as np
    from scipy import stats

    ok = sorted(q for q in set(a) & set(b) if a[q].mean_logprob is not None and b[q].mean_logprob is not None)
    unscored = tuple(sorted((set(a) | set(b)) - set(ok)))
    if not ok:
        return None
    xa = np.array([a[q].mean_logprob for q in ok], dtype=float)
    xb = np.array([b[q].mean_logprob for q in ok], dtype=float)
    d = xb - xa
    n = len(ok)
    shift = float(d.mean())
    sd = float(d.std(ddof=1)) if n > 1 else 0.0
    t = shift / (sd / math.sqrt(n)) if sd > 0 else 0.0
    t_p = float(2 * stats.t.sf(abs(t), n - 1)) if sd > 0 and n > 1 else 1.0
    if not np.any(d):
        p, drawn = 1.0, 0
    else:
        exact = 2 ** n <= resamples
        res = stats.permutation_test(
            (xb, xa), lambda x, y, axis=-1: np.mean(x - y, axis=axis), permutation_type="samples",
            vectorized=True, n_resamples=resamples, alternative="two-sided",
            random_state=np.random.default_rng(FLIP_SEED))
        p, drawn = min(1.0, float(res.pvalue)), 0 if exact else resamples
    order = [ok[i] for i in np.argsort(d, kind="stable")[:5] if d[i] < 0]
    return SampledRecord(
        n=n, mean_a=float(xa.mean()), mean_b=float(xb.mean()),
        sum_a=float(np.mean([a[q].logprob_sum for q in ok])), sum_b=float(np.mean([b[q].logprob_sum for q in ok])),
        shift=shift, sd=sd, t=t, p_value=p, t_p_value=t_p, resamples=drawn, scorer=scorer,
        unscored=unscored, worst=tuple(order))


def detectable_shift(n: int, sd: float, alpha: float, power: float = 0.8) -> float:
    """The smallest shift of the mean log-probability per token (nats) the two-sided test
    at ``alpha`` detects with probability ``power`` on ``n`` questions, when the
    per-question differences have standard deviation ``sd``: the normal approximation
    ``(z_(1-alpha/2) + z_power) * sd / sqrt(n)`` (the sign-flip test's power approaches
    the t-test's at these n).

    Raises:
        ValueError: n < 1, sd <= 0, alpha or power outside (0, 1).
    """
    if n < 1 or sd <= 0 or not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"detectable_shift: n={n}, sd={sd}, alpha={alpha}, power={power} out of range")
    z = NormalDist().inv_cdf
    return (z(1 - alpha / 2) + z(power)) * sd / math.sqrt(n)


#: A sampled verdict: ``(observed p-value or None, limit, passed or None, detail, questions named)``.
Verdict = tuple["float | None", float, "bool | None", str, tuple[str, ...]]


def sampled_verdict(g: SampledEquivalence, m: Measurements, adjusted_p: float | None = None) -> Verdict:
    """The verdict of a ``sampled_equivalence`` gate: the two-sided sign-flip p-value of the
    shift of the target's mean log-probability per token (candidate - baseline;
    :class:`SampledRecord`) must be >= alpha (the Holm-adjusted p-value when
    ``adjusted_p`` is given). Dependent draws (``independent`` False): NOT RUN (None) with
    the reason. No scorer, a scoring error or no question scored on both sides: failed
    (the verdict it claims cannot be given). A failure names the questions whose
    candidate completion lost the most likelihood."""
    if not g.independent:
        return (None, g.limit, None, f"not run: {g.dependence}", ())
    if g.scorer is not None and (left := m.variant(g.scorer).not_run) is not None and "not selected" in left:
        return (None, g.limit, None, f"not run: the scorer {g.scorer} was left out ({left})", ())
    if g.scorer is None:
        return (None, g.limit, False, "no non-speculative variant in the config to score the sampled completions "
                "on (the candidate's own log-probabilities are not trusted under speculation)", ())
    errs = [f"{v}: {e}" for v in (g.baseline, g.variant) if (e := m.task(v, g.task).scoring_error)]
    st = m.comparison(g.baseline, g.variant, g.task).sampled
    if st is None:
        return (None, g.limit, False, "; ".join(errs) or "no question scored on both sides", ())
    if (small := too_few_questions(st.n, g.limit)) is not None:  # fewer paired than planned: cannot fail
        return (None, g.limit, None, f"not run: {st.n} question(s) scored on both sides: {small}", ())
    p = st.p_value if adjusted_p is None else adjusted_p
    ok = p >= g.limit
    how = "exact" if st.resamples == 0 else f"{st.resamples} random flips"
    detail = (f"target log-probability per token (scored on {st.scorer}): {g.baseline} {st.mean_a:.4f}, "
              f"{g.variant} {st.mean_b:.4f} nats on {st.n} paired questions; shift {st.shift:+.4f} nats/token "
              f"(sd {st.sd:.4f}), paired t = {st.t:.2f} (t-test p={st.t_p_value:.3g}); two-sided sign-flip "
              f"permutation p={st.p_value:.4g} ({how})"
              + (f", Holm-adjusted {adjusted_p:.4g}" if adjusted_p is not None else "")
              + f"; mean total log-probability {st.sum_a:.2f} -> {st.sum_b:.2f}")
    if st.unscored:
        detail += f"; {len(st.unscored)} question(s) not scored on both sides, left out"
    if errs:
        detail += "; scoring errors: " + "; ".join(errs)
    if not ok:
        detail += (f"; FAILED: the two variants do not sample from the same distribution (p={p:.4g} < alpha "
                   f"{g.limit:g}): {g.variant}'s completions are "
                   + ("less" if st.shift < 0 else "more") + " likely under the target")
    return (p, g.limit, ok and not errs, detail, st.worst if not ok else ())


