"""Task kind ``shape``: traffic shapes where hybrid speculative-decoding bugs live.

:class:`ShapeTask` hands each shape kind (:class:`harness.config.schema.ShapeSpec`'s
``kind``) to its module (:data:`SHAPE_MODULES`), which builds the requests, sends them (in
one or more passes, :func:`send_passes`) and proves from the engine's counters that the
shape happened. This module holds the kind ``prompt_edges`` and what every kind shares:
exact-length token-id prompts (:func:`exact_prompt_ids`), places in question ids
(:func:`place_of`) and the passes.

The first shape, ``prompt_edges``, sends prompts whose lengths in tokens sit at and
around the engine's edges (:meth:`harness.config.schema.ShapeSpec.edges`):
``num_speculative_tokens + 1`` for every speculative count of the config, the KV-cache
block size, and the prefill chunk (the server's ``--max-num-batched-tokens``; offset
``+1`` is the one-token tail after a full chunk). Lengths are exact because the prompts
are cut with the served model's own tokenizer (``--tokenizer`` or the model,
``transformers.AutoTokenizer``) and sent as token ids.

Prompt text: the synthetic arithmetic task's five-shot prompts
(:func:`harness.tasks.synthetic.prepare_synthetic`), one source question per prompt
of a length, with the few-shot blocks repeated in front when a length needs more; a
prompt of ``n`` tokens is the last ``n`` tokens of that text, so every prompt ends at
the question's ``Answer:`` and long prompts carry their question's gold answer. Short
prompts cannot be answered; the shape's task gates drop the accuracy floor (the
config says so) and judge greedy output match against the reference under the same
shape.

A request's ``prompt_hash`` is that of ``"{n}:{source prompt}"`` (the length and the text
it is cut from), since the token ids exist only once the served tokenizer is known.

Question ids name the edge and the offset: ``{task}/{edge}/off{offset:+d}/len{n}/{j}``,
so every divergence the summary lists says where it sits relative to its edge.

The shape proves it happened from the engine's counters over the task and its effective
settings (:func:`shape_proof`): prompt tokens counted at least the tokens sent, generated
tokens counted, a block or chunk edge equal to the engine's own block size or batch token
budget, and, for a chunk edge, at least one prompt longer than the chunk.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar

from harness.config.schema import ShapeSpec, TaskSpec
from harness.records.measures import EngineCountersRecord, EngineFactsRecord
from harness.records.shape_proof import ShapeProofRecord
from harness.records.task_outcome import TaskOutcome
from harness.tasks.base import PreparedTask, RequestTask, SentTask, TaskContext, TaskRun, TaskSession, _seed_of
from harness.tasks.gsm8k import dataset_hash
from harness.tasks.kinds import task_kind
from harness.tasks.requests import Request
from harness.tasks.stops import STOP_SEQUENCES
from harness.tasks.synthetic import GENERATOR_VERSION, format_block, generate_splits, prepare_synthetic

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

#: Few-shot examples of the source prompts.
SOURCE_FEWSHOT = 5


@dataclass(frozen=True)
class ShapeRequest:
    """Where one request of a shape sits: its edge, offset and length in tokens."""

    edge: str
    offset: int
    length: int


def place_key(edge: str, offset: int) -> str:
    """``edge/off<offset>``, e.g. ``spec_k2/off+0``: a request's place in question ids and records."""
    return f"{edge}/off{offset:+d}"


def place_of(question_id: str) -> str | None:
    """The place of a shape's question id: its segments between the task's name and the
    trailing ``len{n}/{j}`` (or ``{j}``), e.g. ``spec_k2/off+0`` of
    ``edges/spec_k2/off+0/len3/1`` or ``warm`` of ``prefix/warm/4``; None for an id of
    another task kind (``{task}/test/{j}``)."""
    parts = question_id.split("/")
    if len(parts) < 3 or not parts[-1].isdigit() or parts[1] == "test":
        return None
    mid = parts[1:-1]
    if mid and mid[-1].startswith("len") and mid[-1][3:].isdigit():
        mid = mid[:-1]
    return "/".join(mid) or None


@dataclass(frozen=True)
class ShapePlan:
    """A prepared shape: the spec and, per request (in request order), its place."""

    spec: ShapeSpec
    places: tuple[ShapeRequest, ...]

    def place_counts(self) -> dict[str, int]:
        """``edge/off<offset>`` -> requests sent there, in plan order."""
        out: dict[str, int] = {}
        for p in self.places:
            key = place_key(p.edge, p.offset)
            out[key] = out.get(key, 0) + 1
        return out

    def lengths(self) -> dict[str, int]:
        """Length in tokens (as text) -> requests sent with it."""
        out: dict[str, int] = {}
        for p in self.places:
            out[str(p.length)] = out.get(str(p.length), 0) + 1
        return dict(sorted(out.items(), key=lambda kv: int(kv[0])))


def plan_lengths(spec: ShapeSpec) -> tuple[ShapeRequest, ...]:
    """Every ``(edge, offset, length)`` of the shape, edges in :meth:`ShapeSpec.edges`
    order and offsets in the spec's order, each ``prompts_per_length`` times; lengths
    below 1 are dropped."""
    out = []
    for edge, at in spec.edges().items():
        for off in spec.offsets:
            if at + off >= 1:
                out += [ShapeRequest(edge, off, at + off)] * spec.prompts_per_length
    return tuple(out)


@dataclass(frozen=True)
class ShapeSource:
    """The synthetic questions a shape's prompts are cut from (every shape kind's).

    Attributes:
        requests: the first ``n`` test questions as five-shot synthetic requests.
        dataset_hash: SHA-256 of those questions and the few-shot items (provenance).
        source: ``shape:<kind> over synthetic:arith-v<N> (seed S)``.
    """

    requests: tuple[Request, ...]
    dataset_hash: str
    source: str


def shape_source(name: str, kind: str, n: int, what: str = "prompts") -> ShapeSource:
    """The ``n`` source questions of task ``name``'s shape of kind ``kind``.

    Raises:
        ValueError: ``n`` (named ``what`` in the message) exceeds the synthetic test split.
    """
    splits = generate_splits()
    if n > len(splits.test):
        raise ValueError(f"task {name}: {what} {n} > {len(splits.test)} source questions")
    src = prepare_synthetic(name, TaskSpec(kind="synthetic", num_questions=n, num_fewshot=SOURCE_FEWSHOT))
    used = list(splits.test[:n]) + list(splits.fewshot[:SOURCE_FEWSHOT])
    return ShapeSource(src.requests, dataset_hash(used),
                       f"shape:{kind} over synthetic:arith-v{GENERATOR_VERSION} (seed {splits.seed})")


def counter_problems(counters: EngineCountersRecord | None, counters_error: str | None, sent: int) -> list[str]:
    """What every shape's proof asks of the engine counters over its task: they were read
    (else ``counters_error``), ``vllm:prompt_tokens`` grew by at least the ``sent`` prompt
    tokens, and ``vllm:generation_tokens`` grew. Empty: all hold."""
    if counters is None:
        return [f"no engine counters: {counters_error or 'not read'}"]
    problems = []
    if counters.prompt_tokens is None:
        problems.append("vllm:prompt_tokens missing from /metrics")
    elif counters.prompt_tokens < sent:
        problems.append(f"vllm:prompt_tokens grew by {counters.prompt_tokens:g} < {sent} prompt tokens sent")
    if not counters.generation_tokens:
        problems.append("vllm:generation_tokens did not grow: nothing was generated")
    return problems


def prepare_shape(name: str, spec: TaskSpec) -> PreparedTask[object]:
    """The requests of a ``kind: shape`` task: text and place, token ids set at send.

    Raises:
        ValueError: the shape needs more distinct source questions than the synthetic
            test split holds.
    """
    assert spec.shape is not None
    places = plan_lengths(spec.shape)
    n = spec.shape.prompts_per_length
    src = shape_source(name, spec.shape.kind, n, "prompts_per_length")
    reqs = []
    for i, p in enumerate(places):
        j = i % n
        base = src.requests[j]
        qid = f"{name}/{place_key(p.edge, p.offset)}/len{p.length}/{j}"
        digest = hashlib.sha256(f"{p.length}:{base.prompt}".encode()).hexdigest()[:16]
        reqs.append(Request(qid, base.prompt, base.gold, digest))
    return PreparedTask(tuple(reqs), tuple(STOP_SEQUENCES), src.dataset_hash, src.source,
                        payload=ShapePlan(spec.shape, places))


def filler_text() -> str:
    """The text put in front of a source prompt when a length needs more tokens: the
    few-shot blocks of the synthetic task."""
    splits = generate_splits()
    return "".join(format_block(x.question, x.answer) for x in splits.fewshot)


def exact_prompt_ids(tokenizer: PreTrainedTokenizerBase, text: str, length: int) -> tuple[int, ...]:
    """The last ``length`` token ids of ``text`` (filler blocks put in front until it has
    that many; special tokens left out, as the completions endpoint adds its own).

    Raises:
        ValueError: the text cannot reach ``length`` tokens.
    """
    filler = filler_text()
    for _ in range(1 + length // 8 + 1):
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) >= length:
            return tuple(ids[len(ids) - length:])
        text = filler + text
    raise ValueError(f"cannot build a prompt of {length} tokens")


def shape_proof(plan: ShapePlan, sent: SentTask) -> ShapeProofRecord:
    """Whether the engine's counters and settings prove the shape happened.

    Problems (each makes the shape unproven, so its gate fails closed):
    no counters; ``vllm:prompt_tokens`` grew by less than the prompt tokens sent (with
    prefix caching off every prompt token is prefilled); no generated tokens; a block or
    chunk edge that is not the engine's own (:func:`engine_setting_problems`); a chunk
    edge whose prompts were never longer than the chunk; failed requests.
    """
    sent_tokens = sum(p.length for p in plan.places)
    problems = counter_problems(sent.outcome.engine_counters, sent.outcome.engine_counters_error, sent_tokens)
    problems += engine_setting_problems(plan.spec, getattr(sent, "facts", None),
                                        getattr(sent, "facts_error", "the task was not sent in passes"))
    chunk = plan.spec.chunk_size
    if chunk is not None and not any(p.length > chunk for p in plan.places):
        problems.append(f"chunk edge {chunk}: no prompt longer than the chunk")
    if sent.failed_requests:
        problems.append(f"{sent.failed_requests} requests failed")
    return ShapeProofRecord(shape=plan.spec.kind, edges=plan.spec.edges(), prompt_lengths=plan.lengths(),
                            prompt_tokens_sent=sent_tokens, places=plan.place_counts(),
                            counters=sent.outcome.engine_counters, problems=tuple(problems))


def load_tokenizer(ctx: TaskContext) -> PreTrainedTokenizerBase:
    """The served model's tokenizer (``--tokenizer`` of the server command, else the model).

    Raises:
        RuntimeError: ``transformers`` is not importable in evalrun's interpreter.
    """
    from harness.tasks.lm_eval_task import tokenizer_of  # noqa: PLC0415 - lm-eval's module on first use only

    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise RuntimeError(f"{ctx.variant_id} {ctx.task}: task kind shape cuts prompts with the model's tokenizer "
                           f"and needs transformers in evalrun's interpreter (evalrun[models]): {e}") from e
    return AutoTokenizer.from_pretrained(tokenizer_of(ctx.server_argv, ctx.model_ref))


PlanT = TypeVar("PlanT")


def plan_of(pt: PreparedTask[object], cls: type[PlanT]) -> PlanT:
    """The shape task's plan (its :attr:`PreparedTask.payload`), of the shape kind's type ``cls``.

    Raises:
        TypeError: the task has no plan, or one of another shape kind.
    """
    plan = pt.typed_payload()
    if not isinstance(plan, cls):
        raise TypeError(f"a shape task prepared with a {type(plan).__name__}, not a {cls.__name__}")
    return plan


#: Shape kind -> the module that implements it: ``prepare(name, spec) -> PreparedTask``,
#: ``send(session, ctx, pt) -> SentTask``, ``proof(pt, sent) -> ShapeProofRecord`` and
#: ``planned_size(shape) -> int`` (this module for ``prompt_edges``).
SHAPE_MODULES: dict[str, str] = {
    "prompt_edges": "harness.tasks.shapes",
    "prefix_reuse": "harness.tasks.shape_prefix",
    "cache_pressure": "harness.tasks.shape_load",
    "concurrency_sweep": "harness.tasks.shape_load",
}


def shape_module(kind: str) -> ModuleType:
    """The module of shape kind ``kind`` (:data:`SHAPE_MODULES`), imported on first use.

    Raises:
        ValueError: no module implements the kind in this build of evalrun.
    """
    if kind not in SHAPE_MODULES:
        raise ValueError(f"shape kind {kind} is not implemented in this evalrun (implemented: {sorted(SHAPE_MODULES)})")
    return importlib.import_module(SHAPE_MODULES[kind])


def send_pass(session: TaskSession, ctx: TaskContext, requests: Sequence, label: str,
              max_concurrency: int | None = None) -> TaskOutcome:
    """Send ``requests`` with the task's sampling settings (a request's own ``max_tokens``
    wins), at most ``max_concurrency`` in flight (None: the variant's), with a progress
    bar named ``label``: the engine's :class:`TaskOutcome`."""
    s = ctx.spec
    bar = ctx.bar(label, len(requests))
    try:
        return session.run_task(requests, max_tokens=s.max_tokens, temperature=s.temperature,
                                seed=functools.partial(_seed_of, s, ctx.seed_offset), stop=STOP_SEQUENCES,
                                on_done=lambda x: bar.advance(x.ok), per_request=ctx.per_request,
                                logprobs=ctx.logprobs, max_concurrency=max_concurrency)
    finally:
        bar.close()


@dataclass(frozen=True)
class ShapeSent(SentTask):
    """A sent shape task: beside :class:`SentTask`, what every kind's proof reads.

    Attributes:
        passes: each pass's own :class:`TaskOutcome` (its engine counters,
            ``peak_in_flight``), in pass order.
        facts: the engine's effective settings from ``/server_info`` read before the
            first pass (block size, batch token budget, KV-cache blocks, prefix caching),
            or None with ``facts_error`` saying why not.
    """

    passes: tuple[TaskOutcome, ...] = ()
    facts: EngineFactsRecord | None = None
    facts_error: str | None = None


def send_passes(session: TaskSession, ctx: TaskContext,
                passes: Sequence[tuple[str, Sequence, int | None]]) -> ShapeSent:
    """Read the engine's effective settings, then send several passes one after the other,
    each ``(name, requests, max_concurrency)``: a :class:`ShapeSent` with the completions
    of every pass in pass order, speculative and engine counters over all of them
    (:meth:`VariantSession.measured`) and each pass's own outcome."""
    facts, facts_error = None, None
    try:
        facts = session.engine_facts()
    except RuntimeError as e:  # the session's EngineInfoError (a later stage: not imported here)
        facts_error = str(e)
    outer, each = session.measured(lambda: tuple(
        send_pass(session, ctx, reqs, f"{ctx.label} {name}", conc) for name, reqs, conc in passes))
    completions = tuple(c for o in each for c in o.completions)
    peak = max((o.peak_in_flight or 0 for o in each), default=0)
    outcome = replace(outer, completions=completions, peak_in_flight=peak)
    return ShapeSent(outcome, sum(1 for c in completions if c.error is not None), passes=tuple(each), facts=facts,
                     facts_error=facts_error)


def engine_setting_problems(spec: ShapeSpec, facts: EngineFactsRecord | None, facts_error: str | None) -> list[str]:
    """An edge the shape names that is not the engine's own: ``block_size`` against
    ``cache_config.block_size`` (after the hybrid alignment, :mod:`harness.tasks.shape_prefix`),
    ``chunk_size`` against ``scheduler_config.max_num_batched_tokens`` of ``/server_info``.
    A prompt at a block or chunk edge that is not the engine's proves nothing; so do edges
    whose settings could not be read (``facts_error``); a setting the engine does not
    report is not checked."""
    wanted = {"block_size": (spec.block_size, "cache_config.block_size"),
              "chunk_size": (spec.chunk_size, "scheduler_config.max_num_batched_tokens")}
    wanted = {k: v for k, v in wanted.items() if v[0] is not None}
    if not wanted:
        return []
    if facts is None:
        return [f"engine settings not read ({facts_error or 'no /server_info'}): {', '.join(wanted)} unchecked"]
    seen = {"block_size": facts.block_size, "chunk_size": facts.max_num_batched_tokens}
    return [f"{key} {want} is not the engine's: {where} {seen[key]} in /server_info"
            for key, (want, where) in wanted.items() if seen[key] is not None and seen[key] != want]


# --------------------------------------------------------------------------- prompt_edges


def prepare(name: str, spec: TaskSpec) -> PreparedTask[object]:
    """``prompt_edges``: :func:`prepare_shape`."""
    return prepare_shape(name, spec)


def send(session: TaskSession, ctx: TaskContext, pt: PreparedTask[object]) -> SentTask:
    """``prompt_edges``: cut every prompt to its length with the served model's tokenizer
    and send the token ids in one pass."""
    tok = load_tokenizer(ctx)
    plan = plan_of(pt, ShapePlan)
    reqs = tuple(replace(r, prompt_token_ids=exact_prompt_ids(tok, r.prompt, p.length))
                 for r, p in zip(pt.requests, plan.places))
    return send_passes(session, ctx, [("", reqs, None)])


def proof(pt: PreparedTask[object], sent: SentTask) -> ShapeProofRecord:
    """``prompt_edges``: :func:`shape_proof`."""
    return shape_proof(plan_of(pt, ShapePlan), sent)


def planned_size(shape: ShapeSpec) -> int:
    """``prompt_edges``: :func:`plan_lengths`' count."""
    return len(plan_lengths(shape))


@task_kind("shape")
class ShapeTask(RequestTask[object]):
    """Task kind ``shape``: token-id prompts of exact length in the shape's passes; each
    shape kind's module (:func:`shape_module`) builds, sends and proves it. The payload
    is the shape kind's plan (:class:`ShapePlan`, :class:`harness.tasks.shape_prefix.PrefixPlan`,
    :class:`harness.tasks.shape_load.LoadPlan`), read back with :func:`plan_of`."""

    def prepare(self, name: str, spec: TaskSpec, data_dir: Path | None = None, allow_contamination: bool = False,
                base_dir: Path | None = None) -> PreparedTask[object]:
        """The shape kind's ``prepare``."""
        assert spec.shape is not None
        return shape_module(spec.shape.kind).prepare(name, spec)

    def send(self, session: TaskSession, ctx: TaskContext, pt: PreparedTask[object]) -> SentTask:
        """The shape kind's ``send`` (the engine counters kept for the proof)."""
        assert ctx.spec.shape is not None
        return shape_module(ctx.spec.shape.kind).send(session, ctx, pt)

    def judge(self, sent: SentTask, ctx: TaskContext, pt: PreparedTask[object]) -> TaskRun:
        """Judge as every request task does; the outcome carries the shape's proof."""
        assert ctx.spec.shape is not None
        shape = shape_module(ctx.spec.shape.kind).proof(pt, sent)
        tr = super().judge(sent, ctx, pt)
        return replace(tr, outcome=replace(tr.outcome, shape=shape))

    def planned_size(self, spec: TaskSpec) -> int | None:
        """The shape's requests (the kind's ``planned_size``)."""
        return shape_module(spec.shape.kind).planned_size(spec.shape) if spec.shape is not None else None
