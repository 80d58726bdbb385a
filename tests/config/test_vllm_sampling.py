"""vLLM's GSM8K configs that sample (tests/data/vllm_gsm8k/configs/sampling/, copied from
vLLM's ``tests/evals/gsm8k/configs``): ``temperature``, ``seed`` and ``seed: null`` reach the
request as vLLM's ``gsm8k_eval.py`` sends them, and no gate a correct sampler fails by
construction (token-sequence output match) is planned for them. No engine.

What vLLM's script does, as read on its main branch (``gsm8k_eval.py``): the request body is
``prompt``/``messages``, ``max_tokens`` and ``stop``, updated with ``_optional_params(
temperature=..., seed=..., ...)``, which keeps only the values that are not None; so
``seed: null`` sends no ``seed`` key (the engine draws its own), and the seed goes in the
body of every request, not on the server's command line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from aiohttp import web  # noqa: TID253 - the test serves with aiohttp, as the client's server does
from aiohttp.test_utils import TestServer  # noqa: TID253 - the test serves with aiohttp, as the client's server does

from harness.analysis.comparison import noise_variants
from harness.analysis.gatekinds.min_output_match import MinOutputMatch
from harness.analysis.gatekinds.sampled_equivalence import SampledEquivalence
from harness.cli import main
from harness.config.gates import sampling_notes
from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.config.schema import ConfigError
from harness.engine.client import AsyncCompletionClient, chat_complete
from harness.engine.session import run_coroutine

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

SAMPLING = Path(__file__).resolve().parents[1] / "data" / "vllm_gsm8k" / "configs" / "sampling"
GREEDY = SAMPLING.parent / "Nemotron-3-Super-120B-A12B-BF16.yaml"
PY = "/usr/bin/python3"
CONFIGS = sorted(SAMPLING.glob("*.yaml"))


def vllm_body_keys(temperature, seed) -> dict:
    """The optional keys vLLM's ``gsm8k_eval.py`` adds to a request (``_optional_params``)."""
    return {k: v for k, v in {"temperature": temperature, "seed": seed}.items() if v is not None}


def _sent_body(task, chat: bool) -> dict:
    """The body evalrun's client sends for one request of ``task`` (an in-process server
    records it; no engine)."""
    seen: list[dict] = []

    async def route(request):
        seen.append(await request.json())
        if chat:
            return web.json_response({"choices": [{"message": {"content": " 4"}, "token_ids": [5],
                                                   "finish_reason": "stop"}]})
        return web.json_response({"choices": [{"text": " 4", "token_ids": [5], "finish_reason": "stop"}]})

    async def run():
        app = web.Application()
        app.add_routes([web.post("/v1/chat/completions" if chat else "/v1/completions", route)])
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        try:
            async with AsyncCompletionClient(f"http://127.0.0.1:{server.port}", "m", timeout_s=5) as client:
                if chat:
                    return await chat_complete(client, "q/1", "Q", task.max_tokens, task.temperature, task.seed)
                return await client.complete("q/1", "Q", task.max_tokens, task.temperature, task.seed, ["Question"])
        finally:
            await server.close()

    assert run_coroutine(run()).ok
    return seen[0]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_temperature_and_seed_reach_the_request_as_vllm_sends_them(path):
    raw = yaml.safe_load(path.read_text())
    t = load_config(path).tasks["gsm8k"]
    body = _sent_body(t, chat=bool(raw.get("use_chat_completions")))
    expected = vllm_body_keys(raw.get("temperature", 0.0), raw.get("seed", 42))
    assert {k: body[k] for k in ("temperature", "seed") if k in body} == expected


def test_seed_null_is_read_and_sends_no_seed():
    t = load_config(SAMPLING / "DiffusionGemma-26B-A4B-it-FP8-dynamic.yaml").tasks["gsm8k"]
    assert t.seed is None and t.temperature == 1.0 and t.samples
    assert "seed" not in _sent_body(t, chat=True)


def test_temperature_null_sends_none_and_counts_as_sampling(tmp_path):
    p = tmp_path / "Nulls.yaml"
    p.write_text(GREEDY.read_text() + "temperature: null\nseed: null\n")
    t = load_config(p).tasks["gsm8k"]
    assert t.temperature is None and t.seed is None and t.samples
    body = _sent_body(t, chat=False)
    assert "temperature" not in body and "seed" not in body


def test_lm_eval_task_still_needs_a_seed(tmp_path):
    p = tmp_path / "native.yaml"
    p.write_text("model: m\nvariants: {reference: {}}\n"
                 "tasks: {t: {kind: lm_eval, lm_eval_task: gsm8k, seed: null}}\n")
    with pytest.raises(ConfigError, match="lm_eval needs a seed"):
        load_config(p)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_sampling_config_plans_no_token_match_gate_and_says_why(path):
    cp = build_plan([load_config(path)], python=PY).configs[0]
    assert not [g for g in cp.gates if isinstance(g, MinOutputMatch)]
    assert not [v for v in cp.variants if v.logprobs]  # no reference distribution asked
    assert noise_variants(cp) == set()
    kinds = {g.kind for g in cp.gates}
    assert "accuracy_floor" in kinds
    if len(cp.variants) > 1:  # the speculative config: still judged on accuracy and acceptance
        assert {"max_accuracy_drop", "min_acceptance_length", "max_acceptance_length_drop"} <= kinds
        [note] = sampling_notes(cp.config)
        assert "no min_output_match gate" in note and "reference->spec_async" in note
        # judged by the sampled verdict instead; vLLM's form sends seed 42 with every request
        # (as vLLM's test does), so the questions are not independent draws: NOT RUN as planned
        sampled = [g for g in cp.gates if isinstance(g, SampledEquivalence)]
        assert len(sampled) == len(cp.config.comparisons)
        assert all(not g.independent and "not independent draws" in g.dependence for g in sampled)


def test_greedy_config_keeps_its_output_match_gates():
    cp = build_plan([load_config(GREEDY)], python=PY).configs[0]
    assert len([g for g in cp.gates if isinstance(g, MinOutputMatch)]) >= 3
    assert sampling_notes(cp.config) == []


def test_dry_run_states_the_sampling_note(capsys, monkeypatch):
    monkeypatch.chdir(SAMPLING)
    assert main(["--config", "models-watermark-dspark-tp2.txt", "--dry-run", "--python", PY]) == 0
    out = capsys.readouterr().out
    assert "temperature=1.0, seed=42" in out
    assert "note: task gsm8k samples (temperature 1, seed 42, seed_mode same): no min_output_match gate" in out
    assert "min_output_match" not in out.split("gates:")[1]
    assert main(["--config", "models-watermark-dspark-tp2.txt", "--dry-run", "--json", "--python", PY]) == 0
    [entry] = json.loads(capsys.readouterr().out)
    assert entry["sampling_notes"] and entry["family_false_fail"]["output_match_gates"] == 0
