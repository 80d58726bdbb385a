"""What every task hands the runner: requests, stop sequences and the dataset hash."""

from __future__ import annotations

from dataclasses import dataclass

from harness.tasks.gsm8k import Request


@dataclass(frozen=True)
class PreparedTask:
    """A task ready to send.

    Attributes:
        requests: one per question, in question order.
        stop: stop sequences for every request.
        dataset_hash: SHA-256 of the questions and few-shot items used (provenance).
        source: where the data came from (folder, hub id or generator).
        contamination: overlaps of test questions with the few-shot examples or the
            train split that the user allowed (``--allow-contamination``), as
            :meth:`harness.tasks.contamination.Overlaps.to_json`; None when none.
    """

    requests: tuple[Request, ...]
    stop: tuple[str, ...]
    dataset_hash: str
    source: str
    contamination: dict | None = None
