"""GSM8K: data loading, few-shot completion prompts, answer extraction and judging.

Conventions and their sources:

* Data: the ``openai/gsm8k`` ``main`` configuration (Cobbe et al. 2021), splits
  ``train`` (7473 items) and ``test`` (1319 items); each item has a ``question`` and
  an ``answer`` whose final line is ``#### <number>``.
* Prompts: plain completion prompts as in vLLM's ``tests/evals/gsm8k/gsm8k_eval.py``
  (``_build_gsm8k_prompts``): the first ``num_fewshot`` train items as
  ``Question: {q}\\nAnswer: {a}\\n\\n``, then ``Question: {q}\\nAnswer:``; one stop
  sequence, the blank line before the next ``Question:`` (:data:`STOP_SEQUENCES`;
  vLLM's script also stops at the bare word ``Question``). The chat path sends vLLM's
  list (:data:`VLLM_GSM8K_STOP_SEQUENCES`).
* Reasoning blocks (``<think>...</think>``) are not answer text, and LaTeX number
  forms (``\\boxed{}``, ``\\text{}``, ``\\$``, ``{,}``, ``\\frac{a}{b}``) are read as
  numbers (:func:`answer_text`, :func:`normalize_latex`).
* Answer extraction, evalrun's own pipelines: ``strict-numeric`` (the first
  ``#### N``) and ``flexible-numeric`` (the last number in the text), modelled on
  the two filters of lm-evaluation-harness ``lm_eval/tasks/gsm8k/gsm8k.yaml`` but
  number-aware: numbers are read with the single grammar of
  :mod:`harness.tasks.numbers` and compared as exact decimals, so ``$5,600.00``
  equals ``5600`` and ``#### 18.00`` equals gold 18 (lm-eval counts both wrong).
* lm-eval's exact filters, ``strict-match`` and ``flexible-extract``, computed by
  lm-eval's own code (:mod:`harness.tasks.lm_eval_gsm8k`), are added beside them
  when lm-eval is installed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Iterable, Sequence

import httpx

from harness.tasks.lm_eval_gsm8k import LmEvalUnavailableError, judge_lm_eval
from harness.tasks.numbers import NUMBER_RE, find_numbers, parse_number

__all__ = [
    "DATA_DIR_ENV",
    "DEFAULT_NUM_FEWSHOT",
    "DataUnavailableError",
    "GsmItem",
    "HUB_DATASET",
    "NUMERIC_PIPELINES",
    "PIPELINES",
    "Request",
    "STOP_SEQUENCES",
    "SPLITS",
    "answer_text",
    "normalize_latex",
    "build_prompt",
    "build_requests",
    "dataset_hash",
    "extract_flexible",
    "extract_strict",
    "judge",
    "load_gsm8k",
    "parse_number",
    "prompt_hash",
]

DATA_DIR_ENV = "EVALRUN_DATA_DIR"
"""Environment variable naming a folder with ``test.jsonl`` and ``train.jsonl``."""

HUB_DATASET = ("openai/gsm8k", "main")
"""Hugging Face hub dataset path and configuration used when no folder is given."""

SPLITS = ("test", "train")
"""Splits of GSM8K; a data folder holds one ``<split>.jsonl`` per split."""

DEFAULT_NUM_FEWSHOT = 5
"""Few-shot count of vLLM's gsm8k_eval.py (``--num-shots`` default)."""

FEWSHOT_DELIMITER = "\n\n"
"""What :func:`build_prompt` puts between two solved examples (the blank line)."""

QUESTION_PREFIX = "Question:"
"""How :func:`build_prompt` starts every question block."""

STOP_SEQUENCES: tuple[str, ...] = (FEWSHOT_DELIMITER + QUESTION_PREFIX,)
"""Stop strings: the few-shot delimiter the prompt really uses, the blank line before
the next ``Question:`` (``"\n\nQuestion:"``). It ends a completion that runs on into
an invented next question, and nothing else.

vLLM's gsm8k_eval.py (``get_answer``) stops at ``["Question", "Assistant:",
"<|separator|>"]`` instead: the bare word ``Question`` also cuts a completion whose
reasoning mentions it ("The question asks for ..." does not, but "Question: how
many ...?" restated in the working does), and ``Assistant:`` cuts a chat-style
restatement. The stop list is recorded with each task in the run record."""

VLLM_GSM8K_STOP_SEQUENCES: tuple[str, ...] = ("Question", "Assistant:", "<|separator|>")
"""The stop strings of vLLM's gsm8k_eval.py (``get_answer``, both modes): evalrun sends
them on the chat path (``use_chat_completions``), as vLLM does."""

NUMERIC_PIPELINES: tuple[str, ...] = ("strict-numeric", "flexible-numeric")
"""evalrun's own number-aware answer pipelines (always computed)."""

PIPELINES: tuple[str, ...] = NUMERIC_PIPELINES + ("strict-match", "flexible-extract")
"""Every answer pipeline a GSM8K-format sample can carry, in report order: evalrun's
two, then lm-eval's ``strict-match`` and ``flexible-extract`` (present only when
lm-eval is installed; :data:`harness.tasks.lm_eval_gsm8k.LM_EVAL_PIPELINES`)."""

_HOWTO = (
    "To provide GSM8K, pass --data-dir DIR or set EVALRUN_DATA_DIR=DIR, where DIR is a "
    "folder holding test.jsonl and train.jsonl (one JSON object per line: "
    '{"question": ..., "answer": "... #### N"}), or make the Hugging Face hub '
    "reachable (pip install datasets; dataset openai/gsm8k, config main; unset "
    "HF_DATASETS_OFFLINE/HF_HUB_OFFLINE)."
)

# "#" starts a comment in VERBOSE mode, hence the escaped marker.
_STRICT_RE = re.compile(r"\#{4}[ \t]*(" + NUMBER_RE.pattern + ")", re.VERBOSE)


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
            written (e.g. ``"5,600"``, ``"-3"``); compare it with :func:`judge`.
    """

    index: int
    question: str
    answer: str
    gold: str


@dataclass(frozen=True)
class Request:
    """One completion request of a task.

    Attributes:
        question_id: ``"{task}/test/{index}"``, e.g. ``"gsm8k/test/17"``.
        prompt: the full completion prompt (few-shot block + question).
        gold: the gold answer text of the test item (:attr:`GsmItem.gold`).
        prompt_hash: first 16 hex digits of the SHA-256 of the UTF-8 prompt
            (same convention as :attr:`harness.records.samples.Sample.prompt_hash`).
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
    if not path.is_file():
        raise DataUnavailableError(f"file {path} does not exist")
    items: list[GsmItem] = []
    try:
        with path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{path}:{lineno}"
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataUnavailableError(f"{where}: not valid JSON ({e.msg})") from e
                items.append(_item_from_row(row, len(items), where))
    except (OSError, UnicodeDecodeError) as e:
        raise DataUnavailableError(f"cannot read {path}: {e}") from e
    if not items:
        raise DataUnavailableError(f"file {path} holds no items")
    return items


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


def _offline_load(datasets, split: str):
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


def prompt_hash(prompt: str) -> str:
    """First 16 hex digits of the SHA-256 of the UTF-8 ``prompt``."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16]


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


# ---------------------------------------------------------------- answer judging


THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
"""Reasoning-block markers of reasoning models (DeepSeek-R1, Qwen3, Nemotron)."""

_THINK_BLOCK_RE = re.compile(re.escape(THINK_OPEN) + r".*?" + re.escape(THINK_CLOSE), re.DOTALL)


def answer_text(completion: str) -> str:
    """The part of a completion that may hold the answer: reasoning removed.

    * every ``<think>...</think>`` block is removed;
    * an unterminated ``<think>`` (the budget ran out while reasoning) removes
      everything from it to the end;
    * a ``</think>`` without its ``<think>`` (the chat template put the opening tag
      in the prompt) removes everything up to and including it.

    A completion that is only reasoning gives ``""``: no answer, counted in the
    invalid rate by :func:`judge`.

    Args:
        completion: the completion text.

    Returns:
        The answer text (may be empty).
    """
    text = _THINK_BLOCK_RE.sub(" ", completion)
    if THINK_CLOSE in text:
        text = text.rsplit(THINK_CLOSE, 1)[1]
    if THINK_OPEN in text:
        text = text.split(THINK_OPEN, 1)[0]
    return text


_FRAC_RE = re.compile(r"\\[dt]?frac\s*\{\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)\s*\}"
                      r"\s*\{\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)\s*\}")
_WRAP_RE = re.compile(r"\\(?:boxed|fbox|text|textbf|mathrm|mathbf|displaystyle)\s*\{([^{}]*)\}")


def _frac_value(m: re.Match[str]) -> str:
    num, den = Decimal(m.group(1).replace(",", "")), Decimal(m.group(2).replace(",", ""))
    if den == 0:
        return m.group(0).replace("\\", " ")
    q = num / den
    if q == q.to_integral_value():
        return str(q.to_integral_value())
    # a non-integer fraction: written as a decimal when it terminates (3/4 -> 0.75)

    f = Fraction(num) / Fraction(den)
    d = f.denominator
    while d % 2 == 0:
        d //= 2
    while d % 5 == 0:
        d //= 5
    return format(q.normalize(), "f") if d == 1 else f"{m.group(1)}/{m.group(2)}"


def normalize_latex(text: str) -> str:
    """Rewrite LaTeX number forms as plain numbers, so extraction reads them.

    ``{,}`` -> ``,`` (thousands separator), ``\\,`` between digits -> ``,``;
    ``\\$`` -> ``$``, ``\\%`` -> ``%``; ``\\frac{a}{b}`` / ``\\dfrac`` / ``\\tfrac`` with
    numeric a, b -> the exact value when it is an integer or a terminating decimal
    (``\\frac{24}{2}`` -> ``12``, ``\\frac{3}{4}`` -> ``0.75``), else ``a/b``;
    ``\\boxed{x}``, ``\\text{x}``, ``\\textbf{x}``, ``\\mathrm{x}``, ... -> ``x``
    (innermost first, so ``\\boxed{\\text{\\$}12{,}400}`` -> ``$12,400``).

    Args:
        text: answer text.

    Returns:
        The text with those forms rewritten; text without LaTeX is returned unchanged.
    """
    if "\\" not in text and "{" not in text:
        return text
    out = text.replace("{,}", ",")
    out = re.sub(r"(?<=[0-9])\\,(?=[0-9]{3})", ",", out)
    out = out.replace("\\$", "$").replace("\\%", "%")
    for _ in range(10):  # nesting depth; each pass removes the innermost layer
        new = _FRAC_RE.sub(_frac_value, out)
        new = _WRAP_RE.sub(lambda m: m.group(1), new)
        if new == out:
            break
        out = new
    return out


def extract_strict(text: str) -> str | None:
    """``strict-numeric``: the number right after the FIRST ``####`` marker.

    Modelled on the ``strict-match`` filter of lm-evaluation-harness gsm8k.yaml
    (regex ``#### (number)``, take first), with the number grammar of
    :mod:`harness.tasks.numbers` (currency, thousands separators, signs, decimals).
    Spaces or tabs may separate ``####`` and the number; a ``####`` not followed by
    a number does not count.

    Args:
        text: a completion.

    Returns:
        The number token as written (e.g. ``"5,600"``, ``"$29.00"``, ``"-3"``), or
        ``None`` when the text has no ``#### N``.
    """
    m = _STRICT_RE.search(text)
    return m.group(1) if m else None


def extract_flexible(text: str) -> str | None:
    """``flexible-numeric``: the LAST number anywhere in the text.

    Modelled on the ``flexible-extract`` filter of lm-evaluation-harness gsm8k.yaml
    (take the last numeric match), with the number grammar of :mod:`harness.tasks.numbers`, so
    ``"costs $29.00."`` gives ``"$29.00"`` and ``"3-4"`` gives ``"4"``.

    Args:
        text: a completion.

    Returns:
        The last number token as written, or ``None`` when there is no number.
    """
    found = find_numbers(text)
    return found[-1][0] if found else None


def _equal(answer: str | None, gold_value: Decimal) -> bool:
    """True when ``answer`` parses to exactly ``gold_value``; a missing answer is wrong."""
    value = parse_number(answer)
    return value is not None and value == gold_value


def judge(completion: str, gold: str) -> tuple[dict[str, str | None], dict[str, bool]]:
    """Extract answers with each pipeline and compare them with the gold answer.

    The pipelines read :func:`answer_text` (reasoning blocks removed) after
    :func:`normalize_latex`; a completion with only reasoning has no answer.

    Both sides are read by :func:`harness.tasks.numbers.parse_number` and compared as exact
    decimals (``"18.00"`` == ``"18"``, ``"5600"`` == ``"5,600"``, ``"3.5"`` != ``"3"``).
    A pipeline that finds nothing gives answer ``None`` and verdict ``False`` (it
    counts toward the invalid rate, as vLLM's gsm8k_eval.py ``INVALID`` does).

    Args:
        completion: the completion text.
        gold: gold answer text, e.g. :attr:`GsmItem.gold`; surrounding whitespace
            and thousands separators are allowed.

    Returns:
        ``(answers, correct)``, both keyed by pipeline name: ``"strict-numeric"`` and
        ``"flexible-numeric"`` always, plus lm-eval's ``"strict-match"`` and
        ``"flexible-extract"`` (lm-eval's own filters and ``exact_match``, see
        :func:`harness.tasks.lm_eval_gsm8k.judge_lm_eval`) when lm-eval is installed.
        Values: the extracted token or ``None``, and the verdict.

    Raises:
        ValueError: ``gold`` does not start with a number (bad data, not a wrong
            answer).
    """
    gold_value = parse_number(gold)
    if gold_value is None:
        raise ValueError(f"gold answer {gold!r} is not a number")
    text = normalize_latex(answer_text(completion))
    answers: dict[str, str | None] = {
        "strict-numeric": extract_strict(text),
        "flexible-numeric": extract_flexible(text),
    }
    correct = {name: _equal(answers[name], gold_value) for name in NUMERIC_PIPELINES}

    try:
        la, lc = judge_lm_eval(completion, gold)
    except LmEvalUnavailableError:
        return answers, correct  # lm-eval's pipelines absent; gates reading them do not run
    return {**answers, **la}, {**correct, **lc}
