"""Raw completions: what the engine session hands the task stage, before any judging.

The engine stage (:mod:`harness.engine.session`) sends requests and returns one
:class:`Completion` per request; the task stage (:func:`harness.tasks.judge_completions`)
turns them into judged :class:`~harness.records.samples.Sample` records. A failed
request is a completion with ``error`` set and no text: it is never judged.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

#: Finish reasons of a request the engine finished normally: vLLM's ``FinishReason``
#: (``vllm/v1/engine/__init__.py``) has ``stop`` (a stop string or token, or end of
#: sequence) and ``length`` (``max_tokens`` or the model length), and also ``abort``
#: (aborted), ``error`` (a request-level internal error) and ``repetition`` (a repetitive
#: pattern detected), which are not answers. Any reason other than these two, or none on
#: a successful response, makes the request an error (:func:`unfinished_error`).
NORMAL_FINISH_REASONS = ("stop", "length")


def unfinished_error(request_id: str, finish_reason: str | None) -> str | None:
    """The error of a request the engine did not finish normally, or None.

    Args:
        request_id: the request's id (named in the message).
        finish_reason: the response's ``finish_reason`` (None: not reported).

    Returns:
        None for :data:`NORMAL_FINISH_REASONS`; else a message naming the request and
        the finish reason: such a completion is never judged as an answer.
    """
    if finish_reason in NORMAL_FINISH_REASONS:
        return None
    said = "no finish reason" if finish_reason is None else f"finish_reason {finish_reason!r}"
    return (f"request {request_id}: the engine did not finish it normally ({said}; only "
            f"{' / '.join(NORMAL_FINISH_REASONS)} are answers): a request error, never scored")


@dataclass(frozen=True, kw_only=True)
class EngineReply:
    """What the engine returned for one request, as both the raw :class:`Completion`
    and the judged :class:`~harness.records.samples.Sample` carry it (keyword fields).

    Attributes:
        token_ids: completion token ids (``return_token_ids``); None on error or when
            the server did not return them.
        finish_reason: ``stop`` / ``length`` / ... as returned; None when the request got no
            answer. Kept on an error too: a finish reason outside
            :data:`NORMAL_FINISH_REASONS` (``abort``, ``error``) is itself a request error
            (:func:`unfinished_error`), never scored.
        error: None on success, else a message naming the request and the failure
            (HTTP status and body, transport error, timeout, malformed response).
        attempts: HTTP attempts made (>= 1).
        latency_s: seconds of the successful (or last) attempt.
        spec_drafts, spec_draft_tokens, spec_accepted_tokens: this request's share of
            the engine's cumulative speculative-decoding counters (drafts, draft tokens,
            accepted draft tokens; counts), measured by reading ``/metrics`` before and
            after the request when requests are sent one at a time
            (``per_request_metrics``); else None.
        spec_accepted_per_pos: accepted tokens per draft position (counts), or None.
            With ``--per-request-spec-decode-metrics`` on the server, these four come from
            the response's own ``metrics.speculative_decoding`` at any concurrency
            (:func:`harness.records.spec_request.reply_fields`).
        spec_decoding: that ``metrics.speculative_decoding`` dict as vLLM reported it
            (its field names, :class:`harness.records.spec_request.SpecDecodingMetrics`),
            or None.
        sent_after_start_s: seconds from the server being ready to this request being
            sent; set only beside ``spec_decoding`` (acceptance by uptime), else None.
        prompt_tokens: the prompt's tokens as the engine counted them (``usage.prompt_tokens``);
            set only beside ``spec_decoding`` (acceptance by prompt length), else None.
        stop_reason: what ended a ``stop`` completion, as vLLM reports it: the stop
            string that matched, a stop token id, or None (end-of-sequence token,
            ``length``, an error, or a server that does not report it).
        top_logprobs: per completion token, the engine's top-k ``(token id, log-probability
            in nats)`` pairs, most likely first (the sampled token is included even when
            outside the top k); asked only of a non-speculative reference
            (``logprobs: k``); None otherwise. See :func:`harness.engine.client.parse_top_logprobs`.
        seed: the ``seed`` the request sent (:meth:`harness.config.schema.TaskSpec.request_seed`);
            None when none was sent.
    """

    token_ids: tuple[int, ...] | None = None
    finish_reason: str | None = None
    error: str | None = None
    attempts: int = 1
    latency_s: float = 0.0
    spec_drafts: float | None = None
    spec_draft_tokens: float | None = None
    spec_accepted_tokens: float | None = None
    spec_accepted_per_pos: tuple[float, ...] | None = None
    stop_reason: str | int | None = None
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...] | None = None
    seed: int | None = None
    spec_decoding: dict | None = None
    sent_after_start_s: float | None = None
    prompt_tokens: int | None = None

    @property
    def ok(self) -> bool:
        """True when the request succeeded (a judged sample may still be a wrong answer): no
        error, and no finish reason outside :data:`NORMAL_FINISH_REASONS` (None is allowed:
        prompt-scoring tasks generate nothing)."""
        return self.error is None and (self.finish_reason is None or self.finish_reason in NORMAL_FINISH_REASONS)


@dataclass(frozen=True)
class Completion(EngineReply):
    """The engine's answer to one ``/v1/completions`` request, unjudged: the request's
    id and text beside the :class:`EngineReply` fields (keywords).

    Attributes:
        request_id: the caller's id (the question id, e.g. ``gsm8k/test/17``).
        text: completion text; None when the request failed.
    """

    request_id: str
    text: str | None

    def to_json(self) -> dict:
        """Every field, the request's id and text first (the ``<task>.raw.jsonl`` line)."""
        d = dataclasses.asdict(self)
        return {"request_id": d.pop("request_id"), "text": d.pop("text"), **d}


def write_raw_jsonl(path: Path, completions: Iterable[Completion]) -> int:
    """Write raw, unjudged completions to ``path`` (one JSON object per line, every
    :class:`Completion` field); return the count. Used when judging fails, so the
    engine's answers measured before the error are kept (``<task>.raw.jsonl``).

    Raises:
        OSError: the file cannot be written (atomic: no partial file is left).
    """
    from harness.records.atomic import write_atomic  # noqa: PLC0415 - looked up per call (tests replace it)

    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(c.to_json(), ensure_ascii=False) + "\n" for c in completions]
    write_atomic(path, "".join(lines))
    return len(lines)


@dataclass(frozen=True)
class TokenScores:
    """The target model's view of one completion's tokens, read from vLLM's prompt
    log-probabilities on a non-speculative server (:func:`harness.engine.client.target_logprobs`).

    Attributes:
        logprobs: per completion token, its log-probability under the target (nats).
        ranks: per token, its rank under the target as vLLM reports it (1 = the target's
            most likely token: vLLM counts the vocabulary entries with a log-probability
            >= the token's, ``vllm/v1/sample/ops/logprobs.py``); None where not reported.
        pieces: per token, its text as vLLM decodes it alone (``decoded_token``); None
            where not reported (a server without a tokenizer).
    """

    logprobs: tuple[float, ...]
    ranks: tuple[int | None, ...]
    pieces: tuple[str | None, ...]


@dataclass(frozen=True)
class TargetScore:
    """The target model's log-likelihood of one sampled completion, scored on a
    non-speculative server (:func:`harness.engine.client.target_logprobs`): the sampled
    verdict's per-question measurement (``<task>.target_logprobs.jsonl``).

    Attributes:
        question_id: the sample's question id.
        tokens: completion tokens scored (0: an empty completion).
        logprob_sum: sum of their log-probabilities under the target (nats); None on error.
        seed: the seed the sampling request sent (None: none sent).
        error: why the completion could not be scored (its request or the sample's), else None.
        top1: of the ``tokens`` scored, how many are the target's most likely token (rank
            1): the rank statistic of the sampled verdict; None when the scorer reported
            no ranks (or on error).
        past_stop: ids the engine returned past the stop string that ended the completion,
            left out of the score (both sides are scored on the committed tokens only,
            :func:`harness.analysis.sampled.committed_length`); None when the stop string
            could not be found in the scored tokens' text (nothing left out).
    """

    question_id: str
    tokens: int
    logprob_sum: float | None
    seed: int | None = None
    error: str | None = None
    top1: int | None = None
    past_stop: int | None = 0

    @property
    def mean_logprob(self) -> float | None:
        """Mean log-probability per completion token (nats); 0.0 for an empty completion
        (a fixed function of the completion, as the test needs); None on error."""
        if self.logprob_sum is None:
            return None
        return self.logprob_sum / self.tokens if self.tokens else 0.0

    @property
    def top1_share(self) -> float | None:
        """Share of the completion's tokens that are the target's most likely token; 0.0
        for an empty completion (as :attr:`mean_logprob`); None without ranks."""
        if self.top1 is None or self.logprob_sum is None:
            return None
        return self.top1 / self.tokens if self.tokens else 0.0

    def to_json(self) -> dict:
        """Every field, plus ``mean_logprob``."""
        return {**dataclasses.asdict(self), "mean_logprob": self.mean_logprob}
