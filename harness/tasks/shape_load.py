"""Shape kinds ``cache_pressure`` and ``concurrency_sweep``: load on the engine.

Both send ``prompts`` distinct prompts of exactly ``prompt_tokens`` tokens, built as
``prompt_edges`` builds its own (:func:`harness.tasks.shapes.exact_prompt_ids`: the
synthetic task's five-shot prompt of one source question, cut with the served model's
tokenizer to its last ``prompt_tokens`` tokens and sent as token ids, so it ends at the
question's ``Answer:``). Prompt ``j`` gets the completion budget ``output_tokens[j %
len(output_tokens)]`` (None: the task's ``max_tokens``), so outputs of very different
lengths finish mid-batch. Greedy output match against the reference *under the same
shape* is the gate that matters: the reference variant runs the very same requests (same
question ids, lengths, budgets and concurrency), so a question id pairs like with like.

``cache_pressure``: every prompt in one pass, all in flight at once (the variant's
``max_concurrency``, refused at load when below ``prompts``), against a KV cache the
config makes small with ``--num-gpu-blocks-override`` in the server arguments of every
variant alike (:func:`harness.config.checks.check_shapes`), so the engine must preempt.
Question ids: ``{task}/pressure/len{n}/{j}``. Proof (fail closed,
:func:`pressure_proof`): ``vllm:num_preemptions`` grew by more than 0 over the task,
``vllm:prompt_tokens`` grew by at least the prompt tokens sent (a preempted request is
prefilled again, so more is fine), ``vllm:generation_tokens`` grew, the client had all
``prompts`` requests in flight at once, no request failed.

``concurrency_sweep``: the same prompts once per entry ``N`` of ``concurrency``, in order
(e.g. ``[1, 8]``: one at a time, then the engine's saturation), each pass at most ``N`` in
flight. The sweep's own concurrency wins over the variant's ``max_concurrency`` (each pass
hands its ``N`` to :func:`harness.tasks.shapes.send_passes`), since the concurrency *is*
the shape; ``--max-num-seqs`` still caps what the engine runs at once, so a pass wider
than ``scheduler_config.max_num_seqs`` of ``/server_info`` is not proven
(:func:`engine_width_problems`; the same for pressure). Question ids name
the pass and the budget: ``{task}/c{N}/out{m}/{j}``. Proof (:func:`sweep_proof`): every
pass's peak in flight (the client's own count) equals ``min(N, prompts)``, generation
tokens grew in every pass, prompt tokens cover what was sent, no request failed. Outputs
of the same prompt at different concurrencies are not compared with each other (batch
composition changes greedy bfloat16 output legitimately); each pass is compared with the
reference's same pass.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from harness.config.schema import ShapeSpec, TaskSpec
from harness.records.measures import EngineCountersRecord, EngineFactsRecord
from harness.records.shape_proof import ShapeProofRecord
from harness.records.task_outcome import TaskOutcome
from harness.tasks.base import PreparedTask, SentTask, TaskContext, TaskSession
from harness.tasks.requests import Request
from harness.tasks.shapes import counter_problems, exact_prompt_ids, load_tokenizer, plan_of, send_passes, shape_source
from harness.tasks.stops import STOP_SEQUENCES


@dataclass(frozen=True)
class LoadPass:
    """One pass of a load shape: its name (``pressure``, ``c8``), requests in flight at
    most (None: the variant's ``max_concurrency``) and its requests' budgets in tokens
    (one per prompt, in prompt order; None: the task's ``max_tokens``)."""

    name: str
    concurrency: int | None
    budgets: tuple[int | None, ...]


@dataclass(frozen=True)
class LoadPlan:
    """A prepared load shape: the spec, the prompt length in tokens and its passes."""

    spec: ShapeSpec
    length: int
    passes: tuple[LoadPass, ...]

    def place_counts(self) -> dict[str, int]:
        """Place (as :func:`harness.tasks.shapes.place_of` reads it from a question id)
        -> requests sent there: ``pressure`` or ``c{N}/out{m}``."""
        out: dict[str, int] = {}
        for p in self.passes:
            for b in p.budgets:
                key = place(p, b)
                out[key] = out.get(key, 0) + 1
        return out

    def sent_tokens(self) -> int:
        """Prompt tokens sent over every pass."""
        return self.length * sum(len(p.budgets) for p in self.passes)


def budgets_of(spec: ShapeSpec) -> tuple[int | None, ...]:
    """Prompt ``j``'s completion budget: ``output_tokens[j % len]``, or None (the task's)."""
    out = spec.output_tokens
    return tuple(out[j % len(out)] if out else None for j in range(spec.prompts))


def plan_passes(spec: ShapeSpec) -> tuple[LoadPass, ...]:
    """``cache_pressure``: one pass ``pressure`` at the variant's concurrency;
    ``concurrency_sweep``: one pass ``c{N}`` per entry of ``concurrency``, in order.

    Raises:
        ValueError: a sweep without ``concurrency``, or an entry below 1.
    """
    budgets = budgets_of(spec)
    if spec.kind == "cache_pressure":
        return (LoadPass("pressure", None, budgets),)
    if not spec.concurrency or min(spec.concurrency) < 1:
        raise ValueError(f"shape concurrency_sweep needs concurrency entries >= 1, got {spec.concurrency}")
    return tuple(LoadPass(f"c{n}", n, budgets) for n in spec.concurrency)


def place(p: LoadPass, budget: int | None) -> str:
    """A request's place: ``pressure`` for the pressure pass, ``c{N}/out{m}`` for a sweep
    pass (``outmax`` when the budget is the task's)."""
    if p.concurrency is None:
        return p.name
    return f"{p.name}/out{budget if budget is not None else 'max'}"


def question_id(task: str, p: LoadPass, budget: int | None, length: int, j: int) -> str:
    """``{task}/pressure/len{n}/{j}`` or ``{task}/c{N}/out{m}/{j}``."""
    if p.concurrency is None:
        return f"{task}/{p.name}/len{length}/{j}"
    return f"{task}/{place(p, budget)}/{j}"


def prepare(name: str, spec: TaskSpec) -> PreparedTask[object]:
    """The requests of a load shape, pass after pass, text and budget set (token ids at send).

    Raises:
        ValueError: no ``prompt_tokens``, more prompts than the synthetic test split
            holds, or a sweep without concurrency (:func:`plan_passes`).
    """
    shape = spec.shape
    assert shape is not None
    if shape.prompt_tokens is None:
        raise ValueError(f"task {name}: shape {shape.kind} needs prompt_tokens")
    passes = plan_passes(shape)
    src = shape_source(name, shape.kind, shape.prompts)
    reqs = []
    for p in passes:
        for j, budget in enumerate(p.budgets):
            base = src.requests[j]
            digest = hashlib.sha256(f"{shape.prompt_tokens}:{base.prompt}".encode()).hexdigest()[:16]
            reqs.append(Request(question_id(name, p, budget, shape.prompt_tokens, j), base.prompt, base.gold, digest,
                                max_tokens=budget))
    return PreparedTask(tuple(reqs), tuple(STOP_SEQUENCES), src.dataset_hash, src.source,
                        payload=LoadPlan(shape, shape.prompt_tokens, passes))


def send(session: TaskSession, ctx: TaskContext, pt: PreparedTask[object]) -> SentTask:
    """Cut every prompt to ``prompt_tokens`` with the served tokenizer and send the passes
    one after the other (a :class:`harness.tasks.shapes.ShapeSent`: each pass's outcome
    is kept for the proof)."""
    tok = load_tokenizer(ctx)
    plan = plan_of(pt, LoadPlan)
    ids: dict[str, tuple[int, ...]] = {}
    reqs = []
    for r in pt.requests:
        if r.prompt not in ids:
            ids[r.prompt] = exact_prompt_ids(tok, r.prompt, plan.length)
        reqs.append(replace(r, prompt_token_ids=ids[r.prompt]))
    per = len(plan.passes[0].budgets)
    passes = [(p.name, reqs[i * per:(i + 1) * per], p.concurrency) for i, p in enumerate(plan.passes)]
    return send_passes(session, ctx, passes)


def _record(plan: LoadPlan, counters: EngineCountersRecord | None, each: Sequence[TaskOutcome],
            problems: list[str]) -> ShapeProofRecord:
    return ShapeProofRecord(
        shape=plan.spec.kind, edges={}, prompt_lengths={str(plan.length): sum(len(p.budgets) for p in plan.passes)},
        prompt_tokens_sent=plan.sent_tokens(), places=plan.place_counts(), counters=counters,
        problems=tuple(problems),
        pass_counters={p.name: o.engine_counters for p, o in zip(plan.passes, each)},
        peak_in_flight={p.name: o.peak_in_flight or 0 for p, o in zip(plan.passes, each)})


def pressure_proof(plan: LoadPlan, counters: EngineCountersRecord | None, counters_error: str | None,
                   each: Sequence[TaskOutcome], failed: int) -> ShapeProofRecord:
    """Whether the engine's counters prove the cache pressure happened (module docstring).

    Problems (each fails the ``shape_proven`` gate closed): no counters; no
    ``vllm:num_preemptions`` or zero preemptions; prompt tokens below those sent; nothing
    generated; fewer than ``prompts`` requests in flight at once (client's count); failed
    requests.
    """
    problems = counter_problems(counters, counters_error, plan.sent_tokens())
    if counters is not None:
        if counters.preemptions is None:
            problems.append("vllm:num_preemptions missing from /metrics")
        elif counters.preemptions <= 0:
            problems.append("vllm:num_preemptions did not grow: the engine never preempted (is the KV cache small "
                            "enough, --num-gpu-blocks-override?)")
    want = plan.spec.prompts
    peak = max((o.peak_in_flight or 0 for o in each), default=0)
    if peak < want:
        problems.append(f"{peak} of {want} requests in flight at once")
    if failed:
        problems.append(f"{failed} requests failed")
    return _record(plan, counters, each, problems)


def sweep_proof(plan: LoadPlan, counters: EngineCountersRecord | None, counters_error: str | None,
                each: Sequence[TaskOutcome], failed: int) -> ShapeProofRecord:
    """Whether the passes of a concurrency sweep happened as planned (module docstring).

    Problems: no counters over the task; prompt tokens below those sent; a pass whose
    peak in flight is not ``min(N, prompts)``, whose counters are missing or that
    generated nothing; a pass that was not sent; failed requests.
    """
    problems = counter_problems(counters, counters_error, plan.sent_tokens())
    if len(each) != len(plan.passes):
        problems.append(f"{len(each)} of {len(plan.passes)} passes sent")
    for p, o in zip(plan.passes, each):
        want = min(p.concurrency or 0, len(p.budgets))
        if o.peak_in_flight != want:
            problems.append(f"pass {p.name}: {o.peak_in_flight} requests in flight at most, not {want}")
        k = o.engine_counters
        if k is None:
            problems.append(f"pass {p.name}: no engine counters: {o.engine_counters_error or 'not read'}")
        elif not k.generation_tokens:
            problems.append(f"pass {p.name}: vllm:generation_tokens did not grow")
    if failed:
        problems.append(f"{failed} requests failed")
    return _record(plan, counters, each, problems)


#: a shape's proof from its plan, the engine counters (or why none), each pass's outcome and
#: the failed requests (:func:`pressure_proof`, :func:`sweep_proof`)
_Proof = Callable[[LoadPlan, EngineCountersRecord | None, str | None, Sequence[TaskOutcome], int], ShapeProofRecord]


def _judge(plan: LoadPlan) -> _Proof:
    return pressure_proof if plan.spec.kind == "cache_pressure" else sweep_proof


def engine_width_problems(plan: LoadPlan, facts: EngineFactsRecord | None) -> list[str]:
    """A pass whose requests in flight the engine cannot run at once: its width (``prompts``
    for pressure, ``min(N, prompts)`` for a sweep pass) above ``scheduler_config.max_num_seqs``
    of ``/server_info``; the client's peak in flight then overstates the engine's batch.
    Not checked when the engine does not report it."""
    cap = facts.max_num_seqs if facts is not None else None
    if cap is None:
        return []
    out = []
    for p in plan.passes:
        width = len(p.budgets) if p.concurrency is None else min(p.concurrency, len(p.budgets))
        if width > cap:
            out.append(f"pass {p.name}: {width} requests in flight but the engine runs at most {cap} at once "
                       "(scheduler_config.max_num_seqs of /server_info)")
    return out


def proof(pt: PreparedTask[object], sent: SentTask) -> ShapeProofRecord:
    """The kind's proof over each pass :func:`send` sent (``sent.passes``), plus
    :func:`engine_width_problems`; a task not sent in passes has none, and its proof fails
    closed."""
    plan = plan_of(pt, LoadPlan)
    made = _judge(plan)(plan, sent.outcome.engine_counters, sent.outcome.engine_counters_error,
                        getattr(sent, "passes", ()), sent.failed_requests)
    extra = engine_width_problems(plan, getattr(sent, "facts", None))
    return made.model_copy(update={"problems": made.problems + tuple(extra)}) if extra else made


def planned_size(shape: ShapeSpec) -> int:
    """Requests of the shape: ``prompts`` per pass."""
    return shape.prompts * len(plan_passes(shape))
