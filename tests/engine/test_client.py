"""The completions client against an in-process aiohttp server: what it sends, and
every failure returned as a value (HTTP 4xx, 5xx with its retry, malformed body,
timeout), on the event loop the session uses (uvloop where installed)."""

from __future__ import annotations

import asyncio

from aiohttp import web  # noqa: TID253 - the test serves with aiohttp, as the client's server does
from aiohttp.test_utils import TestServer  # noqa: TID253 - the test serves with aiohttp, as the client's server does

from harness.engine.client import AsyncCompletionClient, chat_complete
from harness.engine.session import run_coroutine


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
