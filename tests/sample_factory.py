"""Samples constructed by hand for the scoring, samples, gates, baseline and noise tests.

``constructed_sample(qid, right)`` is one judged request of config ``c``, task ``t``, and
``gsm8k_sample(qid, right)`` one of task ``gsm8k`` with a ``#### N`` completion: the same
answer under both numeric pipelines, right or wrong as given, or a failed request when
``error`` is set. ``binom_tail_ge`` is the expected p-value of a sign test, by hand.
"""

from __future__ import annotations

import math

from harness.records.samples import Sample


def constructed_sample(qid, right, ids=(1, 2, 3), error=None, answer="5", variant="v") -> Sample:
    """One judged sample (or a failed request when ``error`` is set); token ids ``ids``."""
    if error:
        return Sample("c", variant, "t", qid, "h", "5", error=error)
    return Sample(
        "c", variant, "t", qid, "h", "5", completion="x", token_ids=tuple(ids), finish_reason="stop",
        answers={"strict-numeric": answer, "flexible-numeric": answer},
        correct={"strict-numeric": right, "flexible-numeric": right},
    )


def gsm8k_sample(qid, right, ids=(1, 2, 3), variant="spec", phash=None, error=None) -> Sample:
    """One judged ``gsm8k`` sample of config ``c`` (a failed request when ``error`` is set)."""
    if error:
        return Sample("c", variant, "gsm8k", qid, phash or "h" + qid, "5", error=error)
    a = "5" if right else "4"
    return Sample("c", variant, "gsm8k", qid, phash or "h" + qid, "5", completion=f"#### {a}",
                  token_ids=tuple(ids), finish_reason="stop",
                  answers={"strict-numeric": a, "flexible-numeric": a},
                  correct={"strict-numeric": right, "flexible-numeric": right})


def binom_tail_ge(k: int, n: int) -> float:
    """P(Bin(n, 1/2) >= k), from binomial coefficients."""
    return sum(math.comb(n, j) for j in range(k, n + 1)) / 2**n
