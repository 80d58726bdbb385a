"""Judging: raw engine completions become scored samples (the task stage's half of a run).

The engine session returns :class:`~harness.records.completions.Completion` records
and nothing else; this module pairs each with its request and applies the task's
answer extraction (:func:`harness.tasks.answers.judge`, the same for the synthetic
task, whose items use GSM8K's ``#### N`` form), giving one
:class:`~harness.records.samples.Sample` per completion.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.records.completions import Completion, unfinished_error
from harness.records.samples import Sample
from harness.tasks.answers import judge
from harness.tasks.requests import Request


def judge_completion(config: str, variant: str, task: str, request: Request, c: Completion,
                     vllm_rules: bool = False) -> Sample:
    """One judged sample from one request and its completion.

    Args:
        config, variant, task: names for the sample.
        request: the request sent (question id, prompt hash, gold answer).
        c: the engine's completion of ``request``.
        vllm_rules: also judge by vLLM's rule (pipeline ``vllm``, :func:`judge`).

    Returns:
        A :class:`Sample`; when ``c.error`` is set it carries the error and no
        verdicts (a failed request is never scored as a wrong answer).

    Raises:
        ValueError: ``c.request_id`` is not ``request.question_id`` (a pairing bug),
            or the gold answer is not a number (from :func:`judge`).
    """
    if c.request_id != request.question_id:
        raise ValueError(f"completion {c.request_id!r} paired with request {request.question_id!r}")
    # keyword arguments of Sample shared by both outcomes (its field types check them)
    spec: dict[str, Any] = dict(
        spec_drafts=c.spec_drafts, spec_draft_tokens=c.spec_draft_tokens,
        spec_accepted_tokens=c.spec_accepted_tokens, spec_accepted_per_pos=c.spec_accepted_per_pos,
        spec_decoding=c.spec_decoding, sent_after_start_s=c.sent_after_start_s, prompt_tokens=c.prompt_tokens,
    )
    common: dict[str, Any] = dict(
        config=config, variant=variant, task=task, question_id=request.question_id,
        prompt_hash=request.prompt_hash, gold=request.gold, attempts=c.attempts,
        latency_s=round(c.latency_s, 4), seed=c.seed, **spec,
    )
    error = c.error or unfinished_error(c.request_id, c.finish_reason)
    if error is not None:  # the finish reason is kept: abort / error say why
        return Sample(error=error, finish_reason=c.finish_reason, stop_reason=c.stop_reason, **common)
    answers, correct = judge(c.text or "", request.gold, vllm_rules)
    return Sample(
        completion=c.text, token_ids=c.token_ids, finish_reason=c.finish_reason,
        stop_reason=c.stop_reason, answers=answers, correct=correct, top_logprobs=c.top_logprobs, **common,
    )


def judge_completions(
    config: str, variant: str, task: str, requests: Sequence[Request], completions: Sequence[Completion],
    vllm_rules: bool = False,
) -> tuple[Sample, ...]:
    """Judge a task's completions, in request order.

    Args:
        requests: the task's requests, in order.
        completions: one per request, in the same order (as
            :meth:`harness.engine.session.VariantSession.run_task` returns them).
        vllm_rules: also judge by vLLM's rule (pipeline ``vllm``; a task with ``vllm_rules``).

    Returns:
        One :class:`Sample` per request.

    Raises:
        ValueError: the two sequences differ in length or pairing.
    """
    if len(requests) != len(completions):
        raise ValueError(f"{config}/{variant}/{task}: {len(requests)} requests but {len(completions)} completions")
    return tuple(judge_completion(config, variant, task, r, c, vllm_rules) for r, c in zip(requests, completions))
