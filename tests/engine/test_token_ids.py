"""A token id an engine answers with is a non-negative integer: a negative id
in ``token_ids`` or in a ``logprobs`` token makes the answer malformed (that request's
error, never a scored answer)."""

from __future__ import annotations

import json

import pytest

from harness.engine.client import parse_chat_completion, parse_completion, parse_top_logprobs


@pytest.mark.parametrize("ids", [[-1], [5, -3, 7], [True]])
def test_negative_or_boolean_token_ids_are_refused(ids: list) -> None:
    body = json.dumps({"choices": [{"text": "#### 4", "token_ids": ids, "finish_reason": "stop"}]}).encode()
    with pytest.raises(ValueError, match="token_ids"):
        parse_completion(body)
    chat = json.dumps({"choices": [{"message": {"content": "#### 4"}, "token_ids": ids}]}).encode()
    with pytest.raises(ValueError, match="token_ids"):
        parse_chat_completion(chat)


def test_valid_token_ids_are_kept() -> None:
    body = json.dumps({"choices": [{"text": "#### 4", "token_ids": [0, 17, 151645]}]}).encode()
    assert parse_completion(body).token_ids == [0, 17, 151645]


def test_a_negative_token_id_in_logprobs_is_refused() -> None:
    choice = {"token_ids": [-2], "logprobs": {"tokens": ["token_id:-2"], "token_logprobs": [-0.1],
                                               "top_logprobs": [{"token_id:-2": -0.1}]}}
    with pytest.raises(ValueError, match="negative token id"):
        parse_top_logprobs(choice, "r1")
