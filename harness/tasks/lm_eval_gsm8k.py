"""lm-eval's own GSM8K answer filters, beside evalrun's number-aware pipelines.

vLLM's CI and published model cards quote lm-evaluation-harness GSM8K numbers:
``exact_match`` under the filters ``strict-match`` and ``flexible-extract`` of
``lm_eval/tasks/gsm8k/gsm8k.yaml``. To be comparable with those numbers, evalrun
computes them with lm-eval itself, not with a re-implementation:

* the task config is lm-eval's installed ``gsm8k.yaml`` (loaded by lm-eval's
  ``TaskManager``; its ``metadata.version`` is the task version recorded in the run);
* the filters are lm-eval's ``FilterEnsemble`` objects built by
  ``ConfigurableTask`` from that config's ``filter_list`` (regex + take_first);
* the verdict is ``ConfigurableTask.process_results`` (the config's ``exact_match``
  with ``ignore_case`` and ``regexes_to_ignore`` ``[",", "\\$", "(?s).*#### ", "\\.$"]``).

Where lm-eval and evalrun differ (``#### 18.00`` against gold 18: lm-eval wrong,
evalrun right; ``#### $1,200``: lm-eval ``strict-match`` finds nothing), the names
say which is which: lm-eval's are ``strict-match`` / ``flexible-extract``, evalrun's
``strict-numeric`` / ``flexible-numeric`` (:mod:`harness.tasks.answers`).

lm-eval is a base dependency (``pyproject.toml``). Should it still be missing or
broken (an install with ``--no-deps``, a version whose gsm8k task differs), every use
here raises :class:`LmEvalUnavailableError` (no import of lm-eval sits outside that
guard): these two pipelines are then absent from the samples and a gate that reads
them is NOT RUN (never passed), while evalrun's own pipelines are scored as usual.
"""

from __future__ import annotations

import logging
import threading
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from harness.tasks.pipelines import declare_pipeline

if TYPE_CHECKING:  # lm-eval and datasets ship no type information: these name what is meant
    from datasets import DatasetDict
    from lm_eval.api.task import ConfigurableTask

__all__ = ["LM_EVAL_PIPELINES", "LmEvalUnavailableError", "lm_eval_info", "judge_lm_eval", "lm_eval_version"]

LM_EVAL_PIPELINES: tuple[str, ...] = (
    declare_pipeline("strict-match", "lm-eval's gsm8k filter: the number after the first '#### '").name,
    declare_pipeline("flexible-extract", "lm-eval's gsm8k filter: the last number of the completion").name,
)
"""Filter names of lm-eval's ``gsm8k.yaml`` ``filter_list``, in that file's order
(registered answer pipelines, :func:`harness.tasks.pipelines.declare_pipeline`)."""

#: Fallback string of lm-eval's ``RegexFilter`` when nothing matches (``lm_eval/filters/extraction.py``).
LM_EVAL_INVALID = "[invalid]"

_LOCK = threading.Lock()


class LmEvalInfoDict(TypedDict):
    """The lm-eval pipelines' provenance (:func:`lm_eval_info`), the fields of
    :class:`harness.records.run_record.LmEvalInfo`."""

    version: str | None
    gsm8k_task_version: int | str | float | None
    gsm8k_config: str | None
    pipelines: list[str]
    error: str | None


class LmEvalUnavailableError(RuntimeError):
    """lm-eval is not installed or its gsm8k task config cannot be built; says how to fix."""


def lm_eval_version() -> str | None:
    """Installed ``lm-eval`` distribution version (e.g. ``"0.4.13"``), or None."""
    try:
        return metadata.version("lm-eval")
    except metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=1)
def _gsm8k_task() -> ConfigurableTask:
    """lm-eval's ``ConfigurableTask`` for its installed ``gsm8k.yaml``, built without data.

    The config is used unchanged except ``custom_dataset``: a one-row local data set,
    so that building the task downloads nothing (filters and metrics do not read it).

    Raises:
        LmEvalUnavailableError: lm-eval missing or the task cannot be built.
    """
    if lm_eval_version() is None:
        raise LmEvalUnavailableError(
            "lm-eval is not installed: pip install 'lm-eval[api]>=0.4.13,<0.5' (a dependency of evalrun)")
    try:
        import datasets
        import lm_eval.tasks
        from lm_eval.api.task import ConfigurableTask
        from lm_eval.tasks import TaskManager

        folder = Path(lm_eval.tasks.__file__).parent / "gsm8k"
        logging.getLogger("lm_eval").setLevel(logging.ERROR)
        tm = TaskManager(include_path=str(folder), include_defaults=False)
        entry = tm.task_index["gsm8k"]
        cfg = dict(entry.cfg)

        def local_rows(**_: object) -> DatasetDict:
            d = datasets.Dataset.from_list([{"question": "", "answer": "#### 0"}])
            return datasets.DatasetDict(test=d, train=d)

        cfg["custom_dataset"] = local_rows
        task = ConfigurableTask(config=cfg)
        task.evalrun_yaml_path = str(entry.yaml_path)
        _memoize_target(task)
        names = tuple(f.name for f in task._filters)
        if names != LM_EVAL_PIPELINES:
            raise LmEvalUnavailableError(
                f"lm-eval {lm_eval_version()} {entry.yaml_path}: filters {names}, expected {LM_EVAL_PIPELINES}")
        return task
    except LmEvalUnavailableError:
        raise
    except Exception as e:  # any failure of an optional library is "unavailable"
        raise LmEvalUnavailableError(
            f"lm-eval {lm_eval_version()}: cannot build its gsm8k task: {type(e).__name__}: {e}") from e


def _memoize_target(task: ConfigurableTask) -> None:
    """Remember ``task.doc_to_target(doc)`` per document: lm-eval compiles the jinja
    template of gsm8k's ``doc_to_target`` anew on every call (``utils.apply_template``,
    about 1.3 ms), twice per judged answer (once per filter). The template reads only the
    document, so the remembered value is the one lm-eval computes."""
    compute = task.doc_to_target

    @lru_cache(maxsize=65536)
    def by_doc(items: tuple[tuple[str, object], ...]) -> object:
        return compute(dict(items))

    def doc_to_target(doc: object, doc_to_target: object = None) -> object:
        if doc_to_target is not None or not isinstance(doc, dict):
            return compute(doc, doc_to_target)
        try:
            return by_doc(tuple(sorted(doc.items())))
        except TypeError:  # a value that cannot be a cache key: compute it
            return compute(doc)

    task.doc_to_target = doc_to_target


def _task() -> ConfigurableTask:
    with _LOCK:
        return _gsm8k_task()


def lm_eval_info() -> LmEvalInfoDict:
    """Provenance of the lm-eval pipelines for the run record.

    Returns:
        ``{"version": "0.4.13", "gsm8k_task_version": 3.0, "gsm8k_config": path,
        "pipelines": ["strict-match", "flexible-extract"], "error": None}``; without
        lm-eval ``version`` / ``gsm8k_task_version`` / ``gsm8k_config`` are None,
        ``pipelines`` is empty and ``error`` says why.
    """
    try:
        task = _task()
    except LmEvalUnavailableError as e:
        return {"version": lm_eval_version(), "gsm8k_task_version": None, "gsm8k_config": None,
                "pipelines": [], "error": str(e)}
    return {"version": lm_eval_version(), "gsm8k_task_version": task.VERSION,
            "gsm8k_config": task.evalrun_yaml_path, "pipelines": list(LM_EVAL_PIPELINES), "error": None}


def judge_lm_eval(completion: str, gold: str) -> tuple[dict[str, str | None], dict[str, bool]]:
    """Judge one completion with lm-eval's gsm8k filters and ``exact_match``.

    Args:
        completion: the completion text.
        gold: the gold answer as written after ``####`` (e.g. ``"1,200"``). lm-eval
            compares against the whole reference solution after removing everything
            up to the last ``#### `` (``regexes_to_ignore``), so the document passed to
            lm-eval is ``{"answer": "#### " + gold}``, which yields the same reference.

    Returns:
        ``(answers, correct)`` keyed by :data:`LM_EVAL_PIPELINES`: the filtered answer
        as lm-eval extracted it (None where lm-eval gives ``[invalid]``), and whether
        its ``exact_match`` is 1.

    Raises:
        LmEvalUnavailableError: lm-eval missing or its task cannot be built.
    """
    task = _task()  # raises LmEvalUnavailableError first when lm-eval is missing or broken
    try:
        from lm_eval.api.instance import Instance
    except Exception as e:  # an optional library that does not import is "unavailable"
        raise LmEvalUnavailableError(
            f"lm-eval {lm_eval_version()}: cannot import lm_eval.api.instance: {type(e).__name__}: {e}") from e
    doc = {"question": "", "answer": f"#### {gold.strip()}"}
    inst = Instance(request_type="generate_until", doc=doc, arguments=("", {}), idx=0,
                    metadata=("gsm8k", 0, 1))
    inst.resps = [completion]
    answers: dict[str, str | None] = {}
    correct: dict[str, bool] = {}
    for f in task._filters:
        f.apply([inst])
        got = inst.filtered_resps[f.name]
        res = task.process_results(doc, [got])
        answers[f.name] = None if got == LM_EVAL_INVALID else got
        correct[f.name] = bool(res["exact_match"] == 1.0)
    return answers, correct
