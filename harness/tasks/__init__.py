"""Tasks: each turns its data into completion requests and judges completions.

Every task kind implements :class:`harness.tasks.base.Task` (prepare, run on a
session, whether it generates text, the answer pipelines it is scored under) and
registers itself with :func:`harness.tasks.kinds.task_kind`; :func:`task_for` finds a
kind's implementation. ``prepare_task`` is the entry point the runner uses before any
server starts: it loads the task's data, builds the requests and returns them with the
stop sequences and a dataset hash.

The kinds' modules are imported here, so importing ``harness.tasks`` registers every
kind (lm-eval itself is imported only when an lm-eval task is loaded or run).
"""

from __future__ import annotations

from pathlib import Path

# the task kinds, each registered by its @task_kind (imported for that effect)
import harness.tasks.gsm8k_task
import harness.tasks.lm_eval_task
import harness.tasks.shapes
import harness.tasks.synthetic  # noqa: F401
from harness.config.schema import TaskSpec
from harness.tasks.base import (
    PreparedTask,
    SentTask,
    ShortDataError,
    Task,
    TaskContext,
    TaskRun,
    check_enough,
)
from harness.tasks.contamination import ContaminationError
from harness.tasks.gsm8k import DataUnavailableError
from harness.tasks.gsm8k_task import GSM8K_TEST_SIZE
from harness.tasks.kinds import TASK_KINDS, TaskKindError, record_pipelines, task_for


def available_questions(name: str, spec: TaskSpec, data_dir: Path | None) -> tuple[int, str] | None:
    """Questions a task's data holds, counted without a server, and where from:
    ``(count, source)``; None when they are only counted when the task is loaded (an
    lm-eval task, GSM8K from the hub).

    Raises:
        DataUnavailableError: a local GSM8K folder that is missing or malformed.
    """
    return task_for(spec.kind).available(name, spec, data_dir)


def prepare_task(name: str, spec: TaskSpec, data_dir: Path | None,
                 allow_contamination: bool = False, base_dir: Path | None = None) -> PreparedTask:
    """Load data and build requests for one task (:meth:`Task.prepare` of its kind).

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
        TaskKindError: an unknown task kind (a ``ValueError``).
    """
    return task_for(spec.kind).prepare(name, spec, data_dir, allow_contamination, base_dir)


def task_size(spec: TaskSpec) -> int:
    """Questions a task will ask: ``num_questions``, else the whole test set (GSM8K
    1319; the synthetic task's default test size; a shape's planned requests)."""
    if spec.num_questions is not None:
        return spec.num_questions
    size = task_for(spec.kind).planned_size(spec)
    return GSM8K_TEST_SIZE if size is None else size


__all__ = ["PreparedTask", "prepare_task", "task_size", "task_for", "Task", "TaskContext", "TaskRun", "SentTask",
           "DataUnavailableError", "ContaminationError", "ShortDataError", "check_enough", "available_questions",
           "GSM8K_TEST_SIZE", "TASK_KINDS", "TaskKindError", "record_pipelines"]
