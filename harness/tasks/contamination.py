"""Few-shot contamination: a test question that is also a solved example.

A test question whose text appears among its own prompt's few-shot examples is
answered from the prompt, not by the model; a train split that shares questions
with the test split makes every few-shot prompt suspect. Both are found by
comparing normalised question text (:func:`normalise_question`), and a task with
either is refused (:class:`ContaminationError`) unless the user overrides it
(``--allow-contamination``, recorded in the run record).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Sequence

from harness.tasks.gsm8k import GsmItem

__all__ = ["ContaminationError", "Overlaps", "find_overlaps", "normalise_question"]


class ContaminationError(ValueError):
    """Test questions overlap the few-shot examples or the train split; the message
    names the data source, the task and the overlapping question ids."""


def normalise_question(text: str) -> str:
    """Question text for comparison: Unicode NFKC, case-folded, every run of
    characters that are not letters or digits replaced by one space, stripped.
    So ``"How many  apples?"`` and ``"how many apples"`` compare equal."""
    t = unicodedata.normalize("NFKC", text).casefold()
    return re.sub(r"[\W_]+", " ", t).strip()


@dataclass(frozen=True)
class Overlaps:
    """Overlaps found for one task.

    Attributes:
        fewshot: ``(test question id, few-shot index)`` per asked test question
            whose text is one of the few-shot examples in its prompt.
        train: ``(test question id, train index)`` per asked test question whose
            text is in the train split.
    """

    fewshot: tuple[tuple[str, int], ...] = ()
    train: tuple[tuple[str, int], ...] = field(default_factory=tuple)

    @property
    def any(self) -> bool:
        """True when something overlaps."""
        return bool(self.fewshot or self.train)

    def to_json(self) -> dict[str, list[list[str | int]]]:
        """``{"fewshot": [[qid, index], ...], "train": [[qid, index], ...]}``."""
        return {"fewshot": [list(x) for x in self.fewshot], "train": [list(x) for x in self.train]}

    def describe(self, limit: int = 20) -> str:
        """One line per kind of overlap, naming at most ``limit`` ids each."""
        def ids(xs: Sequence[tuple[str, int]], what: str) -> str:
            shown = ", ".join(f"{q} = {what} {i}" for q, i in xs[:limit])
            return shown + (f" ... ({len(xs)} in all)" if len(xs) > limit else "")

        parts = []
        if self.fewshot:
            parts.append(f"{len(self.fewshot)} test question(s) are few-shot examples of their own prompt: "
                         + ids(self.fewshot, "few-shot example"))
        if self.train:
            parts.append(f"{len(self.train)} test question(s) are in the train split: " + ids(self.train, "train item"))
        return "; ".join(parts)


def find_overlaps(task: str, asked: Sequence[GsmItem], fewshot: Sequence[GsmItem],
                  train: Sequence[GsmItem] | None) -> Overlaps:
    """Compare the asked test questions with the few-shot examples and the train split.

    Args:
        task: task name (prefix of question ids, ``"{task}/test/{index}"``).
        asked: the test items the run asks.
        fewshot: the few-shot examples every prompt carries.
        train: the train split given (None when it was not loaded).

    Returns:
        :class:`Overlaps`, ids in test order.
    """
    shots = {normalise_question(x.question): i for i, x in enumerate(fewshot)}
    tr = {normalise_question(x.question): x.index for x in (train or ())}
    fs_hits, tr_hits = [], []
    for it in asked:
        key = normalise_question(it.question)
        qid = f"{task}/test/{it.index}"
        if key in shots:
            fs_hits.append((qid, shots[key]))
        if key in tr:
            tr_hits.append((qid, tr[key]))
    return Overlaps(tuple(fs_hits), tuple(tr_hits))
