"""A completion request of a task, and its prompt's hash.

Every request-sending task kind (``gsm8k``, ``synthetic``, ``shape``) builds
:class:`Request` objects when it is prepared; the engine session
(:meth:`harness.engine.session.VariantSession.run_task`) sends them and judging
(:mod:`harness.tasks.judging`) pairs each completion with its request.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

__all__ = ["Request", "prompt_hash"]


def prompt_hash(prompt: str) -> str:
    """First 16 hex digits of the SHA-256 of the UTF-8 ``prompt``."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Request:
    """One completion request of a task.

    Attributes:
        question_id: ``"{task}/test/{index}"``, e.g. ``"gsm8k/test/17"``.
        prompt: the full completion prompt (few-shot block + question).
        gold: the gold answer text of the test item (:attr:`harness.tasks.gsm8k.GsmItem.gold`).
        prompt_hash: first 16 hex digits of the SHA-256 of the UTF-8 prompt
            (:func:`prompt_hash`; same convention as
            :attr:`harness.records.samples.Sample.prompt_hash`).
        prompt_token_ids: when set, the prompt sent as these token ids instead of
            ``prompt`` (a traffic shape's exact lengths, :mod:`harness.tasks.shapes`).
        max_tokens: when set, this request's completion budget in tokens instead of the
            task's ``max_tokens`` (a traffic shape's outputs of different lengths).
    """

    question_id: str
    prompt: str
    gold: str
    prompt_hash: str
    prompt_token_ids: tuple[int, ...] | None = None
    max_tokens: int | None = None
