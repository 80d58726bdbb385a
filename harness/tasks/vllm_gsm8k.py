"""vLLM's GSM8K rules, for a task with ``vllm_rules`` (every vLLM-form config's GSM8K task).

A vLLM-form config carries a threshold vLLM's maintainers measured with vLLM's own client
(``tests/evals/gsm8k/gsm8k_eval.py`` and ``test_gsm8k_correctness.py`` of
``vllm-project/vllm``, read on the main branch in December 2026). Its floor is judged by the
same rules here (docs/vllm-parity.md):

* **Stop strings** (:func:`vllm_stop_sequences`): ``["Question", "Assistant:",
  "<|separator|>"]`` in completions mode; none in chat mode (vLLM's ``get_answer``: "the
  chat template delimits the turn, and they would also cut off reasoning").
* **The answer rule** (:func:`vllm_answer_value`, vLLM's ``get_answer_value``): commas
  removed, then the last run of digits (``\\d+``: Unicode decimal digits, as the ``regex``
  module vLLM imports reads it) read by ``ast.literal_eval``; no run, or a run Python does
  not read as an integer literal (``08``, non-ASCII digits, more than 4300 digits), is
  invalid. Signs, decimals and ``<think>`` text are not special: ``-3`` is 3, ``18.00``
  is 0, reasoning counts. The gold is read by the same rule (vLLM reads the label from
  the whole reference answer; its last digit run is the one after ``####``, so reading
  :attr:`harness.tasks.requests.Request.gold` gives the same value).
* **The verdict** (:func:`judge_vllm`): answer value == gold value, both as integers, as
  vLLM's ``np.array(preds) == np.array(labels)``.

This is the answer pipeline :data:`harness.config.schema.VLLM_PIPELINE` (``vllm``),
registered beside evalrun's own; the accuracy floor of a ``vllm_rules`` task reads it
(:mod:`harness.analysis.gatekinds.accuracy_floor`).
"""

from __future__ import annotations

import ast
import re

from harness.config.schema import VLLM_PIPELINE
from harness.tasks.pipelines import register_pipeline
from harness.tasks.stops import VLLM_GSM8K_STOP_SEQUENCES

__all__ = ["VLLM_COMPLETION_STOPS", "VLLM_INVALID", "judge_vllm", "vllm_answer_value", "vllm_extract",
           "vllm_stop_sequences"]

VLLM_INVALID = -9999999
"""vLLM's ``INVALID``: the value of a text without a readable answer."""

VLLM_COMPLETION_STOPS: tuple[str, ...] = VLLM_GSM8K_STOP_SEQUENCES
"""The stop strings vLLM's ``gsm8k_eval.py`` sends in completions mode (``get_answer``):
``("Question", "Assistant:", "<|separator|>")``."""

# ``\d`` of a str pattern is Unicode's decimal digit class in ``re`` as in ``regex``
_DIGITS_RE = re.compile(r"\d+")


def vllm_stop_sequences(chat: bool) -> tuple[str, ...]:
    """The stop strings vLLM's ``gsm8k_eval.py`` sends: :data:`VLLM_COMPLETION_STOPS` to
    ``/v1/completions``, none to ``/v1/chat/completions``."""
    return () if chat else VLLM_COMPLETION_STOPS


def vllm_answer_value(text: str) -> int:
    """vLLM's ``get_answer_value``: the integer of the last run of digits of ``text`` once
    its commas are removed, or :data:`VLLM_INVALID`.

    Examples: ``"#### 1,234"`` -> 1234; ``"-3"`` -> 3; ``"18.00"`` -> 0 (the run ``00``);
    ``"5.5"`` -> 5; ``"08"`` -> invalid (Python reads no ``08``); ``"no number"`` -> invalid.
    """
    numbers = _DIGITS_RE.findall(text.replace(",", ""))
    if not numbers:
        return VLLM_INVALID
    try:
        value = ast.literal_eval(numbers[-1])
    except SyntaxError:  # as vLLM: leading zeros, non-ASCII digits, over 4300 digits
        return VLLM_INVALID
    assert isinstance(value, int), "a run of digits Python reads is an int"
    return value


@register_pipeline(VLLM_PIPELINE, "vLLM's GSM8K rule: the last run of digits once commas are removed "
                                  "(get_answer_value of vLLM's gsm8k_eval.py), of the whole completion",
                   source="vllm")
def vllm_extract(text: str) -> str | None:
    """``vllm``: :func:`vllm_answer_value` of the whole completion (reasoning included) as
    text, or None when vLLM reads it as invalid."""
    value = vllm_answer_value(text)
    return None if value == VLLM_INVALID else str(value)


def judge_vllm(completion: str, gold: str) -> tuple[str | None, bool]:
    """vLLM's verdict on one completion: ``(answer as vLLM reads it, or None; right)``.

    Both sides are read by :func:`vllm_answer_value`; right when the two integers are
    equal (an invalid answer is wrong).

    Raises:
        ValueError: vLLM reads ``gold`` as invalid (vLLM's own script refuses such data:
            ``assert all(label != INVALID ...)``).
    """
    label = vllm_answer_value(gold)
    if label == VLLM_INVALID:
        raise ValueError(f"gold answer {gold!r} has no integer vLLM's rule reads")
    value = vllm_answer_value(completion)
    return (None if value == VLLM_INVALID else str(value)), value == label
