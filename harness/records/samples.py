"""Sample records: one immutable record per request, written as JSONL.

A sample carries its own evidence (prompt hash, completion text, token ids, finish
reason, extracted answers) and its verdicts. A request that failed is a sample with
``error`` set and verdicts ``None``: it is never scored as a wrong answer.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from harness.records.completions import EngineReply
from harness.records.files import MAX_SAMPLES_BYTES, read_bytes, read_text
from harness.records.text import clean_json

_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Sample(EngineReply):
    """One request of one task on one variant: where it belongs, its prompt and gold
    answer, the completion and its verdicts, beside the engine's
    :class:`~harness.records.completions.EngineReply` fields (keywords: token ids,
    finish and stop reason, error, attempts, latency, per-request counters, top-k
    log-probabilities).

    Attributes:
        config: config name (the YAML file's stem).
        variant: variant name, e.g. ``reference`` or ``spec_async``.
        task: task name, e.g. ``gsm8k``.
        question_id: stable id of the question within the task, e.g. ``gsm8k/test/17``.
        prompt_hash: first 16 hex digits of the SHA-256 of the UTF-8 prompt text.
        gold: the gold answer as written in the data set (e.g. ``"5,600"``).
        completion: the completion text, ``None`` when the request failed.
        answers: extracted answer per pipeline name (``strict-numeric``,
            ``flexible-numeric``); a value is ``None`` when the pipeline found nothing.
        correct: verdict per pipeline name; empty when the request failed.

    ``top_logprobs`` is carried only by a non-speculative variant asked with
    ``logprobs: k`` (the output-match reference, :mod:`harness.analysis.divergence`).
    The four ``spec_*`` fields, ``stop_reason``, ``top_logprobs``, ``seed`` (None: none
    sent), ``spec_decoding``, ``sent_after_start_s`` and ``prompt_tokens`` are optional: they are left out of
    the JSON when ``None``, so JSONL files written without them read back unchanged.
    """

    config: str
    variant: str
    task: str
    question_id: str
    prompt_hash: str
    gold: str
    completion: str | None = None
    answers: dict[str, str | None] = dataclasses.field(default_factory=dict)
    correct: dict[str, bool] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict:
        """Return a JSON-serialisable dict (token ids as a list)."""
        # shallow (dataclasses.asdict deep-copies every token id: most of a run's record-writing CPU)
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields["answers"], fields["correct"] = dict(self.answers), dict(self.correct)
        d = {k: fields.pop(k) for k in _JSON_HEAD}
        d.update(fields)
        d["token_ids"] = list(self.token_ids) if self.token_ids is not None else None
        for k in _OPTIONAL:
            if d[k] is None:
                del d[k]
        if d.get("spec_accepted_per_pos") is not None:
            d["spec_accepted_per_pos"] = list(d["spec_accepted_per_pos"])
        if d.get("top_logprobs") is not None:
            d["top_logprobs"] = [[[t, lp] for t, lp in pos] for pos in d["top_logprobs"]]
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Sample":
        """Build a sample from :meth:`to_json` output.

        Raises:
            TypeError: on unknown or missing fields.
        """
        d = dict(d)
        if d.get("token_ids") is not None:
            d["token_ids"] = tuple(d["token_ids"])
        if d.get("spec_accepted_per_pos") is not None:
            d["spec_accepted_per_pos"] = tuple(d["spec_accepted_per_pos"])
        if d.get("top_logprobs") is not None:
            d["top_logprobs"] = tuple(tuple((int(t), float(lp)) for t, lp in pos) for pos in d["top_logprobs"])
        return cls(**d)


#: The first keys of a sample's JSON line, in this order; the other fields follow in
#: :class:`~harness.records.completions.EngineReply`'s order.
_JSON_HEAD = ("config", "variant", "task", "question_id", "prompt_hash", "gold", "completion", "token_ids",
              "finish_reason", "answers", "correct")

#: Fields left out of :meth:`Sample.to_json` when None (added after the first format).
_OPTIONAL = ("spec_drafts", "spec_draft_tokens", "spec_accepted_tokens", "spec_accepted_per_pos", "stop_reason",
             "top_logprobs", "seed", "spec_decoding", "sent_after_start_s",
             "prompt_tokens")


def write_jsonl(path: Path, samples: Iterable[Sample]) -> int:
    """Write samples to ``path`` (one JSON object per line); return the count.

    Atomic (:func:`harness.records.atomic.write_atomic`): a failed write leaves no
    partial file and an earlier file unchanged.

    Raises:
        OSError: the folder or file cannot be written (names the path).
    """
    from harness.records.atomic import write_atomic  # noqa: PLC0415 - looked up per call (tests replace it)

    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [_line(s.to_json()) for s in samples]
    write_atomic(path, "".join(lines))
    return len(lines)


def _line(d: dict) -> str:
    """One JSONL line; lone surrogates -> U+FFFD (:func:`clean_json`: UTF-8 cannot encode
    them), the copy made only for a line that has one (``ensure_ascii=False`` writes them
    as they are)."""
    line = json.dumps(d, ensure_ascii=False)
    if _SURROGATE.search(line):
        line = json.dumps(clean_json(d), ensure_ascii=False)
    return line + "\n"


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes (a samples file's content hash, in the run record).

    Raises:
        OSError: the file cannot be read, is not a regular file or is too large
            (:func:`harness.records.files.read_bytes`).
    """
    return hashlib.sha256(read_bytes(path, MAX_SAMPLES_BYTES, "samples file")).hexdigest()


def _non_finite(text: str) -> float:
    raise ValueError(f"non-finite number {text} (a sample holds finite numbers only)")


def _finite(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        _non_finite(text)
    return x


def read_jsonl(path: Path) -> list[Sample]:
    """Read samples written by :func:`write_jsonl`.

    Raises:
        OSError: the file cannot be read, is not a regular file or is too large
            (:func:`harness.records.files.read_text`, naming it).
        ValueError: naming the file and line when a line is not a valid sample (a
            non-finite number such as ``NaN`` included), or when a
            question appears twice (the same config, variant, task and question id: one
            request has one sample; the message names both lines).
    """
    out: list[Sample] = []
    seen: dict[tuple[str, str, str, str], int] = {}
    text = read_text(path, MAX_SAMPLES_BYTES, "samples file")
    for lineno, line in enumerate(text.split("\n"), 1):  # only "\n" ends a line (not U+2028)
        if not line.strip():
            continue
        try:
            s = Sample.from_json(json.loads(line, parse_constant=_non_finite, parse_float=_finite))
        except (json.JSONDecodeError, TypeError, ValueError) as e:
            raise ValueError(f"{path}:{lineno}: not a sample record: {e}") from e
        key = (s.config, s.variant, s.task, s.question_id)
        if key in seen:
            raise ValueError(f"{path}:{lineno}: field 'question_id': {s.question_id!r} is also the sample of "
                             f"line {seen[key]} (one request has one sample): the file is not valid")
        seen[key] = lineno
        out.append(s)
    return out


def iter_jsonl(path: Path) -> Iterator[Sample]:
    """Yield samples of a JSONL file (see :func:`read_jsonl`)."""
    yield from read_jsonl(path)
