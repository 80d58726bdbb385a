#!/usr/bin/env python3
"""A stub OpenAI-compatible completions server for the client benchmark (not a test).

It answers every ``POST /v1/completions`` after a fixed latency, however many
requests are in flight, as a batching engine with spare capacity does; so the wall
time of a run measures the CLIENT: how many requests it keeps in flight and what its
own work costs. Started like vLLM (``python bench/stub_server.py -m ... --port N``), so
evalrun's own server lifecycle can start it.

Options (environment): ``STUB_LATENCY_MS`` (default 500), ``STUB_TOKENS`` (completion
token ids returned per answer, default 100: GSM8K answers are about that long).
"""

from __future__ import annotations

import asyncio
import os
import sys

from aiohttp import web

LATENCY = float(os.environ.get("STUB_LATENCY_MS", "500")) / 1000
TOKENS = int(os.environ.get("STUB_TOKENS", "100"))
TEXT = " Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether.\n#### 72"


async def completions(request: web.Request) -> web.Response:
    body = await request.json()
    if LATENCY:
        await asyncio.sleep(LATENCY)
    choice = {"index": 0, "text": TEXT, "finish_reason": "stop", "stop_reason": "Question"}
    if body.get("return_token_ids"):
        choice["token_ids"] = list(range(1000, 1000 + TOKENS))
    return web.json_response({
        "id": "cmpl-stub", "object": "text_completion", "model": "stub", "choices": [choice],
        "usage": {"prompt_tokens": 900, "completion_tokens": TOKENS, "total_tokens": 900 + TOKENS},
    })


async def ok(request: web.Request) -> web.Response:
    return web.json_response({})


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "stub", "object": "model"}]})


async def metrics(request: web.Request) -> web.Response:
    return web.Response(text="# no speculative-decoding counters\n")


def main() -> None:
    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    app = web.Application()
    app.add_routes([web.post("/v1/completions", completions), web.get("/health", ok),
                    web.get("/v1/models", models), web.get("/metrics", metrics)])
    web.run_app(app, host="127.0.0.1", port=port, backlog=4096, print=None, access_log=None)


if __name__ == "__main__":
    main()
