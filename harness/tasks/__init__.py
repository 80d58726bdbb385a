"""Tasks: each turns its data into completion requests and judges completions.

``prepare_task`` is the one entry point the runner uses: it loads the task's data,
builds the requests and returns them with the stop sequences and a dataset hash.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.config.loader import TaskSpec
from harness.tasks.base import PreparedTask
from harness.tasks.contamination import ContaminationError, find_overlaps
from harness.tasks.gsm8k import STOP_SEQUENCES, DataUnavailableError, build_requests, dataset_hash, load_gsm8k
from harness.tasks.lm_eval_task import load_lm_eval_task
from harness.tasks.synthetic import DEFAULT_NUM_TEST, GENERATOR_VERSION, generate_splits, prepare_synthetic


class ShortDataError(ValueError):
    """A task's data holds fewer questions than its ``num_questions`` asks (a download
    cut short, a truncated file) and the config did not ask for "up to N"
    (``num_questions_up_to``); the message names the file and both counts."""


def check_enough(name: str, spec: TaskSpec, available: int, source: str) -> None:
    """Refuse a task whose data holds fewer than ``spec.num_questions`` questions.

    Args:
        name: the task's name.
        spec: its spec (``num_questions``, ``num_questions_up_to``).
        available: questions the data holds.
        source: the data file or source, for the message.

    Raises:
        ShortDataError: ``available < num_questions`` and not ``num_questions_up_to``.
    """
    want = spec.num_questions
    if want is None or available >= want or spec.num_questions_up_to:
        return
    raise ShortDataError(
        f"task {name}: {source} holds {available} questions, the config asks for num_questions: {want}; "
        "refused (a download cut short would be judged on a silent subset): provide the full data, or set "
        "num_questions_up_to: true to ask up to that many")


def available_questions(name: str, spec: TaskSpec, data_dir: Path | None) -> tuple[int, str] | None:  # noqa: ARG001 - same arguments as prepare_task
    """Questions a task's data holds, counted without a server, and where from:
    ``(count, source)``; None when they are only counted when the task is loaded (an
    lm-eval task, GSM8K from the hub).

    Raises:
        DataUnavailableError: a local GSM8K folder that is missing or malformed.
    """
    if spec.kind == "gsm8k":
        folder = data_dir or os.environ.get("EVALRUN_DATA_DIR") or None
        if not folder:
            return None
        return len(load_gsm8k("test", data_dir)), str(Path(folder).expanduser() / "test.jsonl")
    if spec.kind == "synthetic":

        return len(generate_splits().test), f"synthetic:arith-v{GENERATOR_VERSION}"
    return None


def prepare_task(name: str, spec: TaskSpec, data_dir: Path | None,
                 allow_contamination: bool = False, base_dir: Path | None = None) -> PreparedTask:
    """Load data and build requests for one task.

    Args:
        name: the task's name in the config (used in question ids).
        spec: the task spec.
        data_dir: folder with GSM8K ``test.jsonl`` and ``train.jsonl`` (None: the
            ``EVALRUN_DATA_DIR`` variable, then the hub via ``datasets``).
        allow_contamination: run a GSM8K task even when test questions overlap its
            few-shot examples or the train split (the overlaps are then kept in
            :attr:`PreparedTask.contamination`).
        base_dir: folder a relative ``lm_eval_include_path`` is resolved against
            (the config file's folder).

    Raises:
        DataUnavailableError: the data cannot be had; the message says how to provide it.
        ShortDataError: the data holds fewer questions than ``num_questions`` asks.
        ContaminationError: a GSM8K task's asked test questions (normalised text)
            are among the few-shot examples of their prompt or in the train split;
            the message names the data source and the overlapping ids.
    """
    if spec.kind == "gsm8k":

        test = load_gsm8k("test", data_dir)
        train = load_gsm8k("train", data_dir) if spec.num_fewshot else []
        reqs = build_requests(test, train, spec.num_questions, spec.num_fewshot, task_name=name,
                              gen_prefix=spec.gen_prefix)
        used = test[: len(reqs)] + train[: spec.num_fewshot]
        src = str(data_dir or os.environ.get("EVALRUN_DATA_DIR") or "hub:openai/gsm8k (main)")
        check_enough(name, spec, len(test),
                     src if src.startswith("hub:") else str(Path(src).expanduser() / "test.jsonl"))
        ov = find_overlaps(name, test[: len(reqs)], train[: spec.num_fewshot], train or None)
        if ov.any and not allow_contamination:
            raise ContaminationError(
                f"task {name}: data {src}: {ov.describe()}. The model would be asked questions whose "
                "solutions are in front of it. Remove them from the data (test.jsonl / train.jsonl), "
                "or pass --allow-contamination to run anyway (recorded in the run record)."
            )
        # chat completions: no stop strings, as vLLM's gsm8k_eval.py (the chat template ends the turn)
        stop = () if spec.use_chat_completions else tuple(STOP_SEQUENCES)
        return PreparedTask(tuple(reqs), stop, dataset_hash(used), src,
                            contamination=ov.to_json() if ov.any else None)
    if spec.kind == "synthetic":

        pt = prepare_synthetic(name, spec)
        check_enough(name, spec, len(pt.requests), pt.source)
        return pt
    if spec.kind == "lm_eval":

        inc = spec.lm_eval_include_path
        if inc and not Path(inc).is_absolute():
            inc = str((base_dir or Path.cwd()) / inc)
        info, digest, src = load_lm_eval_task(name, spec.lm_eval_task or "", inc, spec.num_questions)
        check_enough(name, spec, info.num_docs, f"lm-eval task {spec.lm_eval_task} ({src})")
        return PreparedTask((), (), digest, src, lm_eval=info)
    raise ValueError(f"unknown task kind {spec.kind!r}")


#: Questions in a GSM8K task whose ``num_questions`` is None (all): the test split's size.
GSM8K_TEST_SIZE = 1319


def task_size(spec: TaskSpec) -> int:
    """Questions a task will ask: ``num_questions``, else the whole test set (GSM8K
    1319; the synthetic task's default test size)."""
    if spec.num_questions is not None:
        return spec.num_questions
    if spec.kind == "synthetic":

        return DEFAULT_NUM_TEST
    return GSM8K_TEST_SIZE


__all__ = ["PreparedTask", "prepare_task", "task_size", "DataUnavailableError", "ContaminationError",
           "ShortDataError", "check_enough", "available_questions"]
