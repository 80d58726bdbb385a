"""The task interface: what every task kind implements and hands the runner.

A task kind (:class:`Task`) prepares its data before any server starts
(:meth:`Task.prepare` -> :class:`PreparedTask`), sends on a variant's engine session
(:meth:`Task.send` -> :class:`SentTask`: the engine's outcome, unjudged), is judged once
the server is stopped (:meth:`Task.judge` -> :class:`TaskRun`: the judged samples;
:meth:`Task.run` does both; lm-eval judges inside its own loop, so its ``send`` is its
``run``),
and says whether it generates text (:meth:`Task.generates_text`: whether output match
and acceptance apply) and which answer pipelines it is scored under
(:attr:`Task.pipelines`). The runner calls these and never branches on the kind; each
implementation registers itself with :func:`harness.tasks.kinds.task_kind` and is looked
up by :func:`harness.tasks.kinds.task_for` (docs/maintainers/adding-a-task-kind.md).

A kind's prepared data beyond its requests (lm-eval's resolved task, a traffic shape's
plan) is the typed ``payload`` of its :class:`PreparedTask`: ``Task[P]`` prepares a
``PreparedTask[P]``.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from harness.config.schema import TaskSpec
from harness.records.completions import Completion, write_raw_jsonl
from harness.records.measures import EngineFactsRecord
from harness.records.samples import Sample
from harness.records.task_outcome import TaskOutcome
from harness.tasks import judging  # judging.judge_completions is looked up per call (tests patch it)
from harness.tasks.answers import GSM8K_PIPELINES, VLLM_RULES_PIPELINES
from harness.tasks.requests import Request

T = TypeVar("T")
#: A task kind's payload type (what :meth:`Task.prepare` keeps beside the requests).
P = TypeVar("P")


@dataclass(frozen=True)
class PreparedTask(Generic[P]):
    """A task ready to send.

    Attributes:
        requests: one per question, in question order.
        stop: stop sequences for every request.
        dataset_hash: SHA-256 of the questions and few-shot items used (provenance).
        source: where the data came from (folder, hub id or generator).
        payload: what the kind keeps beside the requests, of its type ``P``: for
            ``kind: lm_eval`` the resolved :class:`harness.tasks.lm_eval_task.LmEvalTask`
            (lm-eval itself builds and sends the requests, so ``requests`` is empty), for
            ``kind: shape`` its plan (:class:`harness.tasks.shapes.ShapePlan`,
            :class:`harness.tasks.shape_prefix.PrefixPlan`,
            :class:`harness.tasks.shape_load.LoadPlan`); None for a kind without one.
        contamination: overlaps of test questions with the few-shot examples or the
            train split that the user allowed (``--allow-contamination``), as
            :meth:`harness.tasks.contamination.Overlaps.to_json`; None when none.
    """

    requests: tuple[Request, ...]
    stop: tuple[str, ...]
    dataset_hash: str
    source: str
    payload: P | None = None
    contamination: dict | None = None

    def typed_payload(self) -> P:
        """The kind's payload.

        Raises:
            TypeError: the task was prepared without one (a kind that keeps none).
        """
        if self.payload is None:
            raise TypeError("this prepared task has no payload: its kind keeps none")
        return self.payload


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


class TaskSession(Protocol):
    """What a task runs on (:class:`harness.engine.session.VariantSession`)."""

    model: str | None

    @property
    def base_url(self) -> str: ...

    def run_task(self, requests: Sequence[Request], max_tokens: int, temperature: float | None,
                 seed: "int | None | Callable[[str], int | None]",
                 stop: Sequence[str], on_done: Callable[[Completion], None] | None = None, per_request: bool = False,
                 chat: bool = False, logprobs: int | None = None,
                 max_concurrency: int | None = None, vllm_client: bool = False) -> TaskOutcome: ...

    def measured(self, work: Callable[[], T]) -> tuple[TaskOutcome, T]: ...

    def engine_facts(self) -> EngineFactsRecord: ...


def _no_place(stage: str) -> None:  # noqa: ARG001 - the TaskContext.at signature, for contexts without PLACE
    return None


@dataclass(frozen=True)
class TaskContext:
    """Where one task runs: everything but its prepared data.

    Attributes:
        config, variant: names stored on every sample.
        variant_id: ``<config>/<variant>`` for messages.
        task: the task's name; ``spec`` its spec (sampling settings).
        per_request: send requests one at a time with ``/metrics`` around each.
        max_concurrency: requests in flight at once; ``request_timeout`` seconds each.
        logprobs: top-k log-probabilities asked per token (the reference), or None.
        server_argv: the server command (an lm-eval prompt-scoring task reads its
            ``--tokenizer``); ``model_ref`` the resolved model (folder or hub id).
        raw_path: where the unjudged completions go when judging raises (None: not kept).
        label: the progress bar's label.
        log, warn, error: progress messages; ``bar(label, total)`` a progress bar with
            ``advance(ok)`` and ``close()``; ``at(stage)`` enters a stage of the run's
            place (for error records).
        seed_offset: the variant's ``seed_offset``: each request's seed is
            ``spec.request_seed(question_id, seed_offset)``.
    """

    config: str
    variant: str
    variant_id: str
    task: str
    spec: TaskSpec
    per_request: bool
    max_concurrency: int
    request_timeout: float
    logprobs: int | None
    server_argv: tuple[str, ...]
    model_ref: str
    raw_path: Path | None
    label: str
    log: Callable[[str], None]
    warn: Callable[[str], None]
    error: Callable[[str], None]
    bar: Callable[[str, int], Any]
    at: Callable[[str], None] = field(default=_no_place)
    seed_offset: int = 0


@dataclass(frozen=True)
class TaskRun:
    """What one task produced on one variant.

    Attributes:
        outcome: the engine's :class:`harness.records.task_outcome.TaskOutcome` (counters,
            metrics, seconds; no completions when someone else sent the requests).
        samples: the judged samples, in question order.
        pipelines: the answer pipeline names scoring reads, in report order (the kind's
            :attr:`Task.pipelines`, or the task's own for lm-eval).
        lm_eval: for an lm-eval task, its entry for the record
            (:class:`harness.records.run_record.LmEvalTaskRecord`'s fields: ``task``,
            ``results``, ``pipelines``, ``error``); None otherwise.
    """

    outcome: TaskOutcome
    samples: tuple[Sample, ...]
    pipelines: Sequence[str]
    lm_eval: dict[str, Any] | None = None


@dataclass(frozen=True)
class SentTask:
    """What one task left once its server work is done, before judging
    (:meth:`Task.send`); :meth:`Task.judge` turns it into a :class:`TaskRun` after the
    server is stopped, so no device waits on CPU work.

    Attributes:
        outcome: the engine's :class:`harness.records.task_outcome.TaskOutcome` (raw
            completions, counter difference, metrics error, seconds).
        failed_requests: requests that came back with an error (a dying server shows
            this way before its process has exited).
        judged: a task judged inside its own sending loop (lm-eval): its
            :class:`TaskRun`, which :meth:`Task.judge` returns as is; None otherwise.
    """

    outcome: TaskOutcome
    failed_requests: int
    judged: TaskRun | None = None


class Task(ABC, Generic[P]):
    """One task kind, ``P`` its prepared payload's type. Subclasses are registered with
    :func:`harness.tasks.kinds.task_kind` (which sets :attr:`kind`) and implement
    :meth:`prepare` and :meth:`run`."""

    #: the config's ``kind``.
    kind: ClassVar[str]
    #: the answer pipelines (registered names, :mod:`harness.tasks.pipelines`) the kind's
    #: samples are scored under, in report order; empty for a kind whose task names its
    #: own (lm-eval: reported by its run, :attr:`TaskRun.pipelines`).
    pipelines: ClassVar[tuple[str, ...]] = ()
    #: whether the runner may send the task's requests again on a server (noise reruns).
    reruns_for_noise: ClassVar[bool] = True

    @abstractmethod
    def prepare(self, name: str, spec: TaskSpec, data_dir: Path | None, allow_contamination: bool = False,
                base_dir: Path | None = None) -> PreparedTask[P]:
        """Load the data and build the requests (see :func:`harness.tasks.prepare_task`).

        Raises:
            DataUnavailableError, ShortDataError, ContaminationError: as
                :func:`harness.tasks.prepare_task` documents.
        """

    @abstractmethod
    def run(self, session: TaskSession, ctx: TaskContext, pt: PreparedTask[P]) -> TaskRun:
        """Run the prepared task on ``session``: the engine's outcome and judged samples.

        Raises:
            Exception: judging failed (the raw completions are kept at
                ``ctx.raw_path`` first when it is set).
        """

    def send(self, session: TaskSession, ctx: TaskContext, pt: PreparedTask[P]) -> SentTask:
        """The part of :meth:`run` that needs the server. By default the whole of
        :meth:`run` (a kind judged inside its own loop, like lm-eval's); a kind that
        judges afterwards overrides this and :meth:`judge`."""
        tr = self.run(session, ctx, pt)
        return SentTask(tr.outcome, sum(1 for x in tr.samples if x.error is not None), judged=tr)

    def judge(self, sent: SentTask, ctx: TaskContext, pt: PreparedTask[P]) -> TaskRun:
        """The part of :meth:`run` that needs no server, run after it is stopped: by
        default the :class:`TaskRun` :meth:`send` already judged.

        Raises:
            Exception: judging failed (the raw completions are kept at
                ``ctx.raw_path`` first when it is set).
        """
        if sent.judged is None:
            raise TypeError(f"{ctx.variant_id} {ctx.task}: task kind {self.kind} sent without judging "
                            "but does not implement judge()")
        return sent.judged

    def generates_text(self, pt: PreparedTask[P]) -> bool:
        """Whether the task generates tokens (output match and acceptance apply)."""
        return True

    def not_text_reason(self, pt: PreparedTask[P]) -> str:
        """Why output match and acceptance do not apply (when :meth:`generates_text` is False)."""
        return f"task kind {self.kind} generates no text"

    def available(self, name: str, spec: TaskSpec, data_dir: Path | None) -> tuple[int, str] | None:
        """Questions the task's data holds, counted without a server, and where from;
        None when they are only counted when the task is prepared."""
        return None

    def default_size(self) -> int | None:
        """Questions asked when ``num_questions`` is None, when known without data."""
        return None

    def planned_size(self, spec: TaskSpec) -> int | None:
        """Questions asked when ``num_questions`` is None, from the spec (default:
        :meth:`default_size`)."""
        return self.default_size()


class RequestTask(Task[P]):
    """A task whose prepared requests evalrun sends itself and judges with GSM8K's
    answer extraction (:func:`harness.tasks.judging.judge_completions`), scored under
    the ``#### N`` format's pipelines (:data:`harness.tasks.answers.GSM8K_PIPELINES`; with
    ``vllm_rules``, vLLM's rule first, :data:`harness.tasks.answers.VLLM_RULES_PIPELINES`).
    A task with ``vllm_rules`` is sent as vLLM's client sends (``vllm_client``: every
    request at once, each one's timeout covering its wait for a pooled connection, no retry)."""

    pipelines = GSM8K_PIPELINES

    def run(self, session: TaskSession, ctx: TaskContext, pt: PreparedTask[P]) -> TaskRun:
        """Send every request on the session, then judge the completions
        (:meth:`send` then :meth:`judge`)."""
        return self.judge(self.send(session, ctx, pt), ctx, pt)

    def send(self, session: TaskSession, ctx: TaskContext, pt: PreparedTask[P]) -> SentTask:
        """Send every request on the session: the raw completions and counters, unjudged."""
        s = ctx.spec
        bar = ctx.bar(ctx.label, len(pt.requests))
        # vLLM's client semantics only when asked (sessions written before it take no such keyword)
        vllm: dict[str, bool] = {"vllm_client": True} if s.vllm_rules else {}
        outcome = session.run_task(
            pt.requests,
            max_tokens=s.max_tokens, temperature=s.temperature,
            seed=functools.partial(_seed_of, s, ctx.seed_offset),
            stop=pt.stop, on_done=lambda x: bar.advance(x.ok),
            per_request=ctx.per_request, chat=s.use_chat_completions, logprobs=ctx.logprobs, **vllm,
        )
        bar.close()
        return SentTask(outcome, sum(1 for c in outcome.completions if c.error is not None))

    def judge(self, sent: SentTask, ctx: TaskContext, pt: PreparedTask[P]) -> TaskRun:
        """Judge the sent completions; when judging raises, the raw completions are
        written to ``ctx.raw_path`` (if set) first.

        Raises:
            Exception: judging failed (e.g. a completion paired with the wrong request).
        """
        ctx.at("judging")
        outcome = sent.outcome
        vllm: dict[str, bool] = {"vllm_rules": True} if ctx.spec.vllm_rules else {}
        try:
            samples = judging.judge_completions(ctx.config, ctx.variant, ctx.task, pt.requests, outcome.completions,
                                                **vllm)
        except Exception:  # keep the engine's answers, unjudged, then let the error be recorded
            if ctx.raw_path is not None:
                keep_raw(ctx.raw_path, outcome.completions, ctx)
            raise
        return TaskRun(outcome, samples, VLLM_RULES_PIPELINES if ctx.spec.vllm_rules else self.pipelines)


def _seed_of(spec: TaskSpec, offset: int, question_id: str) -> int | None:
    """The seed request ``question_id`` sends (:meth:`TaskSpec.request_seed`)."""
    return spec.request_seed(question_id, offset)


def keep_raw(path: Path, completions: Sequence[Completion], ctx: TaskContext) -> None:
    """Write the unjudged completions of a task whose judging raised (best effort)."""
    try:
        n = write_raw_jsonl(path, completions)
        ctx.error(f"judging failed: the {n} raw completions are kept in {path}")
    except OSError as e:
        ctx.warn(f"{path}: raw completions not written: {e}")

