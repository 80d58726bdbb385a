"""Scores of one task on one variant, and output match between two variants.

Accuracy is computed over the requests that succeeded; failed requests are counted
apart (``error_count``, ``error_rate``) and never scored as wrong answers. A
completion from which a pipeline extracts no number is wrong and counts toward that
pipeline's ``invalid_rate`` (as in vLLM's ``gsm8k_eval.py``). A completion cut by
the token budget (``finish_reason == "length"``) is counted apart as **truncated**
(a different fact from a wrong answer; it may be both).

Output match compares what the model committed up to the stop: token ids an engine
returns beyond the point where a stop string ended the text (vLLM once returned
them under speculative decoding, when several accepted draft tokens overran the
stop) are not a greedy divergence; such pairs match and are listed apart
(:attr:`OutputMatchRecord.past_stop`).
"""

from __future__ import annotations

from typing import Literal, Sequence

from harness.analysis.stats import wilson_interval
from harness.records.measures import (
    AnswerAgreementRecord,
    MismatchRecord,
    OutputMatchRecord,
    PastStopRecord,
    PipelineScore,
    TaskScore,
)
from harness.records.samples import Sample
from harness.tasks.answers import GSM8K_PIPELINES as PIPELINES
from harness.tasks.numbers import parse_number

#: The analysis' names of the record types it returns (the same types, not copies).


def score_task(samples: Sequence[Sample], pipelines: Sequence[str] = PIPELINES) -> TaskScore:
    """Score the samples of one task on one variant.

    Args:
        samples: the task's samples (any order).
        pipelines: answer pipeline names to report; a pipeline that some successful
            sample does not carry (lm-eval's pipelines without lm-eval installed) is
            left out rather than scored as wrong.

    Returns:
        :class:`TaskScore`; Wilson intervals per :func:`harness.analysis.stats.wilson_interval`.
    """
    ok = [s for s in samples if s.ok]
    errors = len(samples) - len(ok)
    acc: dict[str, PipelineScore] = {}
    for p in pipelines:
        if not all(p in s.correct for s in ok):
            continue
        correct = sum(1 for s in ok if s.correct.get(p))
        invalid = sum(1 for s in ok if s.answers.get(p) is None)
        n = len(ok)
        acc[p] = PipelineScore(
            correct=correct,
            scored=n,
            accuracy=correct / n if n else None,
            accuracy_ci=wilson_interval(correct, n) if n else None,
            invalid_rate=invalid / n if n else None,
        )
    reasons: dict[str, int] = {}
    stops: dict[str, int] = {}
    for s in ok:
        reasons[str(s.finish_reason)] = reasons.get(str(s.finish_reason), 0) + 1
        if s.finish_reason == "stop":
            key = stop_reason_label(s.stop_reason)
            stops[key] = stops.get(key, 0) + 1
    cut = tuple(s.question_id for s in ok if is_truncated(s))
    return TaskScore(
        num_requests=len(samples),
        error_count=errors,
        error_rate=errors / len(samples) if samples else 0.0,
        accuracy=acc,
        finish_reasons=reasons,
        truncated=len(cut),
        truncated_rate=len(cut) / len(ok) if ok else None,
        truncated_ids=cut,
        stop_reasons=stops,
    )


def is_truncated(s: Sample) -> bool:
    """True when a successful completion was cut by the token budget
    (OpenAI ``finish_reason == "length"``)."""
    return s.ok and s.finish_reason == "length"


def stop_reason_label(reason: str | int | None) -> str:
    """A stop reason as a table key: the stop string as is, ``"token <id>"`` for a
    stop token id, ``"eos"`` for None (vLLM reports None for the end-of-sequence token)."""
    if reason is None:
        return "eos"
    if isinstance(reason, int):
        return f"token {reason}"
    return str(reason)


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token of two id sequences, None when identical.

    When one is a prefix of the other, the index is the shorter length.
    """
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    if len(a) != len(b):
        return min(len(a), len(b))
    return None


def committed_divergence(a: Sample, b: Sample) -> int | None:
    """First divergence of two successful samples' token ids up to the stop.

    None when the ids are identical, or when the texts are identical and one id
    sequence is a proper prefix of the other (ids past the stop; see
    :func:`output_match`); else :func:`first_divergence` of the ids.

    Raises:
        ValueError: either sample has no token ids.
    """
    if a.token_ids is None or b.token_ids is None:
        raise ValueError(f"{a.question_id}: token ids missing, cannot compare outputs")
    idx = first_divergence(a.token_ids, b.token_ids)
    if idx is not None and a.completion == b.completion and idx == min(len(a.token_ids), len(b.token_ids)):
        return None
    return idx


def output_match(baseline: Sequence[Sample], candidate: Sequence[Sample]) -> OutputMatchRecord:
    """Compare completions question by question, up to the stop.

    Two completions match when their token ids are identical, or when their texts
    are identical and one id sequence is a proper prefix of the other: the longer
    side carries ids past the point where a stop string ended the text (the text,
    cut at the stop, is what the model committed). Such pairs are listed in
    :attr:`OutputMatchRecord.past_stop`. Texts that are equal while the ids differ inside
    the shorter sequence remain a mismatch (without the tokenizer evalrun cannot
    tell where the text ends in ids, so it does not guess).

    Args:
        baseline: samples of the baseline variant.
        candidate: samples of the candidate variant (same task).

    Returns:
        :class:`OutputMatchRecord` over the questions present in both.
    """
    cand = {s.question_id: s for s in candidate}
    compared = matched = 0
    mism: list[MismatchRecord] = []
    skipped: list[str] = []
    past: list[PastStopRecord] = []
    for a in baseline:
        b = cand.get(a.question_id)
        if b is None:
            continue
        if not (a.ok and b.ok) or a.token_ids is None or b.token_ids is None:
            skipped.append(a.question_id)
            continue
        compared += 1
        idx = committed_divergence(a, b)
        if idx is None:
            matched += 1
            if len(a.token_ids) == len(b.token_ids):
                continue
            longer: Literal["baseline", "candidate"] = (
                "baseline" if len(a.token_ids) > len(b.token_ids) else "candidate")
            common = min(len(a.token_ids), len(b.token_ids))
            past.append(PastStopRecord(question_id=a.question_id, side=longer,
                                       extra_ids=abs(len(a.token_ids) - len(b.token_ids)), common_ids=common))
        else:
            mism.append(
                MismatchRecord(
                    question_id=a.question_id,
                    first_divergence=idx,
                    baseline_text=a.completion or "",
                    candidate_text=b.completion or "",
                    baseline_tokens=len(a.token_ids),
                    candidate_tokens=len(b.token_ids),
                )
            )
    return OutputMatchRecord(
        compared=compared,
        matched=matched,
        output_match_rate=matched / compared if compared else None,
        mismatches=tuple(mism),
        skipped=tuple(skipped),
        past_stop=tuple(past),
    )


def correctness(samples: Sequence[Sample], pipeline: str) -> dict[str, bool]:
    """Question id -> verdict of ``pipeline`` for the successful samples that carry
    that pipeline (for paired stats); a sample without it is left out, not counted wrong."""
    return {s.question_id: bool(s.correct[pipeline]) for s in samples if s.ok and pipeline in s.correct}


def answer_agreement(baseline: Sequence[Sample], candidate: Sequence[Sample], pipeline: str) -> AnswerAgreementRecord:
    """Compare the extracted answers of ``pipeline`` question by question.

    Answers are compared as exact decimals (:func:`harness.tasks.numbers.parse_number`,
    so ``"5,600"`` equals ``"5600"``), as text when either is not a number (an lm_eval
    task's non-numeric answers); a question failed on either side, or without this
    pipeline on either side (lm-eval's pipelines without lm-eval), is skipped.
    """

    def same(x: str | None, y: str | None) -> bool:
        px, py = parse_number(x), parse_number(y)
        return px == py if (px is not None and py is not None) or (x is None and y is None) else x == y

    cand = {s.question_id: s for s in candidate}
    compared = agreed = 0
    diff: list[str] = []
    for a in baseline:
        b = cand.get(a.question_id)
        if b is None or not (a.ok and b.ok) or pipeline not in a.answers or pipeline not in b.answers:
            continue
        compared += 1
        if same(a.answers.get(pipeline), b.answers.get(pipeline)):
            agreed += 1
        else:
            diff.append(a.question_id)
    return AnswerAgreementRecord(pipeline=pipeline, compared=compared, agreed=agreed,
                                 agreement_rate=agreed / compared if compared else None, disagreements=tuple(diff))
