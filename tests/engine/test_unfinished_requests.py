"""A request the engine did not finish normally is a request error, never an answer.

vLLM's finish reasons are read from the installed vLLM (``FINISH_REASON_STRINGS`` of
``vllm/v1/engine/__init__.py``); only ``stop`` and ``length`` are answers. A fake HTTP
server stands in for the engine: the real engine aborts a request only when its client
goes away or an internal error hits it, which a test cannot provoke on demand.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from aiohttp import web  # noqa: TID253 - the test serves with aiohttp, as the client's server does

from harness.analysis.scoring import output_match, score_task
from harness.records.completions import Completion
from harness.records.samples import Sample
from harness.tasks.judging import judge_completion
from harness.tasks.lm_eval_task import LmEvalTask, _map_results
from harness.tasks.requests import Request
from tests.engine.test_client import _serve_and_send, _serve_chat

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)


def vllm_finish_reasons() -> tuple[str, ...]:
    from vllm.v1.engine import FINISH_REASON_STRINGS

    return tuple(FINISH_REASON_STRINGS)


ABNORMAL = [r for r in vllm_finish_reasons() if r not in ("stop", "length")] + [None, "tool_calls"]


def test_vllm_documents_abort_and_error_beside_stop_and_length():
    assert {"stop", "length", "abort", "error"} <= set(vllm_finish_reasons())


def _reply(reason):
    async def handler(request, n):
        choice = {"text": " The answer is 4. #### 4", "token_ids": [5, 6]}
        if reason is not None:
            choice["finish_reason"] = reason
        return web.json_response({"choices": [choice]})
    return handler


def _chat_reply(reason):
    async def handler(request, n):
        choice = {"message": {"content": "#### 4"}, "token_ids": [5, 6], "finish_reason": reason}
        return web.json_response({"choices": [choice]})
    return handler


@pytest.mark.parametrize("reason", ABNORMAL)
def test_completions_and_chat_paths_make_an_unfinished_request_an_error_keeping_its_reason(reason):
    c, _, _ = _serve_and_send(_reply(reason))
    assert not c.ok and c.finish_reason == reason and "q/1" in c.error and "did not finish it normally" in c.error
    chat, _ = _serve_chat(_chat_reply(reason))
    assert not chat.ok and chat.finish_reason == reason


@pytest.mark.parametrize("reason", ["stop", "length"])
def test_stop_and_length_are_answers(reason):
    c, _, _ = _serve_and_send(_reply(reason))
    assert c.ok and c.finish_reason == reason


def _request(i: int) -> Request:
    return Request(question_id=f"t/{i}", prompt="Question: 2+2?\nAnswer:", prompt_hash="0" * 16, gold="4")


def _judged(reasons):
    out = []
    for i, r in enumerate(reasons):
        # a completion as the client would hand it on before this rule: no error set
        c = Completion(f"t/{i}", " #### 4", token_ids=(5, 6), finish_reason=r)
        out.append(judge_completion("c", "v", "t", _request(i), c))
    return out


def test_an_aborted_answer_with_the_right_text_is_an_error_never_scored():
    samples = _judged(["stop", "abort", "error", "length"])
    aborted = samples[1]
    assert aborted.error and aborted.finish_reason == "abort" and aborted.correct == {} and not aborted.ok
    score = score_task(samples)
    # 4 requests, 2 not finished normally: 2 errors, accuracy over the 2 answers (both right)
    assert score.error_count == 2 and score.error_rate == 0.5
    assert score.accuracy["flexible-numeric"].scored == 2 and score.accuracy["flexible-numeric"].correct == 2
    assert score.finish_reasons == {"stop": 1, "length": 1}


def test_a_stored_sample_with_an_abnormal_reason_and_no_error_is_not_ok_and_not_compared():
    good = Sample("c", "ref", "t", "t/0", "0" * 16, "4", completion="x", token_ids=(1, 2), finish_reason="stop",
                  correct={"flexible-numeric": True}, answers={"flexible-numeric": "4"})
    forged = Sample("c", "spec", "t", "t/0", "0" * 16, "4", completion="x", token_ids=(1, 2), finish_reason="abort",
                    correct={"flexible-numeric": True}, answers={"flexible-numeric": "4"})
    assert good.ok and not forged.ok
    om = output_match([good], [forged])
    assert om.compared == 0 and om.skipped == ("t/0",)
    assert score_task([forged]).error_count == 1


def test_lm_eval_generated_documents_with_an_abnormal_reason_are_errors():
    task = LmEvalTask("cot", "gsm8k_cot", None, "test", 2, 1, "generate_until", "0")
    logged = [{"doc_id": d, "filter": "flexible-extract", "metrics": ["exact_match"], "arguments": [[f"P{d}", {}]],
               "resps": [["#### 4"]], "filtered_resps": ["4"], "target": "4", "exact_match": 1.0} for d in (0, 1)]
    res = {"samples": {"gsm8k_cot": logged}, "results": {"gsm8k_cot": {}}}
    lm = SimpleNamespace(evalrun_outputs={"P0": ((1, 2), "stop"), "P1": ((1, 2), "abort")})
    samples, _ = _map_results(task, res, lm, "c", "v", lambda d: f"cot/test/{d}")
    assert samples[0].ok and samples[0].correct == {"flexible-extract": True}  # one metric: named by its filter
    assert not samples[1].ok and samples[1].finish_reason == "abort" and samples[1].correct == {}
    assert "cot/test/1" in samples[1].error
