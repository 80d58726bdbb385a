"""Shape kind ``prefix_reuse``: prompts sharing a long prefix, sent cold and then warm.

``prompts`` prompts of exactly ``prompt_tokens`` tokens whose first ``prefix_tokens``
token ids are the same (the synthetic task's few-shot blocks, :func:`harness.tasks.shapes.filler_text`,
cut with the served model's own tokenizer) and whose suffixes (the other
``prompt_tokens - prefix_tokens`` tokens) are the last tokens of different synthetic
questions' prompts (:func:`harness.tasks.synthetic.prepare_synthetic`), so every prompt
ends at its question's ``Answer:``. They are sent twice, in two passes one after the
other: ``{task}/cold/{j}``, then the same token ids again as ``{task}/warm/{j}``. The
warm pass runs under a warm prefix cache, so a comparison's output match of the warm
requests is judged under prefix reuse against the reference under the same shape
(prefix caching with MTP on hybrid models: vLLM #43559, #51113).

Proof (:func:`prefix_proof`, fail closed): the warm pass's ``vllm:prefix_cache_hits``
grew by at least ``prompts x floor(prefix_tokens / B) x B`` tokens, ``B`` the engine's
KV-cache block size. Source of the bound, vLLM's ``KVCacheManager.get_computed_blocks``
(``vllm/v1/core/kv_cache_manager.py``): a request's hit is a number of whole cached
blocks (``find_longest_cache_hit`` over the request's full-block hashes, at most
``num_tokens - 1`` tokens), and ``record_prefix_cache_stats`` adds it to the hits (its
``num_tokens`` to the queries) once per new request. A warm prompt is a cold prompt sent
again, so at least its block-aligned prefix is cached (the whole prompt unless evicted).
``B`` is ``cache_config.block_size`` of ``/server_info``: the front end copies the engine
core's block size back after start-up (``core_client.py``: "Sync block_size: may be
enlarged by _align_hybrid_block_size ... for hybrid Mamba models"), so it is the hybrid's
aligned block, which is also the Mamba state's caching granularity in ``align`` mode
(``MambaModelConfig.verify_and_update_config`` sets ``mamba_block_size = block_size``).
When the engine does not report it, the shape's ``block_size`` is used; with neither the
shape is not proven. Also required: ``vllm:prompt_tokens`` grew by at least the prompt
tokens sent (vLLM counts cached prompt tokens in it too: ``PromptTokenStats.total``),
generated tokens counted, no failed requests, distinct suffixes.

NOT RUN (never passed): a variant whose effective settings (``/server_info``) say prefix
caching is off (``cache_config.enable_prefix_caching`` false) cannot produce the shape;
its proof carries ``not_run`` with the reason, and every gate of the task on that variant
(and every comparison with it) is NOT RUN (:func:`harness.analysis.gates._not_run`). The
passes are still sent (cheap, and recorded as any task's requests), but nothing is judged.

Within the variant, warm outputs are compared with the cold ones (a warm cache changing
answers, SGLang #33450): reported in the proof's notes, not gated, since two passes of a
GPU engine batch differently and may differ within numerical noise (docs/gates.md).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

from harness.config.schema import ShapeSpec, TaskSpec
from harness.records.measures import EngineFactsRecord
from harness.records.shape_proof import ShapeProofRecord
from harness.records.task_outcome import TaskOutcome
from harness.tasks.base import PreparedTask, SentTask, TaskContext, TaskSession
from harness.tasks.requests import Request
from harness.tasks.shapes import (
    ShapePlan,
    ShapeRequest,
    ShapeSent,
    counter_problems,
    exact_prompt_ids,
    filler_text,
    load_tokenizer,
    plan_of,
    send_passes,
    shape_source,
)
from harness.tasks.stops import STOP_SEQUENCES

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

#: The two passes, in order.
PASSES = ("cold", "warm")


@dataclass(frozen=True)
class PrefixPlan(ShapePlan):
    """A prepared ``prefix_reuse`` shape: per request (cold pass, then warm) its pass
    (``edge``: ``cold`` / ``warm``) and length; places are the passes, as in the question
    ids (``{task}/cold/{j}``)."""

    def place_counts(self) -> dict[str, int]:
        """``cold`` / ``warm`` -> requests sent in that pass."""
        out: dict[str, int] = {}
        for p in self.places:
            out[p.edge] = out.get(p.edge, 0) + 1
        return out


def plan_requests(shape: ShapeSpec) -> tuple[ShapeRequest, ...]:
    """``prompts`` requests of ``prompt_tokens`` tokens in the cold pass, then the same
    in the warm pass."""
    assert shape.prompt_tokens is not None
    return tuple(ShapeRequest(name, 0, shape.prompt_tokens) for name in PASSES for _ in range(shape.prompts))


def prepare(name: str, spec: TaskSpec) -> PreparedTask[object]:
    """The cold and warm requests (text and gold of their source question; token ids set
    at send, with the served tokenizer). A request's ``prompt_hash`` is that of
    ``"prefix{P}:{L}:{source prompt}"``, the same for a prompt's cold and warm request.

    Raises:
        ValueError: more prompts than the synthetic test split's questions.
    """
    shape = spec.shape
    assert shape is not None and shape.prefix_tokens is not None and shape.prompt_tokens is not None
    src = shape_source(name, shape.kind, shape.prompts)
    reqs = []
    for pass_name in PASSES:
        for j, base in enumerate(src.requests):
            key = f"prefix{shape.prefix_tokens}:{shape.prompt_tokens}:{base.prompt}"
            reqs.append(Request(f"{name}/{pass_name}/{j}", base.prompt, base.gold,
                                hashlib.sha256(key.encode()).hexdigest()[:16]))
    return PreparedTask(tuple(reqs), tuple(STOP_SEQUENCES), src.dataset_hash, src.source,
                        payload=PrefixPlan(shape, plan_requests(shape)))


def prefix_ids(tokenizer: PreTrainedTokenizerBase, length: int) -> tuple[int, ...]:
    """The shared prefix: the first ``length`` token ids of the synthetic few-shot
    blocks (repeated until long enough; special tokens left out).

    Raises:
        ValueError: the tokenizer gives no tokens for the text.
    """
    block = tokenizer.encode(filler_text(), add_special_tokens=False)
    if not block:
        raise ValueError("the tokenizer gives no tokens for the prefix text")
    ids = list(block)
    while len(ids) < length:
        ids += block
    return tuple(ids[:length])


def prompt_ids(tokenizer: PreTrainedTokenizerBase, shape: ShapeSpec, texts: list[str]) -> list[tuple[int, ...]]:
    """Per source prompt text, the shape's token ids: the shared prefix, then the last
    ``prompt_tokens - prefix_tokens`` tokens of the text (:func:`exact_prompt_ids`)."""
    assert shape.prefix_tokens is not None and shape.prompt_tokens is not None
    head = prefix_ids(tokenizer, shape.prefix_tokens)
    return [head + exact_prompt_ids(tokenizer, t, shape.prompt_tokens - shape.prefix_tokens) for t in texts]


def prefix_caching_off(facts: EngineFactsRecord | None, variant: str) -> str | None:
    """The NOT RUN reason when the variant's effective settings say the engine does no
    prefix caching (``cache_config.enable_prefix_caching`` false in ``/server_info``),
    else None. Facts not read (None, or the flag not reported) are no reason: the
    counters then decide, and no cache hits fail the proof."""
    if facts is None or facts.enable_prefix_caching is not False:
        return None
    mode = f", mamba_cache_mode {facts.mamba_cache_mode}" if facts.mamba_cache_mode is not None else ""
    return f"prefix caching is off on {variant}: enable_prefix_caching false in /server_info{mode}"


@dataclass(frozen=True)
class PrefixSent(ShapeSent):
    """A sent ``prefix_reuse`` task: beside :class:`harness.tasks.shapes.ShapeSent`, the
    NOT RUN reason and whether the suffixes were distinct."""

    not_run: str | None = None
    distinct: bool = True


def send(session: TaskSession, ctx: TaskContext, pt: PreparedTask[object]) -> SentTask:
    """Cut every prompt with the served model's tokenizer and send the cold pass, then
    the warm pass (same token ids); NOT RUN when the engine's effective settings (read
    before the first pass) say prefix caching is off."""
    plan = plan_of(pt, PrefixPlan)
    n = plan.spec.prompts
    ids = prompt_ids(load_tokenizer(ctx), plan.spec, [r.prompt for r in pt.requests[:n]])
    reqs = tuple(replace(r, prompt_token_ids=ids[i % n]) for i, r in enumerate(pt.requests))
    sent = send_passes(session, ctx, [("cold", reqs[:n], None), ("warm", reqs[n:], None)])
    off = prefix_caching_off(sent.facts, ctx.variant_id)
    if off is not None:
        ctx.warn(f"{ctx.variant_id} {ctx.task}: NOT RUN: {off}")
    return PrefixSent(**{f.name: getattr(sent, f.name) for f in fields(sent)}, not_run=off,
                      distinct=len(set(ids)) == n)


def block_of(facts: EngineFactsRecord | None, shape: ShapeSpec) -> tuple[int | None, str]:
    """The KV-cache block size the bound uses and where it comes from: the engine's
    (``/server_info`` ``cache_config.block_size``), else the shape's ``block_size``."""
    if facts is not None and facts.block_size is not None:
        return facts.block_size, "cache_config.block_size of /server_info"
    if shape.block_size is not None:
        return shape.block_size, "the shape's block_size (the engine did not report one)"
    return None, "none"


def warm_vs_cold(outcome: TaskOutcome, n: int) -> tuple[int, list[int]]:
    """``(compared, differing)``: prompts whose cold and warm completions both succeeded,
    and the indexes ``j`` among them whose token ids differ."""
    by_id = {"/".join(c.request_id.rsplit("/", 2)[-2:]): c for c in outcome.completions}
    compared, differ = 0, []
    for j in range(n):
        a, b = by_id.get(f"cold/{j}"), by_id.get(f"warm/{j}")
        if a is None or b is None or a.error is not None or b.error is not None:
            continue
        compared += 1
        if a.token_ids != b.token_ids:
            differ.append(j)
    return compared, differ


def prefix_proof(plan: PrefixPlan, sent: SentTask) -> ShapeProofRecord:
    """Whether the engine's counters prove the prefix was reused (module docstring).

    Problems (each makes the shape unproven, so its gate fails closed): no counters over
    the task or over the warm pass; the warm pass's ``vllm:prefix_cache_hits`` missing or
    below ``prompts x floor(prefix_tokens / B) x B``; no block size, or a prefix shorter
    than one block; ``vllm:prompt_tokens`` below the prompt tokens sent; nothing
    generated; suffixes not distinct; failed requests.
    """
    spec, n = plan.spec, plan.spec.prompts
    assert spec.prefix_tokens is not None and spec.prompt_tokens is not None
    facts = getattr(sent, "facts", None)
    passes: tuple[TaskOutcome, ...] = getattr(sent, "passes", ())
    counters, notes = sent.outcome.engine_counters, []
    tokens_sent = sum(p.length for p in plan.places)
    problems = counter_problems(counters, sent.outcome.engine_counters_error, tokens_sent)
    facts_error = getattr(sent, "facts_error", None)
    if facts_error:
        notes.append(f"engine facts not read ({facts_error}): the counters decide")
    block, block_source = block_of(facts, spec)
    warm = passes[1].engine_counters if len(passes) == 2 else None
    if block is None:
        problems.append("no KV-cache block size (the engine reports none and the shape gives no block_size)")
    elif spec.prefix_tokens < block:
        problems.append(f"prefix_tokens {spec.prefix_tokens} < block size {block}: no whole block to reuse")
    else:
        want = n * (spec.prefix_tokens // block) * block
        notes.append(f"bound {want} = {n} prompts x {spec.prefix_tokens // block} blocks of {block} ({block_source})")
        if warm is None:
            why = passes[1].engine_counters_error if len(passes) == 2 else "no warm pass"
            problems.append(f"no engine counters over the warm pass: {why or 'not read'}")
        elif warm.prefix_cache_hits is None:
            problems.append("vllm:prefix_cache_hits missing from /metrics")
        elif warm.prefix_cache_hits < want:
            problems.append(f"warm pass: vllm:prefix_cache_hits grew by {warm.prefix_cache_hits:g} < {want}")
        if warm is not None and warm.prefix_cache_hits is not None:
            queries = warm.prefix_cache_queries or 0
            notes.append(f"warm pass: prefix cache hits/queries {warm.prefix_cache_hits:g}/{queries:g}")
    if not getattr(sent, "distinct", True):
        problems.append(f"suffixes of {spec.prompt_tokens - spec.prefix_tokens} tokens are not distinct "
                        "(raise prompt_tokens - prefix_tokens)")
    if sent.failed_requests:
        problems.append(f"{sent.failed_requests} requests failed")
    compared, differ = warm_vs_cold(sent.outcome, n)
    notes.append(f"warm outputs equal cold outputs on {compared - len(differ)}/{compared} prompts"
                 + (f" (differ: {', '.join(f'warm/{j}' for j in differ)}; not gated)" if differ else ""))
    edges = {"prefix": spec.prefix_tokens, **({"block": block} if block is not None else {})}
    return ShapeProofRecord(shape=spec.kind, edges=edges, prompt_lengths={str(spec.prompt_tokens): len(plan.places)},
                            prompt_tokens_sent=tokens_sent, places=plan.place_counts(), counters=counters,
                            problems=tuple(problems), not_run=getattr(sent, "not_run", None), notes=tuple(notes))


def proof(pt: PreparedTask[object], sent: SentTask) -> ShapeProofRecord:
    """``prefix_reuse``: :func:`prefix_proof`."""
    return prefix_proof(plan_of(pt, PrefixPlan), sent)


def planned_size(shape: ShapeSpec) -> int:
    """``prefix_reuse``: ``2 x prompts`` (a cold and a warm pass)."""
    return len(PASSES) * shape.prompts

