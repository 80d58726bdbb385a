"""GSM8K: data loading and few-shot completion prompts.

Conventions and their sources:

* Data: the ``openai/gsm8k`` ``main`` configuration (Cobbe et al. 2021), splits
  ``train`` (7473 items) and ``test`` (1319 items); each item has a ``question`` and
  an ``answer`` whose final line is ``#### <number>``.
* Prompts: plain completion prompts as in vLLM's ``tests/evals/gsm8k/gsm8k_eval.py``
  (``_build_gsm8k_prompts``): the first ``num_fewshot`` train items as
  ``Question: {q}\\nAnswer: {a}\\n\\n``, then ``Question: {q}\\nAnswer:``; one stop
  sequence, the blank line before the next ``Question:``
  (:data:`harness.tasks.stops.STOP_SEQUENCES`; vLLM's script also stops at the bare
  word ``Question``). The chat path sends vLLM's list
  (:data:`harness.tasks.stops.VLLM_GSM8K_STOP_SEQUENCES`).
* Answers are judged by the ``#### N`` format's pipelines (:mod:`harness.tasks.answers`);
  requests are :class:`harness.tasks.requests.Request` objects, sent with the stop
  sequences of :mod:`harness.tasks.stops`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Iterable, Sequence

import httpx

from harness.config.reader import present, read_text
from harness.tasks.numbers import parse_number
from harness.tasks.requests import Request, prompt_hash

if TYPE_CHECKING:  # datasets ships no type information: this names what is meant
    from datasets import Dataset

__all__ = [
    "DATA_DIR_ENV",
    "DEFAULT_NUM_FEWSHOT",
    "DataUnavailableError",
    "GsmItem",
    "HUB_DATASET",
    "SPLITS",
    "build_prompt",
    "build_requests",
    "dataset_hash",
    "load_gsm8k",
]

DATA_DIR_ENV = "EVALRUN_DATA_DIR"
"""Environment variable naming a folder with ``test.jsonl`` and ``train.jsonl``."""

HUB_DATASET = ("openai/gsm8k", "main")
"""Hugging Face hub dataset path and configuration used when no folder is given."""

SPLITS = ("test", "train")
"""Splits of GSM8K; a data folder holds one ``<split>.jsonl`` per split."""

DEFAULT_NUM_FEWSHOT = 5
"""Few-shot count of vLLM's gsm8k_eval.py (``--num-shots`` default)."""

_HOWTO = (
    "To provide GSM8K, pass --data-dir DIR or set EVALRUN_DATA_DIR=DIR, where DIR is a "
    "folder holding test.jsonl and train.jsonl (one JSON object per line: "
    '{"question": ..., "answer": "... #### N"}), or make the Hugging Face hub '
    "reachable (pip install datasets; dataset openai/gsm8k, config main; unset "
    "HF_DATASETS_OFFLINE/HF_HUB_OFFLINE)."
)

class DataUnavailableError(RuntimeError):
    """GSM8K could not be loaded; the message names the cause and how to provide it.

    Raised by :func:`load_gsm8k` for a missing folder or file, a malformed line
    (message starts with ``<file>:<line>:``), a missing ``datasets`` package, or an
    unreachable hub. The message always ends with the instructions: pass
    ``--data-dir DIR`` or set ``EVALRUN_DATA_DIR=DIR`` to a folder with test.jsonl
    and train.jsonl, or make the hub reachable.
    """

    def __init__(self, cause: str):
        super().__init__(f"GSM8K data unavailable: {cause}\n{_HOWTO}")
        self.cause = cause


@dataclass(frozen=True)
class GsmItem:
    """One GSM8K problem.

    Attributes:
        index: 0-based position in its split (line order of the JSONL / hub order).
        question: the problem text.
        answer: the full reference solution, ending with ``#### <number>``.
        gold: the text after the last ``####`` of ``answer``, stripped, exactly as
            written (e.g. ``"5,600"``, ``"-3"``); compare it with :func:`harness.tasks.answers.judge`.
    """

    index: int
    question: str
    answer: str
    gold: str


# --------------------------------------------------------------------------- data


def _item_from_row(row: object, index: int, where: str) -> GsmItem:
    """Validate one raw row and build a :class:`GsmItem`.

    Raises:
        DataUnavailableError: ``"{where}: ..."`` when the row is not a GSM8K item.
    """
    if not isinstance(row, dict):
        raise DataUnavailableError(f"{where}: expected a JSON object, got {type(row).__name__}")
    q, a = row.get("question"), row.get("answer")
    if not isinstance(q, str) or not isinstance(a, str):
        raise DataUnavailableError(
            f"{where}: expected string fields 'question' and 'answer', got keys {sorted(row)}"
        )
    if "####" not in a:
        raise DataUnavailableError(f"{where}: 'answer' has no '#### N' final line")
    gold = a.rsplit("####", 1)[1].strip()
    if parse_number(gold) is None:
        raise DataUnavailableError(f"{where}: gold answer {gold!r} after '####' is not a number")
    return GsmItem(index=index, question=q, answer=a, gold=gold)


def _load_jsonl(path: Path) -> list[GsmItem]:
    """Read a GSM8K JSONL file; blank lines are skipped, indices count items.

    Raises:
        DataUnavailableError: missing/unreadable file, or ``"{path}:{line}: ..."``
            for a malformed line.
    """
    if not present(path):
        raise DataUnavailableError(f"file {path} does not exist")
    items: list[GsmItem] = []
    try:
        text = read_text(path, MAX_DATA_BYTES, "data file")  # a pipe or a folder is named, never blocks
        for lineno, line in enumerate(text.split("\n"), 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataUnavailableError(f"{where}: not valid JSON ({e.msg})") from e
            items.append(_item_from_row(row, len(items), where))
    except OSError as e:  # the one reader's refusal names the file and why
        raise DataUnavailableError(str(e)) from e
    if not items:
        raise DataUnavailableError(f"file {path} holds no items")
    return items


#: Largest data file read (GSM8K's train split is 4 MB; a bound against a file that is not
#: data, not an estimate).
MAX_DATA_BYTES = 1024 * 2**20

#: Seconds the hub reachability probe waits (a DNS failure answers at once).
HUB_PROBE_TIMEOUT = 3.0


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def hub_unreachable_reason(timeout: float = HUB_PROBE_TIMEOUT) -> str | None:
    """Why the Hugging Face hub cannot be reached, or None when it answers.

    One ``HEAD`` request to ``$HF_ENDPOINT`` (default ``https://huggingface.co``)
    with ``timeout`` seconds; any HTTP answer counts as reachable. Used so an offline
    machine learns it in seconds instead of after ``datasets``' retries (about 25 s,
    five retries with back-off, measured on this machine with no network).
    """
    url = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        httpx.head(url, timeout=timeout, follow_redirects=False)
    except httpx.HTTPError as e:
        return f"{url}: {type(e).__name__}: {e}"
    return None


def _offline_load(datasets: ModuleType, split: str) -> Dataset:
    """``load_dataset`` from the local cache only (offline flags forced for the call)."""
    cfg = getattr(datasets, "config", None)
    if cfg is None or not hasattr(cfg, "HF_HUB_OFFLINE"):  # a datasets without these switches
        return datasets.load_dataset(HUB_DATASET[0], HUB_DATASET[1], split=split)
    import huggingface_hub.constants as hub_const

    saved = (cfg.HF_HUB_OFFLINE, cfg.HF_DATASETS_OFFLINE, hub_const.HF_HUB_OFFLINE)
    cfg.HF_HUB_OFFLINE = cfg.HF_DATASETS_OFFLINE = hub_const.HF_HUB_OFFLINE = True
    try:
        return datasets.load_dataset(HUB_DATASET[0], HUB_DATASET[1], split=split)
    finally:
        cfg.HF_HUB_OFFLINE, cfg.HF_DATASETS_OFFLINE, hub_const.HF_HUB_OFFLINE = saved


def _load_hub(split: str) -> list[GsmItem]:
    """Load a split from the hub via ``datasets.load_dataset`` (imported lazily).

    With ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` set, or when the hub does not
    answer a quick probe (:func:`hub_unreachable_reason`), only the local datasets
    cache is read, so an offline machine gets its answer in seconds.

    Raises:
        DataUnavailableError: ``datasets`` missing, hub unreachable/offline and no
            cached copy, or a malformed row.
    """
    try:
        import datasets  # optional, heavy dependency (loaded when used)
    except ImportError as e:
        raise DataUnavailableError(
            f"no data folder given and the 'datasets' package is not installed ({e})"
        ) from e
    offline = _env_true("HF_HUB_OFFLINE") or _env_true("HF_DATASETS_OFFLINE")
    probe = None if offline else hub_unreachable_reason()
    try:
        if probe is not None:
            ds = _offline_load(datasets, split)
        else:
            ds = datasets.load_dataset(HUB_DATASET[0], HUB_DATASET[1], split=split)
    except Exception as e:  # offline, network, auth, cache errors all mean "unavailable"
        if probe is not None:
            raise DataUnavailableError(
                f"no data folder given, the hub is not reachable ({probe}) and {HUB_DATASET[0]} is not "
                "in the local datasets cache"
            ) from e
        why = "offline mode is set and the local datasets cache has no copy" if offline else \
            f"datasets.load_dataset{(*HUB_DATASET, split)!r} failed"
        raise DataUnavailableError(
            f"no data folder given and {why}: {type(e).__name__}: {e}"
        ) from e
    where = f"hub {HUB_DATASET[0]}/{HUB_DATASET[1]} split {split}"
    return [_item_from_row(dict(row), i, f"{where} row {i}") for i, row in enumerate(ds)]


def load_gsm8k(split: str, data_dir: Path | None = None) -> list[GsmItem]:
    """Load one GSM8K split as a list of :class:`GsmItem` in data-set order.

    Resolution order: ``data_dir`` if given, else the folder in the environment
    variable ``EVALRUN_DATA_DIR`` if set and non-empty, else
    ``datasets.load_dataset("openai/gsm8k", "main", split=split)``. A folder, once
    chosen, is authoritative: a missing file or bad line in it is an error, never a
    silent fallback to the hub (so the provenance of the data is what was asked for).

    Args:
        split: ``"test"`` or ``"train"``.
        data_dir: folder holding ``test.jsonl`` and ``train.jsonl``, lines
            ``{"question": str, "answer": str ending in "#### N"}``; blank lines are
            skipped.

    Returns:
        Items with ``index`` 0..n-1 (the upstream data has 1319 test, 7473 train).

    Raises:
        ValueError: ``split`` is not ``"test"`` or ``"train"``.
        DataUnavailableError: folder or file missing, a malformed line (message names
            ``file:line``), ``datasets`` not installed, or hub unreachable; the
            message says how to provide the data.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown GSM8K split {split!r}; expected one of {SPLITS}")
    if data_dir is not None:
        source = f"--data-dir {data_dir}"
        folder: Path | None = Path(data_dir).expanduser()
    elif os.environ.get(DATA_DIR_ENV):
        source = f"{DATA_DIR_ENV}={os.environ[DATA_DIR_ENV]}"
        folder = Path(os.environ[DATA_DIR_ENV]).expanduser()
    else:
        folder = None
    if folder is None:
        return _load_hub(split)
    if not folder.is_dir():
        raise DataUnavailableError(f"data folder {folder} (from {source}) does not exist")
    return _load_jsonl(folder / f"{split}.jsonl")


def dataset_hash(items: Iterable[GsmItem]) -> str:
    """Provenance hash of a list of items.

    Args:
        items: :class:`GsmItem` objects, in order.

    Returns:
        64-hex SHA-256 of the canonical JSON (UTF-8, sorted keys, no whitespace,
        non-ASCII kept) of ``[{"index", "question", "answer", "gold"}, ...]``; equal
        data gives an equal hash whatever the source (folder or hub).
    """
    payload = [dataclasses.asdict(it) for it in items]
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ------------------------------------------------------------------------ prompts


def build_prompt(question: str, fewshot_items: Sequence[GsmItem], num_fewshot: int, gen_prefix: str = "") -> str:
    """Completion prompt for one question, as vLLM's gsm8k_eval.py builds it
    (``_build_gsm8k_prompts``); the same string is the user message of the chat path.

    Args:
        question: the test question text.
        fewshot_items: solved examples (normally the train split); the first
            ``num_fewshot`` are used, in order.
        num_fewshot: number of examples, ``0 <= num_fewshot <= len(fewshot_items)``.
        gen_prefix: vLLM's ``gen_prefix``, written right after every ``Answer:``.

    Returns:
        ``"Question: {q}\\nAnswer:{gen_prefix} {a}\\n\\n"`` per example, then
        ``"Question: {question}\\nAnswer:{gen_prefix}"`` (no trailing space).

    Raises:
        ValueError: ``num_fewshot`` negative or larger than ``len(fewshot_items)``.
    """
    if num_fewshot < 0 or num_fewshot > len(fewshot_items):
        raise ValueError(
            f"num_fewshot={num_fewshot} outside 0..{len(fewshot_items)} "
            "(number of few-shot items available)"
        )
    shots = "".join(
        f"Question: {ex.question}\nAnswer:{gen_prefix} {ex.answer}\n\n" for ex in fewshot_items[:num_fewshot]
    )
    return f"{shots}Question: {question}\nAnswer:{gen_prefix}"


def build_requests(
    test_items: Sequence[GsmItem],
    fewshot_items: Sequence[GsmItem],
    num_questions: int | None,
    num_fewshot: int,
    task_name: str = "gsm8k",
    gen_prefix: str = "",
) -> list[Request]:
    """One :class:`Request` per test item, few-shot prompts as in vLLM's gsm8k_eval.py.

    Args:
        test_items: the test split (or any items to ask), in order.
        fewshot_items: solved examples; the first ``num_fewshot`` are used, as vLLM
            does with the train split.
        num_questions: use the first ``num_questions`` test items (capped at
            ``len(test_items)``, as vLLM does); ``None`` for all.
        num_fewshot: examples per prompt (vLLM default :data:`DEFAULT_NUM_FEWSHOT`).
        task_name: prefix of ``question_id`` (``"{task_name}/test/{index}"``).
        gen_prefix: text after every ``Answer:`` (vLLM's ``gen_prefix``; default none).

    Returns:
        Requests in test-item order.

    Raises:
        ValueError: ``num_questions`` negative, or ``num_fewshot`` outside
            ``0..len(fewshot_items)``.
    """
    if num_questions is not None and num_questions < 0:
        raise ValueError(f"num_questions={num_questions} must be >= 0 or None")
    chosen = test_items if num_questions is None else test_items[:num_questions]
    out: list[Request] = []
    for it in chosen:
        prompt = build_prompt(it.question, fewshot_items, num_fewshot, gen_prefix)
        out.append(
            Request(
                question_id=f"{task_name}/test/{it.index}",
                prompt=prompt,
                gold=it.gold,
                prompt_hash=prompt_hash(prompt),
            )
        )
    if not chosen:  # still validate num_fewshot when nothing is asked
        build_prompt("", fewshot_items, num_fewshot)
    return out
