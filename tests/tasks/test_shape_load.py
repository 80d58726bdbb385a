"""Tests for harness.tasks.shape_load (shape kinds cache_pressure and concurrency_sweep)
and the load-time checks of those kinds (harness.config.checks).

Expected ids, budgets and places are written out here by hand from the spec; engine
counters and pass outcomes are built by hand (the proof's rules, not a server); token
counts come from the shipped tiny model's own tokenizer.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

import pytest

from harness.config.loader import load_config
from harness.config.schema import ConfigError, ShapeSpec, TaskSpec
from harness.models.training import SHIPPED_DIR
from harness.records.completions import Completion
from harness.records.measures import EngineCountersRecord, EngineFactsRecord
from harness.records.task_outcome import TaskOutcome
from harness.tasks import prepare_task, task_size
from harness.tasks.base import SentTask, TaskContext
from harness.tasks.shape_load import LoadPass, LoadPlan, plan_passes, pressure_proof, proof, send, sweep_proof
from harness.tasks.shapes import ShapeSent, place_of

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

TOKENIZER_DIR = SHIPPED_DIR / "tiny-qwen3next-mtp-arith"


def _task(**shape) -> TaskSpec:
    return TaskSpec(kind="shape", shape=ShapeSpec(**shape), max_tokens=32)


def test_pressure_plans_one_pass_of_every_prompt_with_its_budget():
    spec = _task(kind="cache_pressure", prompt_tokens=500, prompts=3, output_tokens=[4, 40])
    pt = prepare_task("load", spec, None)
    assert [r.question_id for r in pt.requests] == ["load/pressure/len500/0", "load/pressure/len500/1",
                                                    "load/pressure/len500/2"]
    assert [r.max_tokens for r in pt.requests] == [4, 40, 4]
    assert task_size(spec) == 3
    assert {place_of(r.question_id) for r in pt.requests} == {"pressure"}
    assert pt.typed_payload().place_counts() == {"pressure": 3}
    assert pt.typed_payload().sent_tokens() == 1500


def test_sweep_names_each_pass_and_budget_and_sends_the_same_prompts_per_pass():
    spec = _task(kind="concurrency_sweep", prompt_tokens=100, prompts=3, output_tokens=[4, 64], concurrency=[1, 8])
    pt = prepare_task("sweep", spec, None)
    assert [r.question_id for r in pt.requests] == [
        "sweep/c1/out4/0", "sweep/c1/out64/1", "sweep/c1/out4/2",
        "sweep/c8/out4/0", "sweep/c8/out64/1", "sweep/c8/out4/2"]
    assert [r.max_tokens for r in pt.requests] == [4, 64, 4, 4, 64, 4]
    assert [r.prompt for r in pt.requests[:3]] == [r.prompt for r in pt.requests[3:]]
    assert len({r.prompt for r in pt.requests}) == 3
    assert task_size(spec) == 6
    assert place_of("sweep/c8/out64/1") == "c8/out64"
    assert pt.typed_payload().place_counts() == {"c1/out4": 2, "c1/out64": 1, "c8/out4": 2, "c8/out64": 1}
    assert [(p.name, p.concurrency) for p in pt.typed_payload().passes] == [("c1", 1), ("c8", 8)]


def test_without_output_tokens_every_request_takes_the_tasks_budget():
    pt = prepare_task("s", _task(kind="concurrency_sweep", prompt_tokens=10, prompts=2, concurrency=[2]), None)
    assert [r.question_id for r in pt.requests] == ["s/c2/outmax/0", "s/c2/outmax/1"]
    assert all(r.max_tokens is None for r in pt.requests)


def test_a_sweep_needs_concurrency_and_a_load_shape_needs_prompt_tokens():
    with pytest.raises(ValueError, match="needs concurrency"):
        plan_passes(ShapeSpec(kind="concurrency_sweep", prompt_tokens=8))
    with pytest.raises(ValueError, match="needs prompt_tokens"):
        prepare_task("p", _task(kind="cache_pressure", prompts=2), None)


def _outcome(peak, counters=None, error=None) -> TaskOutcome:
    return TaskOutcome((), None, None, None, 1.0, engine_counters=counters, engine_counters_error=error,
                       peak_in_flight=peak)


PRESSURE = LoadPlan(ShapeSpec(kind="cache_pressure", prompt_tokens=500, prompts=4), 500,
                    (LoadPass("pressure", None, (None,) * 4),))
GOOD = EngineCountersRecord(prompt_tokens=2600, generation_tokens=40, preemptions=3)


def test_pressure_is_proven_by_preemptions_and_a_second_prefill_is_fine():
    p = pressure_proof(PRESSURE, GOOD, None, [_outcome(4, GOOD)], 0)
    # 4 x 500 = 2000 sent; the engine counted 2600 (preempted requests prefilled again)
    assert p.problems == () and p.prompt_tokens_sent == 2000 and p.peak_in_flight == {"pressure": 4}
    assert p.pass_counters == {"pressure": GOOD} and p.places == {"pressure": 4}
    assert "pass pressure peak in flight 4" in p.describe()


@pytest.mark.parametrize("counters, peak, failed, why", [
    (EngineCountersRecord(prompt_tokens=2000, generation_tokens=40, preemptions=0), 4, 0,
     "vllm:num_preemptions did not grow"),
    (EngineCountersRecord(prompt_tokens=2000, generation_tokens=40), 4, 0, "vllm:num_preemptions missing"),
    (EngineCountersRecord(prompt_tokens=1999, generation_tokens=40, preemptions=1), 4, 0, "grew by 1999 < 2000"),
    (EngineCountersRecord(prompt_tokens=2000, generation_tokens=0, preemptions=1), 4, 0, "nothing was generated"),
    (GOOD, 3, 0, "3 of 4 requests in flight at once"),
    (GOOD, 4, 1, "1 requests failed"),
    (None, 4, 0, "no engine counters: boom"),
])
def test_pressure_fails_closed_with_the_reason(counters, peak, failed, why):
    p = pressure_proof(PRESSURE, counters, "boom" if counters is None else None, [_outcome(peak, counters)], failed)
    assert any(why in x for x in p.problems), p.problems


SWEEP = LoadPlan(ShapeSpec(kind="concurrency_sweep", prompt_tokens=100, prompts=3, concurrency=[1, 8]), 100,
                 (LoadPass("c1", 1, (None,) * 3), LoadPass("c8", 8, (None,) * 3)))
PASS = EngineCountersRecord(prompt_tokens=300, generation_tokens=20, preemptions=0)
BOTH = EngineCountersRecord(prompt_tokens=600, generation_tokens=40, preemptions=0)


def test_sweep_is_proven_when_every_pass_reached_min_of_n_and_prompts():
    # pass c8 with 3 prompts can have 3 in flight at most
    p = sweep_proof(SWEEP, BOTH, None, [_outcome(1, PASS), _outcome(3, PASS)], 0)
    assert p.problems == () and p.peak_in_flight == {"c1": 1, "c8": 3} and p.prompt_tokens_sent == 600


@pytest.mark.parametrize("each, failed, why", [
    ([_outcome(1, PASS), _outcome(2, PASS)], 0, "pass c8: 2 requests in flight at most, not 3"),
    ([_outcome(2, PASS), _outcome(3, PASS)], 0, "pass c1: 2 requests in flight at most, not 1"),
    ([_outcome(1, PASS), _outcome(3, None, "cannot read /metrics")], 0, "pass c8: no engine counters: cannot read"),
    ([_outcome(1, EngineCountersRecord(prompt_tokens=300, generation_tokens=0)), _outcome(3, PASS)], 0,
     "pass c1: vllm:generation_tokens did not grow"),
    ([_outcome(1, PASS)], 0, "1 of 2 passes sent"),
    ([_outcome(1, PASS), _outcome(3, PASS)], 2, "2 requests failed"),
])
def test_sweep_fails_closed_with_the_reason(each, failed, why):
    p = sweep_proof(SWEEP, BOTH, None, each, failed)
    assert any(why in x for x in p.problems), p.problems


@pytest.mark.parametrize("cap, why", [
    (2, "pass c8: 3 requests in flight but the engine runs at most 2 at once (scheduler_config.max_num_seqs"),
    (3, None),      # min(8, 3 prompts) = 3 fit
    (None, None),   # not reported: not checked
])
def test_a_pass_wider_than_the_engines_max_num_seqs_is_not_proven(cap, why):
    pt = prepare_task("s", _task(kind="concurrency_sweep", prompt_tokens=50, prompts=3, concurrency=[1, 8]), None)
    sent = ShapeSent(_outcome(3, BOTH), 0, passes=(_outcome(1, PASS), _outcome(3, PASS)),
                     facts=EngineFactsRecord(max_num_seqs=cap))
    problems = proof(pt, sent).problems
    assert problems == (() if why is None else (problems[0],)) and (why is None or problems[0].startswith(why))


def test_pressure_wider_than_the_engines_max_num_seqs_is_not_proven():
    pt = prepare_task("p", _task(kind="cache_pressure", prompt_tokens=50, prompts=4), None)
    good = EngineCountersRecord(prompt_tokens=200, generation_tokens=8, preemptions=1)
    sent = ShapeSent(_outcome(4, good), 0, passes=(_outcome(4, good),), facts=EngineFactsRecord(max_num_seqs=3))
    assert proof(pt, sent).problems == ("pass pressure: 4 requests in flight but the engine runs at most 3 at once "
                                        "(scheduler_config.max_num_seqs of /server_info)",)


def test_a_task_not_sent_in_passes_has_no_proof():
    pt = prepare_task("p", _task(kind="cache_pressure", prompt_tokens=50, prompts=2), None)
    sent = SentTask(_outcome(None, GOOD), 0)
    assert "0 of 2 requests in flight at once" in proof(pt, sent).problems


# --------------------------------------------------------------------------- send


@dataclass
class FakeSession:
    """Answers every request with ``"ok"``; records each pass's requests and width."""

    calls: list = field(default_factory=list)

    def run_task(self, requests, max_tokens, temperature, seed, stop, on_done=None, per_request=False, chat=False,
                 logprobs=None, max_concurrency=None) -> TaskOutcome:
        self.calls.append((tuple(requests), max_concurrency))
        comps = tuple(Completion(request_id=r.question_id, text="ok") for r in requests)
        width = max_concurrency or 2  # the variant's max_concurrency below
        k = EngineCountersRecord(prompt_tokens=sum(len(r.prompt_token_ids) for r in requests), generation_tokens=5,
                                 preemptions=1)
        return TaskOutcome(comps, None, None, None, 0.1, engine_counters=k, peak_in_flight=min(width, len(requests)))

    def engine_facts(self):
        return EngineFactsRecord(block_size=256, max_num_batched_tokens=2048)

    def measured(self, work):
        result = work()
        k = EngineCountersRecord(prompt_tokens=sum(o.engine_counters.prompt_tokens for o in result),
                                 generation_tokens=5 * len(result), preemptions=len(result))
        return TaskOutcome((), None, None, None, 0.2, engine_counters=k), result


class _Bar:
    def advance(self, ok):
        pass

    def close(self):
        pass


def _ctx(spec: TaskSpec) -> TaskContext:
    return TaskContext(config="c", variant="v", variant_id="c/v", task="s", spec=spec, per_request=False,
                       max_concurrency=2, request_timeout=60, logprobs=None, server_argv=(),
                       model_ref=str(TOKENIZER_DIR), raw_path=None, label="s", log=print, warn=print, error=print,
                       bar=lambda label, n: _Bar())


def test_send_cuts_exact_token_ids_and_sends_each_pass_at_its_own_concurrency():
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    spec = _task(kind="concurrency_sweep", prompt_tokens=300, prompts=3, output_tokens=[4, 64], concurrency=[1, 8])
    pt = prepare_task("s", spec, None)
    session = FakeSession()
    sent = send(session, _ctx(spec), pt)
    assert [(len(reqs), conc) for reqs, conc in session.calls] == [(3, 1), (3, 8)]
    for reqs, _ in session.calls:
        for r in reqs:
            assert len(r.prompt_token_ids) == 300
            # the prompt's own last 300 tokens, as the tokenizer cuts them here
            assert list(r.prompt_token_ids) == tok.encode(r.prompt, add_special_tokens=False)[-300:]
    assert [c.request_id for c in sent.outcome.completions] == [r.question_id for r in pt.requests]
    shape = proof(pt, sent)
    assert shape.problems == () and shape.peak_in_flight == {"c1": 1, "c8": 3}
    assert shape.pass_counters["c8"].prompt_tokens == 900


# --------------------------------------------------------------------------- load-time checks


BASE = """\
name: {name}
model: builtin:tiny-qwen3next-mtp-arith
server_args: {server_args}
max_concurrency: {conc}
variants:
  reference: {{}}
  spec:
    speculative_config: {{method: mtp, num_speculative_tokens: 2}}
    {spec_args}
tasks:
  load:
    kind: shape
    shape: {shape}
gates: {{accuracy_threshold: null}}
"""
PRESSURE_SHAPE = "{kind: cache_pressure, prompt_tokens: 500, prompts: 4}"


def _load(tmp_path, server_args="--num-gpu-blocks-override 20", conc=8, spec_args="", shape=PRESSURE_SHAPE):
    p = tmp_path / "c.yaml"
    p.write_text(textwrap.dedent(BASE.format(name="c", server_args=server_args, conc=conc,
                                             spec_args=spec_args or "async_scheduling: false", shape=shape)))
    return load_config(p)


def test_a_pressure_config_with_one_small_cache_for_every_variant_loads(tmp_path):
    cfg = _load(tmp_path, server_args="--dtype bfloat16 --num-gpu-blocks-override=20")
    assert cfg.tasks["load"].shape.kind == "cache_pressure"
    # the same number spelled otherwise by one variant is the same small cache (vLLM reads an int)
    _load(tmp_path, spec_args="server_args: --num-gpu-blocks-override 020")


@pytest.mark.parametrize("kw, why", [
    ({"server_args": "--dtype bfloat16"}, "variant(s) reference, spec set no --num-gpu-blocks-override"),
    ({"spec_args": "server_args: --num-gpu-blocks-override 40"},
     "differs between variants (reference 20, spec 40)"),
    ({"conc": 3}, "sends 4 prompts all at once but max_concurrency is 3"),
])
def test_a_pressure_config_is_refused_at_load(tmp_path, kw, why):
    with pytest.raises(ConfigError, match=r"c\.yaml.*key 'tasks\.load\.shape'") as e:
        _load(tmp_path, **kw)
    assert why in str(e.value)


def test_a_sweep_may_go_above_max_concurrency_and_needs_no_small_cache(tmp_path):
    shape = "{kind: concurrency_sweep, prompt_tokens: 100, prompts: 8, concurrency: [1, 16]}"
    cfg = _load(tmp_path, server_args="--dtype bfloat16", conc=2, shape=shape)
    assert cfg.tasks["load"].shape.concurrency == [1, 16]
