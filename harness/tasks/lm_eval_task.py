"""Task kind ``lm_eval``: any lm-evaluation-harness task, run by lm-eval against a variant's server.

lm-eval builds the prompts, sends them through its own ``local-completions`` model
(``lm_eval.models.openai_completions.LocalCompletionsAPI``) to the variant's
``/v1/completions``, applies the task's filters and computes its metrics. evalrun maps
lm-eval's logged samples (``log_samples=True``) to :class:`~harness.records.samples.Sample`
records, one per document, paired across variants by lm-eval's ``doc_id``
(question id ``<task name>/<split>/<doc_id>``), so the accuracy gates, paired
comparisons, baselines and diffs work unchanged.

Per sample:

* ``answers[p]`` / ``correct[p]`` per *pipeline* ``p`` = one (filter, metric) pair of
  the task: the filtered response and whether the metric is 1 (a metric whose values
  are not all 0 or 1 is kept in the lm-eval results but is not a pipeline). Names:
  the filter name (``strict-match``, ``flexible-extract``) when the task has one
  metric and named filters, the metric name (``acc``, ``exact_match``) when the filter
  is lm-eval's default ``none``, else ``<filter>:<metric>``.
* ``completion``, ``token_ids``, ``finish_reason``: the generated text, and the
  completion token ids and finish reason the server returned (evalrun's subclass of
  ``LocalCompletionsAPI`` adds ``"return_token_ids": true`` to generation requests and
  keeps the ids by prompt), so output match works.
* Prompt-scoring tasks (``output_type`` ``multiple_choice``, ``loglikelihood``,
  ``loglikelihood_rolling``; e.g. ``mmlu``) need a tokenizer to find where the
  continuation starts: the model is then built with ``tokenizer_backend="huggingface"``
  and ``tokenizer=`` the served model's folder or hub id (or the server's
  ``--tokenizer``), with ``tokenized_requests=True`` so the server scores exactly the
  ids lm-eval counted (``/v1/completions`` with ``echo``, ``logprobs: 1``,
  ``max_tokens: 1``). They generate nothing: ``completion`` is the chosen choice
  (``multiple_choice``: the argmax of the log-likelihoods, lm-eval's ``acc`` pick) or
  the scored continuation (``loglikelihood``), ``token_ids`` and ``finish_reason``
  are None. ``answers[p]`` is the choice picked by that metric (``acc``: argmax,
  ``acc_norm``: per character, ``acc_bytes``: per byte, ``acc_mutual_info``:
  conditional minus unconditional; other metrics: the ``acc`` pick); for a
  ``loglikelihood`` task the continuation when it is the greedy one, else
  ``"[not greedy]"``. ``gold`` is the gold choice's text. Output match and the
  acceptance gates of such a task are NOT RUN (:data:`PROMPT_ONLY_REASON`).
* A failed lm-eval run (lm-eval retries a request and then raises) makes every sample
  of the task an error: never scored as wrong answers. A generated completion whose
  finish reason is not ``stop`` / ``length`` (``abort``, ``error``: the engine did not
  finish it) makes that document's sample an error with its finish reason.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypedDict

from harness.config.schema import TaskSpec
from harness.config.vllm_args import hits_of  # every spelling vLLM's parser accepts
from harness.records.completions import NORMAL_FINISH_REASONS, unfinished_error
from harness.records.samples import Sample
from harness.tasks.base import PreparedTask, Task, TaskContext, TaskRun, TaskSession, check_enough
from harness.tasks.gsm8k import DataUnavailableError
from harness.tasks.kinds import task_kind
from harness.tasks.lm_eval_gsm8k import lm_eval_version
from harness.tasks.requests import prompt_hash

if TYPE_CHECKING:  # lm-eval ships no type information: this names what is meant
    import asyncio

    import aiohttp
    from lm_eval.tasks import TaskManager

__all__ = ["PROMPT_ONLY_REASON", "LmEvalTask", "load_lm_eval_task", "pipeline_name", "run_lm_eval_task"]

#: Why the output-match and acceptance gates of a prompt-scoring lm-eval task are NOT RUN.
PROMPT_ONLY_REASON = (
    "lm-eval task {lm_eval_task} is {output_type}: it only scores prompts (echo + logprobs, "
    "max_tokens 1), so there are no generated tokens to compare and speculative decoding does not run"
)

#: lm-eval's aggregated results of one task (``simple_evaluate(...)["results"][task]``):
#: JSON from outside, stored in the record as lm-eval wrote it.
LmEvalResults: TypeAlias = dict[str, Any]
#: One logged response of lm-eval (an entry of a sample's ``resps``): ``[(ll, is_greedy)]``,
#: ``[ll]`` or a text, as lm-eval writes it (no type of lm-eval's describes it).
LmEvalResponse: TypeAlias = Any

#: The prompts lm-eval's API models send in one request (token ids, chat messages or
#: texts; its ``TemplateAPI`` signatures).
_Messages: TypeAlias = list[list[int]] | list[dict] | list[str] | str


class LmEvalTaskJson(TypedDict):
    """:meth:`LmEvalTask.to_json`: every field of :class:`LmEvalTask`."""

    name: str
    lm_eval_task: str
    include_path: str | None
    split: str
    num_docs: int
    version: int | str | float | None
    output_type: str
    lm_eval_version: str


class LmEvalSummary(TypedDict):
    """What :func:`run_lm_eval_task` says beside the samples (the record's
    :class:`harness.records.run_record.LmEvalTaskRecord` without ``task``)."""

    results: LmEvalResults | None
    pipelines: list[str]
    error: str | None


class KeptOutputs(Protocol):
    """evalrun's local-completions model (:func:`_completions_class`): per prompt string,
    the completion's token ids and finish reason."""

    evalrun_outputs: dict[str, tuple[tuple[int, ...] | None, str | None]]


_CURRENT_PROMPTS: contextvars.ContextVar[list | None] = contextvars.ContextVar("evalrun_prompts", default=None)


@dataclass(frozen=True)
class LmEvalTask:
    """An lm-eval task resolved before any server starts (its data is reachable).

    Attributes:
        name: the task's name in the evalrun config (prefix of question ids).
        lm_eval_task: lm-eval's task name (e.g. ``gsm8k_cot``).
        include_path: folder of extra lm-eval task YAMLs, or None (lm-eval's own tasks).
        split: the split lm-eval evaluates (``test_split``, else ``validation_split``).
        num_docs: documents that will be asked (after ``num_questions``).
        version: the task's ``metadata.version`` (lm-eval's task version).
        output_type: ``generate_until``, ``loglikelihood``, ``multiple_choice``, ...
        lm_eval_version: installed lm-eval version.
    """

    name: str
    lm_eval_task: str
    include_path: str | None
    split: str
    num_docs: int
    version: int | str | float | None
    output_type: str
    lm_eval_version: str

    def to_json(self) -> LmEvalTaskJson:
        """JSON dict of every field."""
        return LmEvalTaskJson(name=self.name, lm_eval_task=self.lm_eval_task, include_path=self.include_path,
                              split=self.split, num_docs=self.num_docs, version=self.version,
                              output_type=self.output_type, lm_eval_version=self.lm_eval_version)

    @property
    def prompt_only(self) -> bool:
        """True for tasks that score prompts instead of generating (no ``generate_until``)."""
        return self.output_type != "generate_until"

    def prompt_only_reason(self) -> str:
        """:data:`PROMPT_ONLY_REASON` filled in for this task."""
        return PROMPT_ONLY_REASON.format(lm_eval_task=self.lm_eval_task, output_type=self.output_type)


def _task_manager(include_path: str | None) -> TaskManager:
    from lm_eval.tasks import TaskManager

    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    if include_path:
        return TaskManager(include_path=include_path, include_defaults=False)
    return TaskManager()


def load_lm_eval_task(name: str, lm_eval_task: str, include_path: str | None,
                      num_questions: int | None) -> tuple[LmEvalTask, str, str]:
    """Resolve an lm-eval task and load its data (before any server starts).

    Args:
        name: the evalrun task name.
        lm_eval_task: lm-eval's task name.
        include_path: folder of task YAMLs (absolute, or None for lm-eval's built-in
            tasks, whose data may come from the hub).
        num_questions: documents to ask (None = all).

    Returns:
        ``(task, dataset_hash, source)``: the dataset hash is the SHA-256 of the
        canonical JSON of the documents asked, in order.

    Raises:
        DataUnavailableError: lm-eval missing, the task unknown, or its data unreachable.
    """
    ver = lm_eval_version()
    if ver is None:
        raise DataUnavailableError(
            f"task {name}: kind lm_eval needs lm-eval: pip install 'lm-eval[api]>=0.4.13,<0.5' (a dependency of "
            "evalrun)")
    if include_path and not Path(include_path).is_dir():
        raise DataUnavailableError(f"task {name}: lm_eval_include_path {include_path} is not a folder")
    try:
        tm = _task_manager(include_path)
        if lm_eval_task not in tm.all_tasks:
            raise DataUnavailableError(
                f"task {name}: lm-eval {ver} has no task {lm_eval_task!r}"
                + (f" in {include_path}" if include_path else ""))
        loaded = tm.load([lm_eval_task])
        if lm_eval_task not in loaded["tasks"]:
            kids = sorted(loaded["tasks"])
            raise DataUnavailableError(
                f"task {name}: lm-eval task {lm_eval_task!r} is a group or tag of {len(kids)} tasks "
                f"({', '.join(kids[:5])}{', ...' if len(kids) > 5 else ''}); kind lm_eval runs one task: name one of "
                "them")
        task = loaded["tasks"][lm_eval_task]
        docs = list(task.eval_docs)
    except DataUnavailableError:
        raise
    except Exception as e:  # hub, file and config errors all mean "cannot run"
        raise DataUnavailableError(
            f"task {name}: lm-eval {ver} cannot load task {lm_eval_task!r}: {type(e).__name__}: {e}") from e
    if num_questions is not None:
        docs = docs[:num_questions]
    split = task.config.test_split or task.config.validation_split or "eval"
    text = json.dumps(docs, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    info = LmEvalTask(name=name, lm_eval_task=lm_eval_task, include_path=include_path, split=split,
                      num_docs=len(docs), version=task.VERSION, output_type=str(task.OUTPUT_TYPE),
                      lm_eval_version=ver)
    source = f"lm-eval {ver} task {lm_eval_task} v{task.VERSION}" + (f" from {include_path}" if include_path else "")
    return info, hashlib.sha256(text.encode("utf-8")).hexdigest(), source


def pipeline_name(filter_name: str, metric: str, n_metrics: int) -> str:
    """evalrun pipeline name of one lm-eval (filter, metric) pair (module docstring)."""
    if filter_name == "none":
        return metric
    if n_metrics == 1:
        return filter_name
    return f"{filter_name}:{metric}"


def _completions_class() -> type:
    """A subclass of lm-eval's ``local-completions`` model that asks the server for
    completion token ids and keeps them (with the finish reason) per prompt string."""
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    class EvalrunLocalCompletions(LocalCompletionsAPI):
        def __init__(self, **kw: object) -> None:
            super().__init__(**kw)
            self.evalrun_outputs: dict[str, tuple[tuple[int, ...] | None, str | None]] = {}
            self._evalrun_lock = threading.Lock()
            self._evalrun_last: list | None = None

        def _create_payload(self, messages: _Messages, generate: bool = False, gen_kwargs: dict | None = None,
                            seed: int = 1234, eos: str | None = None, **kw: object) -> dict:
            p = super()._create_payload(messages, generate=generate, gen_kwargs=gen_kwargs, seed=seed, eos=eos, **kw)
            if generate:
                p["return_token_ids"] = True
            return p

        def model_call(self, messages: _Messages, **kw: object) -> dict | None:
            self._evalrun_last = list(messages) if isinstance(messages, list) else [messages]
            return super().model_call(messages, **kw)

        async def amodel_call(self, session: aiohttp.ClientSession, sem: asyncio.Semaphore, messages: _Messages,
                              **kw: object) -> list[str] | list[tuple[float, bool]] | None:
            _CURRENT_PROMPTS.set(list(messages) if isinstance(messages, list) else [messages])
            return await super().amodel_call(session, sem, messages, **kw)

        def parse_generations(self, outputs: dict | list[dict], **_kw: object) -> list[str]:
            prompts = _CURRENT_PROMPTS.get() or self._evalrun_last or []
            outs = outputs if isinstance(outputs, list) else [outputs]
            choices = [c for o in outs for c in sorted(o["choices"], key=lambda c: c["index"])]
            with self._evalrun_lock:
                for prompt, c in zip(prompts, choices):
                    if isinstance(prompt, str):
                        ids = c.get("token_ids")
                        self.evalrun_outputs[prompt] = (tuple(ids) if ids is not None else None, c.get("finish_reason"))
            return LocalCompletionsAPI.parse_generations(outputs)

    return EvalrunLocalCompletions


def _binary(values: Iterable[object]) -> bool:
    return all(isinstance(v, (int, float, bool)) and float(v) in (0.0, 1.0) for v in values)


def run_lm_eval_task(
    task: LmEvalTask,
    *,
    base_url: str,
    served_model: str,
    config: str,
    variant: str,
    num_fewshot: int | None,
    max_tokens: int,
    seed: int,
    max_concurrency: int,
    timeout_s: float,
    tokenizer: str | None = None,
) -> tuple[tuple[Sample, ...], LmEvalSummary]:
    """Run one lm-eval task against a running server and map its samples.

    Args:
        task: from :func:`load_lm_eval_task`.
        base_url: the server's root URL (``http://127.0.0.1:PORT``).
        served_model: the model name the server serves.
        config, variant: names stored on each sample.
        num_fewshot: lm-eval ``num_fewshot`` (None: the task's default).
        max_tokens: ``max_gen_toks`` of the local-completions model (the task's own
            ``generation_kwargs.max_gen_toks`` wins when it sets one).
        seed: lm-eval's random, numpy, torch and few-shot seeds, and the request seed.
        max_concurrency: lm-eval ``num_concurrent``.
        timeout_s: per-request timeout of lm-eval's client.
        tokenizer: the served model's folder or hub id (or the server's ``--tokenizer``);
            needed by prompt-scoring tasks (module docstring), unused by ``generate_until``.

    Returns:
        ``(samples, summary)``: one :class:`Sample` per document in ``doc_id`` order, and
        ``{"results": lm-eval's aggregated results for the task, "pipelines": [...],
        "error": None | str}``. When lm-eval raises, every document becomes an error
        sample and ``error`` holds the exception.
    """
    import lm_eval

    qid = lambda d: f"{task.name}/{task.split}/{d}"  # noqa: E731
    if task.prompt_only:
        if not tokenizer:
            err = (f"lm-eval task {task.lm_eval_task} is {task.output_type}: it needs the model's tokenizer "
                   "(the model folder or hub id), and none was given")
            samples = tuple(Sample(config, variant, task.name, qid(d), "", "", error=err) for d in range(task.num_docs))
            return samples, {"results": None, "pipelines": [], "error": err}
        tok = {"tokenizer_backend": "huggingface", "tokenizer": tokenizer, "tokenized_requests": True}
    else:
        tok = {"tokenizer_backend": None, "tokenized_requests": False}
    try:
        lm = _completions_class()(
            base_url=base_url.rstrip("/") + "/v1/completions", model=served_model,
            num_concurrent=max_concurrency, max_retries=1, max_gen_toks=max_tokens, seed=seed,
            timeout=int(timeout_s), **tok,
        )
        res = lm_eval.simple_evaluate(
            model=lm, tasks=[task.lm_eval_task], num_fewshot=num_fewshot, limit=task.num_docs,
            log_samples=True, bootstrap_iters=0, task_manager=_task_manager(task.include_path),
            random_seed=seed, numpy_random_seed=seed, torch_random_seed=seed, fewshot_random_seed=seed,
        )
    except Exception as e:  # noqa: BLE001 - recorded as errors on every sample, never scored
        err = f"lm-eval {task.lm_eval_version} task {task.lm_eval_task} failed: {type(e).__name__}: {e}"
        samples = tuple(Sample(config, variant, task.name, qid(d), "", "", error=err) for d in range(task.num_docs))
        return samples, {"results": None, "pipelines": [], "error": err}
    return _map_results(task, res, lm, config, variant, qid)


def _map_results(task: LmEvalTask, res: dict, lm: KeptOutputs, config: str, variant: str,
                 qid: Callable[[int], str]) -> tuple[tuple[Sample, ...], LmEvalSummary]:
    """lm-eval's logged samples -> one :class:`Sample` per document and the summary
    (:func:`run_lm_eval_task`'s return value). Pipelines are the (filter, metric)
    pairs whose per-sample values are all 0/1."""
    logged = res["samples"][task.lm_eval_task]
    metrics_of: dict[str, list[str]] = {}
    for x in logged:
        metrics_of.setdefault(x["filter"], list(x["metrics"]))
    by_doc: dict[int, list[dict]] = {}
    for x in logged:
        by_doc.setdefault(int(x["doc_id"]), []).append(x)
    pipes: list[tuple[str, str, str]] = []
    for f, ms in metrics_of.items():
        for m in ms:
            if _binary([x.get(m) for x in logged if x["filter"] == f]):
                pipes.append((f, m, pipeline_name(f, m, len(ms))))
    summary: LmEvalSummary = {"results": json.loads(json.dumps(res["results"].get(task.lm_eval_task), default=str)),
               "pipelines": [p for _, _, p in pipes], "error": None}
    if task.prompt_only:
        return _prompt_only_samples(task, by_doc, pipes, config, variant, qid), summary
    out: list[Sample] = []
    for d in sorted(by_doc):
        rows = {x["filter"]: x for x in by_doc[d]}
        first = by_doc[d][0]
        ctx = first["arguments"][0][0] if first["arguments"] else ""
        resp = first["resps"][0][0] if first["resps"] and first["resps"][0] else None
        text = resp if isinstance(resp, str) else None
        ids, finish = lm.evalrun_outputs.get(ctx, (None, None)) if isinstance(ctx, str) else (None, None)
        ph = prompt_hash(ctx if isinstance(ctx, str) else json.dumps(ctx))
        if finish is not None and finish not in NORMAL_FINISH_REASONS:  # abort, error, ...: never scored
            out.append(Sample(config, variant, task.name, qid(d), ph, str(first["target"]), finish_reason=finish,
                              error=unfinished_error(qid(d), finish)))
            continue
        answers, correct = {}, {}
        for f, m, p in pipes:
            fr = rows[f]["filtered_resps"][0] if rows[f]["filtered_resps"] else None
            answers[p] = None if fr in (None, "[invalid]") else str(fr)
            correct[p] = float(rows[f][m]) == 1.0
        out.append(Sample(
            config, variant, task.name, qid(d), ph,
            str(first["target"]), completion=text, token_ids=ids, finish_reason=finish,
            answers=answers, correct=correct,
        ))
    return tuple(out), summary


def _choices_of(task: LmEvalTask) -> Callable[[object], Iterable[object]] | None:
    """``doc -> list of choice texts`` of a multiple-choice task (lm-eval's own
    ``doc_to_choice``), or None when the task cannot be reloaded."""
    try:
        obj = _task_manager(task.include_path).load([task.lm_eval_task])["tasks"][task.lm_eval_task]
        return obj.doc_to_choice
    except Exception:  # noqa: BLE001 - fall back to the logged continuations
        return None


def _pick(lls: list[float], choices: list[str], metric: str, n: int) -> int:
    """Index of the choice lm-eval's ``metric`` picks (its ``process_results``)."""
    import numpy as np

    cond = np.array(lls[:n], dtype=float)
    if metric == "acc_norm":
        return int(np.argmax(cond / np.array([float(len(c)) for c in choices])))
    if metric == "acc_bytes":
        return int(np.argmax(cond / np.array([float(len(c.encode("utf-8"))) for c in choices])))
    if metric == "acc_mutual_info" and len(lls) == 2 * n:
        return int(np.argmax(cond - np.array(lls[n:], dtype=float)))
    return int(np.argmax(cond))


def _prompt_only_samples(task: LmEvalTask, by_doc: dict[int, list[dict]], pipes: list[tuple[str, str, str]],
                         config: str, variant: str, qid: Callable[[int], str]) -> tuple[Sample, ...]:
    """Samples of a prompt-scoring task (module docstring): one per document."""
    doc_to_choice = _choices_of(task) if task.output_type == "multiple_choice" else None
    samples = []
    for d in sorted(by_doc):
        rows = {x["filter"]: x for x in by_doc[d]}
        first = by_doc[d][0]
        args = [tuple(a) for a in first["arguments"]]
        ctx = args[0][0] if args else ""
        lls = [_ll(r) for r in first["resps"]]
        greedy = [_greedy(r) for r in first["resps"]]
        target = first["target"]
        answers: dict[str, str | None] = {}
        correct: dict[str, bool] = {}
        if task.output_type == "multiple_choice":
            choices = None
            if doc_to_choice is not None:
                try:
                    choices = [str(c) for c in doc_to_choice(first["doc"])]
                except Exception:  # noqa: BLE001
                    choices = None
            n = len(choices) if choices else len(args)
            if not choices:  # the continuations lm-eval scored, without the target delimiter
                choices = [str(a[1]).lstrip() for a in args[:n]]
            pick_acc = _pick(lls, choices, "acc", n)
            for f, m, p in pipes:
                answers[p] = choices[_pick(lls, choices, m, n)]
                correct[p] = float(rows[f][m]) == 1.0
            completion: str | None = choices[pick_acc]
            if isinstance(target, int) and 0 <= target < len(choices):
                gold = choices[target]
            elif isinstance(target, list):
                gold = " | ".join(choices[i] if isinstance(i, int) and 0 <= i < len(choices) else str(i)
                                  for i in target)
            else:
                gold = str(target)
        else:
            cont = str(args[0][1]) if args and len(args[0]) > 1 else None
            for f, m, p in pipes:
                answers[p] = cont if (greedy and greedy[0]) else "[not greedy]"
                correct[p] = float(rows[f][m]) == 1.0
            completion, gold = cont, str(target)
        samples.append(Sample(
            config, variant, task.name, qid(d), prompt_hash(ctx if isinstance(ctx, str) else json.dumps(ctx)),
            gold, completion=completion, token_ids=None, finish_reason=None, answers=answers, correct=correct,
        ))
    return tuple(samples)


def _ll(resp: LmEvalResponse) -> float:
    """The log-likelihood of one logged response: ``[(ll, is_greedy)]`` or ``[ll]``."""
    x = resp[0] if isinstance(resp, (list, tuple)) and resp else resp
    if isinstance(x, (list, tuple)):
        x = x[0]
    return float(x)


def _greedy(resp: LmEvalResponse) -> bool | None:
    x = resp[0] if isinstance(resp, (list, tuple)) and resp else resp
    return bool(x[1]) if isinstance(x, (list, tuple)) and len(x) > 1 else None


def tokenizer_of(argv: Sequence[str], model_ref: str) -> str:
    """The tokenizer the server uses: the last flag that sets vLLM's ``tokenizer`` (any
    spelling its parser accepts), else the model (folder or hub id); what lm-eval's
    prompt-scoring tasks count tokens with."""
    found = [h.value for h in hits_of(argv, "tokenizer") if h.value is not None]
    return found[-1] if found else model_ref


@task_kind("lm_eval")
class LmEvalTaskKind(Task[LmEvalTask]):
    """Task kind ``lm_eval``: any lm-eval task through its local-completions model.
    lm-eval builds and sends the requests itself, so the runner never resends them
    (:attr:`reruns_for_noise` False); a prompt-scoring task generates no text. Its answer
    pipelines are the task's own (lm-eval's filters and metrics), reported by its run
    (:attr:`TaskRun.pipelines`, the record's ``lm_eval.pipelines``), so :attr:`pipelines`
    is empty."""

    reruns_for_noise = False

    def prepare(self, name: str, spec: TaskSpec, data_dir: Path | None = None, allow_contamination: bool = False,
                base_dir: Path | None = None) -> PreparedTask[LmEvalTask]:
        """Resolve the lm-eval task (its data reachable, :func:`load_lm_eval_task`); a
        relative ``lm_eval_include_path`` is resolved against ``base_dir``.

        Raises:
            DataUnavailableError: the task or its data cannot be had.
            ShortDataError: fewer documents than ``num_questions``.
        """
        inc = spec.lm_eval_include_path
        if inc and not Path(inc).is_absolute():
            inc = str((base_dir or Path.cwd()) / inc)
        info, digest, src = load_lm_eval_task(name, spec.lm_eval_task or "", inc, spec.num_questions)
        check_enough(name, spec, info.num_docs, f"lm-eval task {spec.lm_eval_task} ({src})")
        return PreparedTask((), (), digest, src, payload=info)

    def generates_text(self, pt: PreparedTask[LmEvalTask]) -> bool:
        """False for a prompt-scoring task (:attr:`LmEvalTask.prompt_only`)."""
        return not pt.typed_payload().prompt_only

    def not_text_reason(self, pt: PreparedTask[LmEvalTask]) -> str:
        """:meth:`LmEvalTask.prompt_only_reason`."""
        return pt.typed_payload().prompt_only_reason()

    def run(self, session: TaskSession, ctx: TaskContext, pt: PreparedTask[LmEvalTask]) -> TaskRun:
        """Run the task through lm-eval's local-completions model against the session's
        server, with ``/metrics`` snapshots around it (:meth:`VariantSession.measured`):
        no raw completions (lm-eval sent the requests), the samples lm-eval judged, its
        summary for the record (``task``: the resolved task, lm-eval's aggregated
        ``results``, ``pipelines``, ``error``) and its pipelines."""
        info, s = pt.typed_payload(), ctx.spec
        seed = s.seed if s.seed is not None else 0  # never None: the loader refuses seed null for lm_eval
        ctx.log(f"{ctx.variant_id} {ctx.task}: lm-eval task {info.lm_eval_task} ({info.num_docs} documents) "
                "through lm-eval's local-completions model")
        outcome, (samples, summary) = session.measured(lambda: run_lm_eval_task(
            info, base_url=session.base_url, served_model=session.model,  # type: ignore[arg-type]
            config=ctx.config, variant=ctx.variant, num_fewshot=s.num_fewshot, max_tokens=s.max_tokens,
            seed=seed, max_concurrency=ctx.max_concurrency, timeout_s=ctx.request_timeout,
            tokenizer=tokenizer_of(ctx.server_argv, ctx.model_ref),
        ))
        if summary["error"]:
            ctx.error(f"{ctx.variant_id} {ctx.task}: {summary['error']}")
        return TaskRun(outcome, samples, summary["pipelines"], lm_eval={"task": info.to_json(), **summary})
