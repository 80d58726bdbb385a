"""The sampled verdict's scoring requests (harness/engine/client.py ``target_logprobs``)
against an in-process aiohttp server answering as vLLM 0.32's ``/tokenize`` and
``/v1/completions`` with ``prompt_logprobs`` do: what is sent, the sum read from the
completion's positions only, and each malformed answer returned as the request's error."""

from __future__ import annotations

import pytest
from aiohttp import web  # noqa: TID253 - the test serves with aiohttp, as the client's server does
from aiohttp.test_utils import TestServer  # noqa: TID253 - the test serves with aiohttp, as the client's server does

from harness.engine.client import AsyncCompletionClient, target_logprobs
from harness.engine.session import run_coroutine

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)


def _score(plp_of, completion=(7, 8), chat=False):
    seen: list[tuple[str, dict]] = []

    async def tokenize(request: web.Request) -> web.StreamResponse:
        seen.append(("tokenize", await request.json()))
        return web.json_response({"tokens": [1, 2, 3], "count": 3, "max_model_len": 2048})

    async def complete(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append(("completions", body))
        return web.json_response({"choices": [{"text": "x", "prompt_logprobs": plp_of(body["prompt"]),
                                               "finish_reason": "length"}]})

    async def main():
        app = web.Application()
        app.add_routes([web.post("/tokenize", tokenize), web.post("/v1/completions", complete)])
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        try:
            async with AsyncCompletionClient(f"http://127.0.0.1:{server.port}", "m", timeout_s=5) as client:
                return await target_logprobs(client, "q/1", "Question: 2+2?", completion, chat)
        finally:
            await server.close()

    return run_coroutine(main()), seen


def _vllm(ids):  # vLLM's form: None first, then {token id: {logprob, rank, decoded_token}} per position
    lps = {1: -9.0, 2: -8.0, 3: -7.0, 7: -0.5, 8: -0.25}
    ranks = {1: 5, 2: 4, 3: 3, 7: 2, 8: 1}
    return [None] + [{str(t): {"logprob": lps[t], "rank": ranks[t], "decoded_token": f"<{t}>"}} for t in ids[1:]]


def test_sends_prompt_ids_then_completion_ids_and_sums_only_the_completion():
    got, seen = _score(_vllm)
    assert not isinstance(got, str)
    assert (sum(got.logprobs), len(got.logprobs)) == (-0.75, 2)  # -0.5 + -0.25; the prompt's positions are not counted
    assert got.ranks == (2, 1) and got.pieces == ("<7>", "<8>")  # each completion token's rank and text
    assert seen[0] == ("tokenize", {"model": "m", "prompt": "Question: 2+2?"})
    assert seen[1][1] == {"model": "m", "prompt": [1, 2, 3, 7, 8], "max_tokens": 1, "temperature": 0.0,
                          "prompt_logprobs": 0}


def test_chat_prompts_are_tokenized_as_one_user_message():
    _, seen = _score(_vllm, chat=True)
    assert seen[0][1]["messages"] == [{"role": "user", "content": "Question: 2+2?"}]
    assert seen[0][1]["add_generation_prompt"] is True


def test_an_empty_completion_sends_no_scoring_request():
    got, seen = _score(_vllm, completion=())
    assert not isinstance(got, str) and got.logprobs == () and [k for k, _ in seen] == ["tokenize"]


def test_a_missing_rank_or_text_is_none_not_an_error():
    got, _ = _score(lambda ids: [None] + [{str(t): {"logprob": -1.0}} for t in ids[1:]])
    assert not isinstance(got, str) and got.ranks == (None, None) and got.pieces == (None, None)


@pytest.mark.parametrize("bad, says", [
    (lambda ids: _vllm(ids)[:-1], "prompt_logprobs positions"),
    (lambda ids: _vllm(ids)[:-1] + [{"99": {"logprob": -1.0}}], "no log-probability of token 8"),
    (lambda ids: None, "prompt_logprobs positions"),
])
def test_a_malformed_scoring_answer_is_the_requests_error(bad, says):
    got, _ = _score(bad)
    assert isinstance(got, str) and "request q/1" in got and says in got
