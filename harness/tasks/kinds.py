"""The task kinds, registered by decorator, and the pipelines a recorded task was scored under.

A task kind is one class, declared once where its code lives::

    @task_kind("gsm8k")
    class Gsm8kTask(RequestTask[None]):
        ...

(as inspect_ai's ``@task`` or lm-eval's ``@register_filter``). :func:`task_for` finds a
kind's implementation by the config's ``kind``; a kind registered twice is refused
(:class:`TaskKindError`). The modules of the kinds are imported by the package
(:mod:`harness.tasks`), so every kind is registered once ``harness.tasks`` is imported.
docs/maintainers/adding-a-task-kind.md walks through adding one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from harness.config.schema import VLLM_PIPELINE
from harness.tasks.base import Task

__all__ = ["TASK_KINDS", "TaskKindError", "record_pipelines", "task_for", "task_kind"]

K = TypeVar("K", bound="type[Task[Any]]")

#: Task kind (the config's ``kind``) -> its implementation, in registration order.
TASK_KINDS: dict[str, type[Task[Any]]] = {}


class TaskKindError(ValueError):
    """A task kind registered twice, or a kind no module registered."""


def task_kind(kind: str) -> Callable[[K], K]:
    """Class decorator: register a :class:`harness.tasks.base.Task` subclass as the
    implementation of the config's ``kind: <kind>`` (and set its :attr:`Task.kind`).

    Raises:
        TaskKindError: ``kind`` is already registered.
    """
    def wrap(cls: K) -> K:
        if kind in TASK_KINDS:
            raise TaskKindError(f"task kind {kind!r} registered twice ({TASK_KINDS[kind].__name__}, "
                                f"{cls.__name__})")
        cls.kind = kind
        TASK_KINDS[kind] = cls
        return cls
    return wrap


def task_for(kind: str) -> Task[Any]:
    """The implementation of task kind ``kind`` (a new instance).

    Raises:
        TaskKindError: an unknown kind (a ``ValueError``).
    """
    if kind not in TASK_KINDS:
        raise TaskKindError(f"unknown task kind {kind!r}")
    return TASK_KINDS[kind]()


def record_pipelines(kind: str | None, own: Sequence[str] | None, scored: Iterable[str] = ()) -> tuple[str, ...]:
    """The answer pipelines a recorded task was scored under, in report order, as its
    record lists them.

    Args:
        kind: the task's ``kind`` from the record's task settings
            (``ConfigResult.tasks[<task>]["kind"]``); None when the record has none (a
            baseline file).
        own: the task's own pipelines when its record has them (an lm-eval task:
            ``TaskResult.lm_eval.pipelines``), else None.
        scored: the pipelines the record holds figures of (``accuracy`` keys): what a
            record without ``kind`` or ``own`` shows.

    Returns:
        ``own`` when given; else the kind's :attr:`Task.pipelines` (``gsm8k``,
        ``synthetic``, ``shape``: :data:`harness.tasks.answers.GSM8K_PIPELINES`), with
        vLLM's rule (``vllm``) first when it was scored (a task with ``vllm_rules``); for
        no kind or an unknown one, those of the default kind ``gsm8k`` (likewise) when
        every scored pipeline is one of them, else the scored ones.
    """
    if own is not None:
        return tuple(own)
    names = list(scored)
    first = (VLLM_PIPELINE,) if VLLM_PIPELINE in names else ()
    if kind is not None and kind in TASK_KINDS and TASK_KINDS[kind].pipelines:
        return first + TASK_KINDS[kind].pipelines
    default = first + TASK_KINDS["gsm8k"].pipelines
    return default if set(names) <= set(default) else tuple(names)
