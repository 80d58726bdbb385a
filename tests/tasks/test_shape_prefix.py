"""Tests for harness.tasks.shape_prefix (shape kind ``prefix_reuse``).

Token ids are checked with the shipped tiny model's own tokenizer
(``transformers.AutoTokenizer`` on harness/models/data/), counted here independently of
the code under test; engine counters and facts are built by hand (the proof's rules:
hits over the warm pass >= prompts x the block-aligned prefix, from vLLM's
``KVCacheManager.get_computed_blocks``), not read from a server.
"""

from __future__ import annotations

import pytest

from harness.analysis.gatekinds.shape_proven import ShapeProven
from harness.analysis.gates import evaluate_gate
from harness.analysis.measurements import Measurements
from harness.config.schema import ShapeSpec, TaskSpec
from harness.models.training import SHIPPED_DIR
from harness.records.completions import Completion
from harness.records.measures import EngineCountersRecord, EngineFactsRecord
from harness.records.task_outcome import TaskOutcome
from harness.tasks import prepare_task, task_size
from harness.tasks.shape_prefix import PrefixSent, prefix_caching_off, prefix_proof, prompt_ids
from harness.tasks.shapes import place_of, shape_module

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

TOKENIZER_DIR = SHIPPED_DIR / "tiny-qwen3next-mtp-arith"


def _spec(**shape) -> TaskSpec:
    return TaskSpec(kind="shape", shape=ShapeSpec(kind="prefix_reuse", **shape), max_tokens=8)


def test_prepare_sends_every_prompt_cold_then_warm():
    spec = _spec(prefix_tokens=64, prompt_tokens=96, prompts=3)
    pt = prepare_task("prefix", spec, None)
    ids = [r.question_id for r in pt.requests]
    assert ids == [f"prefix/{p}/{j}" for p in ("cold", "warm") for j in range(3)]
    assert task_size(spec) == 6 and shape_module("prefix_reuse").planned_size(spec.shape) == 6
    assert [place_of(i) for i in ids] == ["cold"] * 3 + ["warm"] * 3
    assert pt.typed_payload().place_counts() == {"cold": 3, "warm": 3}
    # a prompt's cold and warm requests are the same prompt; the prompts differ from each other
    assert [r.prompt_hash for r in pt.requests[:3]] == [r.prompt_hash for r in pt.requests[3:]]
    assert len({r.prompt_hash for r in pt.requests}) == 3


@pytest.mark.parametrize("shape, why", [
    ({"prefix_tokens": 64}, "needs prefix_tokens and prompt_tokens"),
    ({"prefix_tokens": 64, "prompt_tokens": 64}, "must exceed prefix_tokens"),
    ({"prefix_tokens": 64, "prompt_tokens": 96, "offsets": [0]}, "takes"),
])
def test_the_spec_is_refused_at_load(shape, why):
    with pytest.raises(ValueError, match=why):
        ShapeSpec(kind="prefix_reuse", **shape)


def test_prompts_share_exactly_the_prefix_in_the_models_own_tokens():
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    spec = _spec(prefix_tokens=200, prompt_tokens=260, prompts=4)
    pt = prepare_task("prefix", spec, None)
    got = prompt_ids(tok, spec.shape, [r.prompt for r in pt.requests[:4]])
    assert [len(x) for x in got] == [260] * 4
    assert len({x[:200] for x in got}) == 1 and len({x[200:] for x in got}) == 4
    # the shared prefix is the start of the synthetic few-shot text; each suffix the end of its question
    for x, r in zip(got, pt.requests):
        whole = tok.encode(r.prompt, add_special_tokens=False)
        assert list(x[200:]) == whole[-60:]
        assert tok.decode(x[200:]).endswith("Answer:")


def _completions(pairs: dict[str, list[int]]) -> tuple[Completion, ...]:
    return tuple(Completion(request_id=f"prefix/{k}", text="x", token_ids=v, finish_reason="stop")
                 for k, v in pairs.items())


def _sent(warm_hits: float | None, block: int | None = 16, failed: int = 0, changed: bool = False,
          not_run: str | None = None) -> tuple[object, PrefixSent]:
    pt = prepare_task("prefix", _spec(prefix_tokens=70, prompt_tokens=100, prompts=2), None)
    comps = _completions({"cold/0": [1, 2], "cold/1": [3, 4], "warm/0": [1, 2],
                          "warm/1": [3, 5] if changed else [3, 4]})
    total = EngineCountersRecord(prompt_tokens=400, generation_tokens=8, preemptions=0,
                                 prefix_cache_queries=400, prefix_cache_hits=(warm_hits or 0) + 64)
    cold = EngineCountersRecord(prompt_tokens=200, generation_tokens=4, prefix_cache_queries=200, prefix_cache_hits=64)
    warm = EngineCountersRecord(prompt_tokens=200, generation_tokens=4, prefix_cache_queries=200,
                                prefix_cache_hits=warm_hits)
    outcome = TaskOutcome(comps, None, None, None, 1.0, engine_counters=total)
    passes = (TaskOutcome(comps[:2], None, None, None, 0.5, engine_counters=cold),
              TaskOutcome(comps[2:], None, None, None, 0.5, engine_counters=warm))
    facts = EngineFactsRecord(enable_prefix_caching=True, block_size=block, mamba_cache_mode="align")
    return pt, PrefixSent(outcome, failed, passes=passes, facts=facts, not_run=not_run)


def test_proof_holds_at_the_block_aligned_bound():
    # 2 prompts x floor(70 / 16) = 4 blocks of 16 tokens = 128 hit tokens at least
    pt, sent = _sent(warm_hits=128)
    p = prefix_proof(pt.typed_payload(), sent)
    assert p.problems == () and p.not_run is None
    assert p.prompt_tokens_sent == 2 * 2 * 100 and p.edges == {"prefix": 70, "block": 16}
    assert any("bound 128" in n for n in p.notes)
    assert any("warm outputs equal cold outputs on 2/2" in n for n in p.notes)


@pytest.mark.parametrize("kw, why", [
    ({"warm_hits": 127}, "vllm:prefix_cache_hits grew by 127 < 128"),
    ({"warm_hits": None}, "vllm:prefix_cache_hits missing"),
    ({"warm_hits": 500, "block": 128}, "prefix_tokens 70 < block size 128"),
    ({"warm_hits": 500, "block": None}, "no KV-cache block size"),
    ({"warm_hits": 500, "failed": 1}, "1 requests failed"),
])
def test_proof_fails_closed_with_the_reason(kw, why):
    pt, sent = _sent(**kw)
    p = prefix_proof(pt.typed_payload(), sent)
    assert any(why in x for x in p.problems), p.problems


def test_a_warm_answer_that_changed_is_reported_not_gated():
    pt, sent = _sent(warm_hits=160, changed=True)
    p = prefix_proof(pt.typed_payload(), sent)
    assert p.problems == ()
    assert any("on 1/2 prompts (differ: warm/1; not gated)" in n for n in p.notes), p.notes


def test_prefix_caching_off_in_the_effective_settings_is_the_not_run_reason():
    off = EngineFactsRecord(enable_prefix_caching=False, mamba_cache_mode="none")
    assert prefix_caching_off(off, "c/spec") == ("prefix caching is off on c/spec: enable_prefix_caching false "
                                                 "in /server_info, mamba_cache_mode none")
    assert prefix_caching_off(EngineFactsRecord(enable_prefix_caching=True), "c/spec") is None
    assert prefix_caching_off(EngineFactsRecord(), "c/spec") is None  # not reported: the counters decide
    assert prefix_caching_off(None, "c/spec") is None


def test_a_shape_that_cannot_happen_makes_its_gates_not_run_never_passed():
    pt, sent = _sent(warm_hits=0, not_run="prefix caching is off on c/ref: enable_prefix_caching false in /server_info")
    m = Measurements()
    m.task_record("ref", "prefix").shape = prefix_proof(pt.typed_payload(), sent)
    g = ShapeProven(id="c/ref/prefix/shape_proven", config="c", variant="ref", task="prefix")
    r = evaluate_gate(g, m)
    assert r.passed is None and r.detail == ("not run: prefix caching is off on c/ref: "
                                             "enable_prefix_caching false in /server_info")
