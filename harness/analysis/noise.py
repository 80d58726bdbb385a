"""Greedy-output noise: a candidate's output mismatches judged against the baseline's own
mismatches (a rerun of the baseline in the same run, or a stored noise rate).

Read by the ``min_output_match`` gate (:mod:`harness.analysis.gates`) through the
per-comparison measurement :attr:`harness.analysis.measurements.ComparisonMeasurement.noise`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeGuard

from harness.analysis.scoring import committed_divergence
from harness.analysis.stats import mcnemar_exact
from harness.records.measures import NoiseRecord, OutputMatchRecord
from harness.records.samples import Sample

#: The noise judgement is the record type itself (fields and meaning: :class:`NoiseRecord`).


def output_noise_rerun(
    baseline: Sequence[Sample], rerun: Sequence[Sample], candidate: Sequence[Sample]
) -> NoiseRecord:
    """Judge the candidate's output mismatches against a rerun of the baseline.

    Args:
        baseline: the baseline variant's samples (pass 1), one task.
        rerun: the same variant's samples of the same task from pass 2.
        candidate: the candidate variant's samples of the same task.

    Returns:
        :class:`NoiseRecord`. Only questions that succeeded with token ids in all
        three are compared; per question, "candidate mismatch" = candidate token ids
        differ from pass 1, "noise mismatch" = pass 2 differs from pass 1; the paired
        exact one-sided McNemar test is then taken over those questions (see
        :class:`NoiseRecord` ``test``). ``noise_*`` counts are over the questions
        compared between pass 1 and pass 2.
    """
    def usable(x: Sample | None) -> TypeGuard[Sample]:
        return x is not None and x.ok and x.token_ids is not None

    r2 = {x.question_id: x for x in rerun}
    cd = {x.question_id: x for x in candidate}
    noise_cmp, noise_div = 0, []
    both, cand_only, noise_only, cand_mm = 0, [], [], 0
    for a in baseline:
        b2, c = r2.get(a.question_id), cd.get(a.question_id)
        if not (usable(a) and usable(b2)):
            continue
        noise_cmp += 1
        dn = committed_divergence(a, b2)
        if dn is not None:
            noise_div.append((a.question_id, dn))
        if not usable(c):
            continue
        both += 1
        dc = committed_divergence(a, c)
        cand_mm += dc is not None
        if dc is not None and dn is None:
            cand_only.append(a.question_id)
        elif dc is None and dn is not None:
            noise_only.append(a.question_id)
    return NoiseRecord(
        source="rerun",
        noise_compared=noise_cmp,
        noise_mismatched=len(noise_div),
        noise_rate=len(noise_div) / noise_cmp if noise_cmp else 0.0,
        noise_first_divergences=tuple(noise_div),
        compared=both,
        candidate_mismatched=cand_mm,
        candidate_rate=cand_mm / both if both else None,
        candidate_only=tuple(cand_only),
        noise_only=tuple(noise_only),
        test="mcnemar_exact_one_sided",
        p_value=mcnemar_exact(len(cand_only), len(noise_only), alternative="greater"),
    )


def output_noise_stored(candidate: OutputMatchRecord, rate: float, measured_on: int | None = None) -> NoiseRecord:
    """Judge the candidate's output mismatches against a stored noise rate ``rate``
    (fraction in [0, 1]).

    ``measured_on`` None: the rate is treated as known, the exact one-sided binomial test
    ``P(Binomial(compared, rate) >= mismatched)`` (``scipy.stats.binomtest``). ``measured_on``
    n0: the rate carries its uncertainty: it is taken as round(rate n0) mismatches of n0
    questions and compared with the candidate's by Fisher's exact one-sided test of the 2x2
    table [[mismatched, compared - mismatched], [x0, n0 - x0]] (H1: the candidate mismatches
    more often; Fisher 1935, ``scipy.stats.fisher_exact``), a two-sample test.

    Raises:
        ValueError: ``rate`` outside [0, 1], or ``measured_on`` < 1.
    """
    from scipy import stats as _st

    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"noise rate must be in [0, 1], got {rate!r}")
    if measured_on is not None and measured_on < 1:
        raise ValueError(f"measured_on must be >= 1, got {measured_on!r}")
    k, n = len(candidate.mismatches), candidate.compared
    if measured_on is None:
        p = float(_st.binomtest(k, n, rate, alternative="greater").pvalue) if n else 1.0
        test = "binomial_one_sided"
    else:
        x0 = round(rate * measured_on)
        p = float(_st.fisher_exact([[k, n - k], [x0, measured_on - x0]], alternative="greater")[1]) if n else 1.0
        test = "fisher_one_sided_two_sample"
    return NoiseRecord(
        source="stored", noise_compared=None, noise_mismatched=None, noise_rate=rate,
        noise_first_divergences=(), compared=n, candidate_mismatched=k,
        candidate_rate=k / n if n else None, candidate_only=(), noise_only=(),
        test=test, p_value=p,
    )
