"""Answer pipelines: how an answer is read out of a completion, registered by name.

A pipeline is declared once, where its code lives, as lm-evaluation-harness declares a
filter (``@register_filter``): :func:`register_pipeline` on an extraction function
(evalrun's own, :mod:`harness.tasks.answers`; vLLM's GSM8K rule, :mod:`harness.tasks.vllm_gsm8k`),
or :func:`declare_pipeline` for one an
outside library computes (lm-eval's GSM8K filters, :mod:`harness.tasks.lm_eval_gsm8k`).
A name registered twice is refused (:class:`PipelineError`), so two modules can never
score under one name.

Which pipelines a task is scored under is its kind's (:attr:`harness.tasks.base.Task.pipelines`),
or, for a kind whose pipelines come from the task itself (``lm_eval``), what its run
reported; :func:`harness.tasks.kinds.record_pipelines` reads them back from a run
record, for every report that walks a task's pipelines (diff, calibration).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = ["AnswerPipeline", "ANSWER_PIPELINES", "PipelineError", "declare_pipeline", "register_pipeline",
           "answer_pipeline"]

#: An extraction function: the answer text (reasoning removed, LaTeX normalised) -> the
#: answer token as written, or None when the pipeline finds none.
Extractor = Callable[[str], "str | None"]


class PipelineError(ValueError):
    """A pipeline name registered twice, or a name no module registered."""


@dataclass(frozen=True)
class AnswerPipeline:
    """One registered answer pipeline.

    Attributes:
        name: the key of a sample's ``answers`` / ``correct`` and of a task's
            ``accuracy`` (e.g. ``strict-numeric``).
        source: ``evalrun`` (computed by evalrun's own code), ``vllm`` (vLLM's GSM8K
            answer rule, reproduced by evalrun's code) or ``lm-eval`` (computed by
            lm-eval's filters, present only when lm-eval can build them).
        extract: the extraction function of an evalrun pipeline; None for one an
            outside library computes.
        description: one line for the docs and reports.
    """

    name: str
    source: Literal["evalrun", "vllm", "lm-eval"]
    extract: Extractor | None
    description: str


#: Every registered pipeline by name, in registration order.
ANSWER_PIPELINES: dict[str, AnswerPipeline] = {}


def _add(p: AnswerPipeline) -> None:
    if p.name in ANSWER_PIPELINES:
        raise PipelineError(f"answer pipeline {p.name!r} registered twice "
                            f"(already by {ANSWER_PIPELINES[p.name].source})")
    ANSWER_PIPELINES[p.name] = p


def register_pipeline(name: str, description: str,
                      source: Literal["evalrun", "vllm"] = "evalrun") -> Callable[[Extractor], Extractor]:
    """Decorator: register an extraction function of evalrun's code as pipeline ``name``
    (``source``: ``vllm`` for vLLM's rule reproduced).

    Raises:
        PipelineError: ``name`` is already registered.
    """
    def wrap(fn: Extractor) -> Extractor:
        _add(AnswerPipeline(name=name, source=source, extract=fn, description=description))
        return fn
    return wrap


def declare_pipeline(name: str, description: str, source: Literal["lm-eval"] = "lm-eval") -> AnswerPipeline:
    """Register a pipeline an outside library computes (no extraction function here).

    Raises:
        PipelineError: ``name`` is already registered.
    """
    p = AnswerPipeline(name=name, source=source, extract=None, description=description)
    _add(p)
    return p


def answer_pipeline(name: str) -> AnswerPipeline:
    """The registered pipeline ``name``.

    Raises:
        PipelineError: no module registered ``name``.
    """
    if name not in ANSWER_PIPELINES:
        raise PipelineError(f"no answer pipeline {name!r} (registered: {', '.join(ANSWER_PIPELINES)})")
    return ANSWER_PIPELINES[name]
