"""The completions client against an in-process aiohttp server: what it sends, and
every failure returned as a value (HTTP 4xx, 5xx with its retry, malformed body,
timeout), on the event loop the session uses (uvloop where installed); the parsing of an
answer's body, field by field; and a run whose engine (the FAKE server, tests/fake_vllm.py:
the real one cannot be made to answer malformed JSON) answers two requests malformed."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web  # noqa: TID253 - the test serves with aiohttp, as the client's server does
from aiohttp.test_utils import TestServer  # noqa: TID253 - the test serves with aiohttp, as the client's server does

from harness.engine.client import AsyncCompletionClient, chat_complete, parse_completion
from harness.engine.session import run_coroutine
from harness.records.run_record import load_run
from tests.fake_run import config, run_cli, servers_gone

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)


def _serve_and_send(handler, timeout_s: float = 5, prompt: str = "What is 2+2?"):
    """Run one request through AsyncCompletionClient against ``handler``; return
    (completion, bodies the server received, content types)."""
    seen: list[dict] = []
    ctypes: list[str] = []

    async def route(request: web.Request) -> web.StreamResponse:
        ctypes.append(request.content_type)
        seen.append(await request.json())
        return await handler(request, len(seen))

    async def main():
        app = web.Application()
        app.add_routes([web.post("/v1/completions", route)])
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        try:
            url = f"http://127.0.0.1:{server.port}"
            async with AsyncCompletionClient(url, "m", timeout_s=timeout_s, max_connections=2) as client:
                return await client.complete("q/1", prompt, 16, seed=7, stop=["Question"])
        finally:
            await server.close()

    return run_coroutine(main()), seen, ctypes


def test_success_sends_the_body_and_keeps_token_ids():
    async def ok(request, n):
        return web.json_response({"choices": [{"text": " 4", "token_ids": [5, 6], "finish_reason": "stop",
                                               "stop_reason": "Question"}]})

    c, seen, ctypes = _serve_and_send(ok)
    assert c.ok and c.text == " 4" and c.token_ids == (5, 6) and c.finish_reason == "stop"
    assert c.stop_reason == "Question" and c.attempts == 1
    assert ctypes == ["application/json"]
    assert seen == [{"model": "m", "prompt": "What is 2+2?", "max_tokens": 16, "temperature": 0.0,
                     "stop": ["Question"], "return_token_ids": True, "seed": 7}]


def test_http_4xx_is_an_error_value_without_retry():
    async def bad(request, n):
        return web.Response(status=400, text="max_tokens too large")

    c, seen, _ = _serve_and_send(bad)
    assert not c.ok and c.text is None and c.attempts == 1 and len(seen) == 1
    assert "q/1" in c.error and "HTTP 400" in c.error and "max_tokens too large" in c.error


def test_http_5xx_is_retried_once_then_succeeds():
    async def flaky(request, n):
        if n == 1:
            return web.Response(status=503, text="busy")
        return web.json_response({"choices": [{"text": "x", "finish_reason": "length"}]})

    c, seen, _ = _serve_and_send(flaky)
    assert c.ok and c.attempts == 2 and c.token_ids is None and len(seen) == 2
    assert seen[0] == seen[1]  # the same body re-sent


def test_http_5xx_twice_is_an_error_value():
    async def down(request, n):
        return web.Response(status=500, text="engine died")

    c, seen, _ = _serve_and_send(down)
    assert not c.ok and c.attempts == 2 and "HTTP 500" in c.error and "engine died" in c.error


def test_malformed_body_is_an_error_value():
    async def junk(request, n):
        return web.Response(status=200, text="not json", content_type="application/json")

    c, _, _ = _serve_and_send(junk)
    assert not c.ok and c.attempts == 1 and "malformed response" in c.error and "not json" in c.error


def test_no_answer_within_the_total_timeout_is_an_error_value():
    async def hang(request, n):
        await asyncio.sleep(2)
        return web.json_response({})

    c, seen, _ = _serve_and_send(hang, timeout_s=0.3)
    assert not c.ok and c.attempts == 2 and len(seen) == 2
    assert "no response within 0.3 s" in c.error


def test_a_prompt_orjson_refuses_is_still_sent():
    async def ok(request, n):
        return web.json_response({"choices": [{"text": "y", "finish_reason": "stop"}]})

    c, seen, _ = _serve_and_send(ok, prompt="odd \ud800 text")
    assert c.ok and seen[0]["prompt"] == "odd \ud800 text"


def _serve_chat(handler):
    """One request through :func:`chat_complete` against ``handler`` on
    ``/v1/chat/completions``; return (completion, bodies the server received)."""
    seen: list[dict] = []

    async def route(request: web.Request) -> web.StreamResponse:
        seen.append(await request.json())
        return await handler(request, len(seen))

    async def main():
        app = web.Application()
        app.add_routes([web.post("/v1/chat/completions", route)])
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        try:
            async with AsyncCompletionClient(f"http://127.0.0.1:{server.port}", "m", timeout_s=5) as client:
                return await chat_complete(client, "q/1", "Question: 2+2?\nAnswer:", 16, seed=7,
                                           stop=("Question", "Assistant:"))
        finally:
            await server.close()

    return run_coroutine(main()), seen


def test_chat_sends_one_user_message_and_keeps_content_and_token_ids():
    async def ok(request, n):
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": " 4"},
                                               "token_ids": [5, 6], "finish_reason": "stop"}]})

    c, seen = _serve_chat(ok)
    assert c.ok and c.text == " 4" and c.token_ids == (5, 6) and c.finish_reason == "stop"
    assert seen == [{"model": "m", "messages": [{"role": "user", "content": "Question: 2+2?\nAnswer:"}],
                     "max_tokens": 16, "stop": ["Question", "Assistant:"], "temperature": 0.0,
                     "return_token_ids": True, "seed": 7}]


def test_chat_5xx_is_retried_and_a_malformed_answer_is_an_error_value():
    async def flaky_then_bad(request, n):
        if n == 1:
            return web.Response(status=503, text="busy")
        return web.json_response({"choices": [{"message": {"content": 4}, "token_ids": [5]}]})

    c, seen = _serve_chat(flaky_then_bad)
    assert len(seen) == 2 and not c.ok and c.text is None and c.attempts == 2
    assert "malformed chat response" in c.error and "choices.0.message.content" in c.error and "got 4" in c.error


@pytest.mark.parametrize("body, field", [
    ({"choices": [{"text": 5, "token_ids": [1], "finish_reason": "stop"}]}, "choices.0.text"),
    ({"choices": [{"text": "a", "token_ids": "1 2", "finish_reason": "stop"}]}, "choices.0.token_ids"),
    ({"choices": [{"text": "a", "token_ids": [1, True]}]}, "choices.0.token_ids.1"),
    ({"choices": [{"text": "a", "finish_reason": 3}]}, "choices.0.finish_reason"),
    ({"choices": [{"text": "a", "stop_reason": [1]}]}, "choices.0.stop_reason"),
    ({"choices": []}, "choices"),
    ({"choices": [{"token_ids": [1]}]}, "choices.0.text"),
    ([{"text": "a"}], "body"),
])
def test_malformed_completion_names_the_field(body, field):
    with pytest.raises(ValueError) as e:
        parse_completion(json.dumps(body).encode())
    assert str(e.value).startswith(field + ":"), str(e.value)


def test_wellformed_completion_keeps_every_field():
    c = parse_completion(json.dumps({"id": "x", "choices": [{
        "text": " #### 5", "token_ids": [5, 6], "finish_reason": "stop", "stop_reason": "\n\n", "logprobs": None,
    }]}).encode())
    assert (c.text, c.token_ids, c.finish_reason, c.stop_reason) == (" #### 5", [5, 6], "stop", "\n\n")
    assert parse_completion(b'{"choices": [{"text": "", "stop_reason": 151645}]}').stop_reason == 151645
    with pytest.raises(ValueError, match="not JSON"):
        parse_completion(b"<html>502</html>")


@pytest.mark.usefixtures("capsys")  # the run's output is captured, not shown
def test_two_malformed_answers_of_twenty_fail_the_error_rate_gate_and_the_run_goes_on(tmp_path):
    cfg = config(tmp_path, spec_env={"FAKE_MODE": "ok", "FAKE_MALFORMED": "4,11"}, n=20)
    code = run_cli(tmp_path, cfg)
    rec = load_run(tmp_path / "results" / "r")
    assert code == 1 and rec.exit_code == 1 and rec.status == "completed" and rec.error is None
    c = rec.configs[0]
    ref, spec = c.variants["reference"].tasks["gsm8k"], c.variants["spec"].tasks["gsm8k"]
    assert (ref.num_requests, ref.error_count) == (20, 0)
    assert (spec.num_requests, spec.error_count, spec.error_rate) == (20, 2, 0.1)
    assert spec.scored["flexible-numeric"] == 18          # never scored as wrong answers
    samples = [json.loads(x) for x in (tmp_path / "results" / "r" / spec.samples).read_text().splitlines()]
    errors = sorted(s["error"] for s in samples if s["error"])
    assert len(errors) == 2 and all("malformed response" in e for e in errors)
    assert any("choices.0.text: Input should be a valid string (got 5)" in e for e in errors)
    assert any("choices.0.token_ids: Input should be a valid list (got '5 6 7 8')" in e for e in errors)
    failed = [g for g in rec.gates() if g.passed is False]
    assert [(g.kind, g.variant) for g in failed] == [("max_error_rate", "spec")]   # the only failure
    assert failed[0].observed == pytest.approx(0.1)
    assert servers_gone(rec.model_dump(mode="json"))
