"""The request body evalrun sends for vLLM's own GSM8K configs, field by field, against the
body vLLM's ``tests/evals/gsm8k/gsm8k_eval.py`` builds for the same config.

vLLM's code, as read at commit 03e09605209f4dc33df2e3be7b24c05f0e3142cb (vllm-project/vllm), with
the stop list of its newest version (read 2026-12-04: "Stop strings are sent only in completions
mode"):

    few_shot_examples += (f"Question: {train_data[i]['question']}\\n"
                          f"Answer:{gen_prefix} {train_data[i]['answer']}\\n\\n")
    prompts.append(few_shot_examples + f"Question: {test_data[i]['question']}\\nAnswer:{gen_prefix}")
    stop=["Question", "Assistant:", "<|separator|>"]            # get_answer, completions mode
    data = {"prompt": prompt, "max_tokens": max_tokens, "stop": stop}          # call_vllm_api
    data = {"messages": [{"role": "user", "content": prompt}],                 # call_vllm_chat_api
            "max_tokens": max_tokens}                          # no stop: chat mode sends none
    data.update(_optional_params(temperature=..., seed=..., ...))  # keeps the non-None ones

:func:`vllm_body` below rebuilds that from the raw GSM8K files and the raw YAML (vLLM's
defaults: ``max_tokens`` 256, ``temperature`` 0.0, ``seed`` 42, ``gen_prefix`` ""), never
from evalrun's code. evalrun's body is what an in-process HTTP server records when the
variant session sends the prepared task (no engine: only the body is under test). The
deliberate differences (``model``, ``return_token_ids``) are the documented ones of
docs/configuration.md; neither changes a token.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.config.loader import load_config
from harness.engine.session import VariantSession, run_coroutine
from harness.tasks import prepare_task

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm_gsm8k"
VLLM_STOP = ["Question", "Assistant:", "<|separator|>"]
#: evalrun adds these to every body; neither changes the tokens generated
EXTRA = {"model": "m", "return_token_ids": True}

CASES = [
    DATA / "configs" / "sampling" / "Qwen3.5-4B-watermark.yaml",  # vLLM's: chat, temperature 0.7
    DATA / "configs" / "sampling" / "DiffusionGemma-26B-A4B-it-FP8-dynamic.yaml",  # vLLM's: chat, seed null
    DATA / "configs" / "Qwen3-0.6B-FP8.yaml",  # vLLM's: completions, defaults
    DATA / "generated" / "Chat-GenPrefix-Thinking.yaml",  # evalrun-written: gen_prefix in chat
]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line and not line.startswith("#")]


def vllm_body(raw: dict, train: list[dict], test: list[dict], i: int) -> dict:
    """The body vLLM's gsm8k_eval.py sends for test question ``i`` of config ``raw``."""
    gp = raw.get("gen_prefix", "")
    shots = "".join(f"Question: {t['question']}\nAnswer:{gp} {t['answer']}\n\n" for t in train[: raw["num_fewshot"]])
    prompt = shots + f"Question: {test[i]['question']}\nAnswer:{gp}"
    head = ({"messages": [{"role": "user", "content": prompt}]} if raw.get("use_chat_completions")
            else {"prompt": prompt})
    data = {**head, "max_tokens": raw.get("max_tokens", 256)}
    if not raw.get("use_chat_completions"):
        data["stop"] = VLLM_STOP
    opt = {"temperature": raw.get("temperature", 0.0), "seed": raw.get("seed", 42)}
    data.update({k: v for k, v in opt.items() if v is not None})
    return data


class _At:
    """Stands in for the vLLM server process: only its URL is read by the session."""

    def __init__(self, url: str) -> None:
        self.base_url = url


def _sent_bodies(path: Path, gsm8k_dir: Path, n: int) -> list[dict]:
    """What the variant session sends for the first ``n`` questions of the config's task."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    spec = load_config(path).tasks["gsm8k"]
    prepared = prepare_task("gsm8k", spec, gsm8k_dir)
    seen: list[dict] = []

    async def route(request):
        seen.append(await request.json())
        choice = {"text": " 4", "message": {"content": " 4"}, "token_ids": [5], "finish_reason": "stop"}
        return web.json_response({"choices": [choice]})

    async def run():
        app = web.Application()
        app.add_routes([web.post("/v1/completions", route), web.post("/v1/chat/completions", route)])
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        try:
            s = VariantSession("v", [], {}, Path("unused.log"), 1.0, 5.0, 1, speculative=False)
            s.server = _At(f"http://127.0.0.1:{server.port}")  # type: ignore[assignment]
            s.model = "m"
            return await s._send_all(prepared.requests[:n], spec.max_tokens, spec.temperature, spec.seed,
                                     prepared.stop, None, False, None, "no counters here",
                                     chat=spec.use_chat_completions)
        finally:
            await server.close()

    done, _ = run_coroutine(run())
    assert all(c.ok for c in done)
    return seen


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_request_body_is_vllm_gsm8k_evals(path, gsm8k_dir):
    raw = yaml.safe_load(path.read_text())
    train, test = _jsonl(gsm8k_dir / "train.jsonl"), _jsonl(gsm8k_dir / "test.jsonl")
    sent = _sent_bodies(path, gsm8k_dir, 2)
    for i, body in enumerate(sent):
        want = vllm_body(raw, train, test, i)
        assert body == {**want, **EXTRA}, path.name
