"""Task kind ``shape``: traffic shapes where hybrid speculative-decoding bugs live.

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

The shape proves it happened from the engine's counters over the task
(:func:`shape_proof`): prompt tokens counted at least the tokens sent, generated
tokens counted, and, for a chunk edge, at least one prompt longer than the chunk.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

from harness.config.schema import ShapeSpec, TaskSpec
from harness.records.measures import EngineCountersRecord, ShapeProofRecord
from harness.tasks.base import PreparedTask, RequestTask, SentTask, TaskContext, TaskRun, TaskSession
from harness.tasks.gsm8k import STOP_SEQUENCES, Request, dataset_hash
from harness.tasks.synthetic import GENERATOR_VERSION, format_block, generate_splits, prepare_synthetic

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
    """The ``edge/off<offset>`` of a shape's question id (``{task}/{edge}/off{offset}/len{n}/{j}``),
    None for another task's id."""
    parts = question_id.split("/")
    if len(parts) != 5 or not parts[2].startswith("off") or not parts[3].startswith("len"):
        return None
    return f"{parts[1]}/{parts[2]}"


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


def prepare_shape(name: str, spec: TaskSpec) -> PreparedTask:
    """The requests of a ``kind: shape`` task: text and place, token ids set at send.

    Raises:
        ValueError: the shape needs more distinct source questions than the synthetic
            test split holds.
    """
    assert spec.shape is not None
    places = plan_lengths(spec.shape)
    splits = generate_splits()
    n = spec.shape.prompts_per_length
    if n > len(splits.test):
        raise ValueError(f"task {name}: prompts_per_length {n} > {len(splits.test)} source questions")
    src = prepare_synthetic(name, TaskSpec(kind="synthetic", num_questions=n, num_fewshot=SOURCE_FEWSHOT))
    reqs = []
    for i, p in enumerate(places):
        j = i % n
        base = src.requests[j]
        qid = f"{name}/{place_key(p.edge, p.offset)}/len{p.length}/{j}"
        digest = hashlib.sha256(f"{p.length}:{base.prompt}".encode()).hexdigest()[:16]
        reqs.append(Request(qid, base.prompt, base.gold, digest))
    used = list(splits.test[:n]) + list(splits.fewshot[:SOURCE_FEWSHOT])
    source = f"shape:{spec.shape.kind} over synthetic:arith-v{GENERATOR_VERSION} (seed {splits.seed})"
    return PreparedTask(tuple(reqs), tuple(STOP_SEQUENCES), dataset_hash(used), source,
                        shape=ShapePlan(spec.shape, places))


def filler_text() -> str:
    """The text put in front of a source prompt when a length needs more tokens: the
    few-shot blocks of the synthetic task."""
    splits = generate_splits()
    return "".join(format_block(x.question, x.answer) for x in splits.fewshot)


def exact_prompt_ids(tokenizer, text: str, length: int) -> tuple[int, ...]:
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


def shape_proof(plan: ShapePlan, counters: EngineCountersRecord | None, counters_error: str | None,
                failed: int) -> ShapeProofRecord:
    """Whether the engine's counters prove the shape happened.

    Problems (each makes the shape unproven, so its gate fails closed):
    no counters (``counters_error``); ``vllm:prompt_tokens`` grew by less than the prompt
    tokens sent (with prefix caching off every prompt token is prefilled); no generated
    tokens; a chunk edge whose prompts were never longer than the chunk; failed requests.
    """
    sent = sum(p.length for p in plan.places)
    problems: list[str] = []
    if counters is None:
        problems.append(f"no engine counters: {counters_error or 'not read'}")
    else:
        if counters.prompt_tokens is None:
            problems.append("vllm:prompt_tokens missing from /metrics")
        elif counters.prompt_tokens < sent:
            problems.append(f"vllm:prompt_tokens grew by {counters.prompt_tokens:g} < {sent} prompt tokens sent")
        if not counters.generation_tokens:
            problems.append("vllm:generation_tokens did not grow: nothing was generated")
    chunk = plan.spec.chunk_size
    if chunk is not None and not any(p.length > chunk for p in plan.places):
        problems.append(f"chunk edge {chunk}: no prompt longer than the chunk")
    if failed:
        problems.append(f"{failed} requests failed")
    return ShapeProofRecord(shape=plan.spec.kind, edges=plan.spec.edges(), prompt_lengths=plan.lengths(),
                            prompt_tokens_sent=sent, places=plan.place_counts(), counters=counters,
                            problems=tuple(problems))


def load_tokenizer(ctx: TaskContext):
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


class ShapeTask(RequestTask):
    """Task kind ``shape``: exact-length token-id prompts (:mod:`harness.tasks.shapes`)."""

    kind = "shape"

    def prepare(self, name: str, spec: TaskSpec, data_dir: Path | None = None, allow_contamination: bool = False,
                base_dir: Path | None = None) -> PreparedTask:
        """:func:`prepare_shape`."""
        return prepare_shape(name, spec)

    def send(self, session: TaskSession, ctx: TaskContext, pt: PreparedTask) -> SentTask:
        """Cut every prompt to its length with the served model's tokenizer, send the
        token ids, and keep the engine counters for the proof."""
        tok = load_tokenizer(ctx)
        plan: ShapePlan = pt.shape
        reqs = tuple(replace(r, prompt_token_ids=exact_prompt_ids(tok, r.prompt, p.length))
                     for r, p in zip(pt.requests, plan.places))
        return super().send(session, ctx, replace(pt, requests=reqs))

    def judge(self, sent: SentTask, ctx: TaskContext, pt: PreparedTask) -> TaskRun:
        """Judge as every request task does; the outcome carries the shape's proof."""
        proof = shape_proof(pt.shape, sent.outcome.engine_counters, sent.outcome.engine_counters_error,
                            sent.failed_requests)
        tr = super().judge(sent, ctx, pt)
        return replace(tr, outcome=replace(tr.outcome, shape=proof))

    def planned_size(self, spec: TaskSpec) -> int | None:
        """The shape's requests (:func:`plan_lengths`)."""
        return len(plan_lengths(spec.shape)) if spec.shape is not None else None
