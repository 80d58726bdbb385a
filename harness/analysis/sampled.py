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

The mean log-probability cannot see a distortion that keeps it (too sharp on some steps,
too flat on others: random temperatures). A second per-question statistic reads the
target's rank of each sampled token (vLLM's prompt log-probabilities return it): the
share of tokens that are the target's most likely one, ``top1``; its difference ``e_q`` is
symmetric under the same H0. Both are judged by ONE permutation test, the single-step
maxT of Westfall & Young (1993, "Resampling-Based Multiple Testing", sec. 2.6): the
statistic is ``max(|sum d| / sqrt(sum d^2), |sum e| / sqrt(sum e^2))`` (each sum
studentized by its sign-flip-invariant scale), and the same sign flips move both, so the
p-value is exact for the intersection H0 at any n, its smallest value is 2/2^n as for
one statistic (:func:`smallest_attainable_p`), and it spends the gate's one share of
alpha with no Bonferroni split (their correlation is used, not paid for).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import TYPE_CHECKING

from harness.records.completions import TargetScore
from harness.records.measures import SampledRecord

if TYPE_CHECKING:
    import numpy as np

#: Sign flips drawn when 2^n exceeds it (beyond, every flip is enumerated: exact); the
#: p-value's Monte Carlo error at p = 0.05 is then sqrt(0.05 * 0.95 / 20000) = 0.0015.
RESAMPLES = 20000
#: Seed of the sign flips: the verdict is a pure function of the scores.
FLIP_SEED = 20261202


def smallest_attainable_p(n: int) -> float:
    """The smallest p-value the sampled verdict's exact test can give on ``n`` paired
    questions: ``2 / 2**n`` (every sign alike; the sign flips come in pairs with equal
    statistic, the identity and all flipped), for the mean log-probability alone and for
    the maxT test of both statistics alike. A gate whose level is below it can never fail:
    report only (the false-alarm budget's rule reads it). 1.0 for n <= 1.

    Raises:
        ValueError: n < 0.
    """
    if n < 0:
        raise ValueError(f"smallest_attainable_p: n={n} < 0")
    return min(1.0, 2.0 / 2.0 ** min(n, 1100))


def committed_length(pieces: Sequence[str | None], stop: str | int | None) -> int | None:
    """How many of a completion's ids the engine committed: ids after the one that
    completes the stop string ``stop`` are cut. vLLM checks stop strings in its
    detokenizer after a whole step (``vllm/v1/engine/detokenizer.py``): the text is cut
    before the stop string, the token ids are not, and a speculative step that accepted
    several tokens returns ids past it, which a one-token-per-step reference never does.
    Both sides are cut by this one rule, so both are scored on what they committed.

    Args:
        pieces: each id's text as the scorer decodes it alone (``decoded_token``).
        stop: the sample's ``stop_reason``: a stop string cuts; a stop token id or None
            (end of sequence, ``length``) cuts nothing (the scheduler stops at the token).

    Returns:
        ``len(pieces)`` when nothing is cut; the index + 1 of the id with which the
        concatenated text first contains ``stop``; None when a piece is missing or the
        text never contains ``stop`` (the cut cannot be placed: nothing is cut).
    """
    if not isinstance(stop, str) or not stop:
        return len(pieces)
    text = ""
    for i, piece in enumerate(pieces):
        if piece is None:
            return None
        text += piece
        if stop in text[max(0, len(text) - len(piece) - len(stop)):]:
            return i + 1
    return None


def _max_t(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """Westfall-Young maxT statistic of paired rows: per row ``|sum d| / sqrt(sum d^2)``
    of ``d = x - y`` along ``axis`` (0 for a row of zeros), then the maximum over rows."""
    import numpy as np

    d = np.moveaxis(x - y, axis, -1)
    den = np.sqrt((d ** 2).sum(-1))
    safe = np.where(den > 0, den, 1.0)
    return np.asarray(np.where(den > 0, np.abs(d.sum(-1)) / safe, 0.0).max(-1))


def _flip_p(xb: np.ndarray, xa: np.ndarray, resamples: int) -> float:
    """Sign-flip p-value of :func:`_max_t` on rows ``xb`` vs ``xa`` (shape (k, n)):
    exact (all 2^n flips) when ``2**n <= resamples``, else ``resamples`` random flips
    (seed :data:`FLIP_SEED`); 1.0 when every difference is 0."""
    import numpy as np
    from scipy import stats

    if not np.any(xb - xa):
        return 1.0
    res = stats.permutation_test(
        (xb, xa), _max_t, permutation_type="samples", vectorized=True, n_resamples=resamples,
        alternative="greater", axis=-1, random_state=np.random.default_rng(FLIP_SEED))
    return min(1.0, float(res.pvalue))


def sampled_test(a: Mapping[str, TargetScore], b: Mapping[str, TargetScore], scorer: str,
                 resamples: int = RESAMPLES) -> SampledRecord | None:
    """The paired sign-flip test of the target's mean log-probability per token and, when
    the scorer reported ranks on both sides, of the share of target-top-1 tokens, both in
    one maxT test (module doc).

    Args:
        a, b: question id -> :class:`TargetScore` of the baseline's / candidate's
            completions (scores with an error are left out, their ids in ``unscored``).
        scorer: the variant whose server scored them (recorded).
        resamples: sign flips drawn when ``2**n > resamples`` (else all are enumerated).

    Returns:
        :class:`SampledRecord`; None when no question is scored on both sides. Its
        ``p_value`` (the gate's) is ``scipy.stats.permutation_test``'s: with R random
        flips ``(1 + #{T* >= T}) / (R + 1)`` (valid at any R), exact with all 2^n; with
        one statistic T = |mean d| / its invariant scale, the two-sided test of the mean.
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
    drawn = 0 if 2 ** n <= resamples else resamples
    lp_p = _flip_p(xb[None, :], xa[None, :], resamples)
    ranked = all(a[q].top1_share is not None and b[q].top1_share is not None for q in ok)
    top: dict[str, float | None] = {"top1_a": None, "top1_b": None, "top1_shift": None, "top1_p_value": None}
    p = lp_p
    if ranked:
        ra = np.array([a[q].top1_share for q in ok], dtype=float)
        rb = np.array([b[q].top1_share for q in ok], dtype=float)
        top = {"top1_a": float(ra.mean()), "top1_b": float(rb.mean()), "top1_shift": float((rb - ra).mean()),
               "top1_p_value": _flip_p(rb[None, :], ra[None, :], resamples)}
        p = _flip_p(np.stack([xb, rb]), np.stack([xa, ra]), resamples)
    if not np.any(d) and p == 1.0:
        drawn = 0
    order = [ok[i] for i in np.argsort(d, kind="stable")[:5] if d[i] < 0]
    cut_a = sum(a[q].past_stop or 0 for q in ok)
    cut_b = sum(b[q].past_stop or 0 for q in ok)
    return SampledRecord(
        n=n, mean_a=float(xa.mean()), mean_b=float(xb.mean()),
        sum_a=float(np.mean([a[q].logprob_sum for q in ok])), sum_b=float(np.mean([b[q].logprob_sum for q in ok])),
        shift=shift, sd=sd, t=t, p_value=p, t_p_value=t_p, resamples=drawn, scorer=scorer,
        unscored=unscored, worst=tuple(order), logprob_p_value=lp_p if ranked else None,
        past_stop_a=cut_a, past_stop_b=cut_b, **top)


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
