"""Samples constructed by hand for the scoring, samples and gates tests.

``constructed_sample(qid, right)`` is one judged request of config ``c``, task ``t``: the
same answer under both numeric pipelines, right or wrong as given, or a failed request
when ``error`` is set.
"""

from __future__ import annotations

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
