"""Reasoning blocks, LaTeX numbers and stop sequences.

Expected verdicts are what a person reads off each completion; none is copied
from the code under test.
"""

from __future__ import annotations

import pytest

from harness.analysis.scoring import score_task
from harness.records.samples import Sample
from harness.tasks.gsm8k import (
    STOP_SEQUENCES,
    VLLM_GSM8K_STOP_SEQUENCES,
    answer_text,
    judge,
    normalize_latex,
)

#: evalrun's own pipelines (lm-eval's, on the raw completion, are tested in test_lm_eval_gsm8k.py)
NUM = ("strict-numeric", "flexible-numeric")


@pytest.mark.parametrize("completion, gold, strict, flexible", [
    # the example
    (r" The total is \boxed{12{,}400}.", "12400", False, True),
    (r" 12{,}000 + 400 = 12{,}400 #### 12{,}400", "12400", True, True),
    (r" He pays \$5 per hour, so \boxed{\$1{,}200}", "1200", False, True),
    (r" \text{Answer: } \boxed{\text{\$}1{,}200}", "1200", False, True),
    (r" #### \boxed{18}", "18", True, True),
    (r" Each gets \frac{24}{2} = 12 cookies, so \boxed{\dfrac{24}{2}}", "12", False, True),
    (r" The share is \frac{3}{4}", "3", False, False),    # 0.75 is not 3
    (r" \frac{3}{4} of 8 is 6", "6", False, True),
    (r" 12\,400 dollars", "12400", False, True),        # thin space as thousands separator
    (r" a rate of 50\% #### 50", "50", True, True),
])
def test_latex_numbers(completion, gold, strict, flexible):
    _, correct = judge(completion, gold)
    assert {k: correct[k] for k in NUM} == {"strict-numeric": strict, "flexible-numeric": flexible}


@pytest.mark.parametrize("completion, gold, strict, flexible", [
    # the number in the reasoning is not the answer; the one after </think> is
    ("<think>Maybe 7? No: 3 + 4 = 8, hmm 9</think> 3 + 4 = 7 #### 7", "7", True, True),
    ("<think>#### 9 is wrong</think>\nSo 3 + 4 = 7.", "7", False, True),
    # an answer inside the reasoning only: the completion has no answer
    ("<think>3 + 4 = 7 #### 7</think>", "7", False, False),
    # unterminated reasoning (cut by max_tokens): no answer, even though it ends in 7
    ("<think>3 + 4 is 7", "7", False, False),
    # the chat template opened <think> in the prompt: only the closing tag is seen
    (" 3 + 4 = 9 ... no, 7</think> #### 7", "7", True, True),
    ("The answer: <think>not 5</think> 4 #### 4", "4", True, True),
])
def test_reasoning_blocks_are_not_answer_text(completion, gold, strict, flexible):
    _, correct = judge(completion, gold)
    assert {k: correct[k] for k in NUM} == {"strict-numeric": strict, "flexible-numeric": flexible}


def test_reasoning_only_completion_counts_as_invalid():
    samples = [
        Sample("c", "v", "t", f"t/test/{i}", "h", "7", completion=text, token_ids=(1,), finish_reason=fr,
               answers=judge(text, "7")[0], correct=judge(text, "7")[1])
        for i, (text, fr) in enumerate([
            ("<think>3 + 4 = 7</think>", "stop"),          # only reasoning
            ("<think>3 + 4 = 7 and so on", "length"),      # unterminated
            ("<think>hmm</think> #### 7", "stop"),         # answered
            ("#### 7", "stop"),                            # answered
        ])
    ]
    sc = score_task(samples)
    assert sc.accuracy["flexible-numeric"].invalid_rate == 2 / 4
    assert sc.accuracy["flexible-numeric"].correct == 2


def test_answer_text_and_normalize_latex_pieces():
    assert answer_text("a<think>b</think>c<think>d</think>e") == "a c e"
    assert answer_text("<think>only") == ""
    assert normalize_latex("no latex here 1,234") == "no latex here 1,234"
    assert normalize_latex(r"\frac{10}{0}") != "inf"  # a zero denominator is never a number


def _serve(raw: str, stops: tuple[str, ...]) -> str:
    """What an OpenAI-compatible server returns for a raw generation with ``stop``:
    the text up to (not including) the earliest stop string."""
    cut = min((raw.find(s) for s in stops if s in raw), default=-1)
    return raw if cut < 0 else raw[:cut]


def test_stop_at_the_fewshot_delimiter_not_at_the_word_question():
    raw = (" The question says: Question: how many apples are left? 9 - 4 = 5 apples.\n"
           "#### 5\n\nQuestion: Ann has 3 pens")
    ours = _serve(raw, STOP_SEQUENCES)
    theirs = _serve(raw, VLLM_GSM8K_STOP_SEQUENCES)
    assert ours.endswith("#### 5")
    assert {k: judge(ours, "5")[1][k] for k in NUM} == {"strict-numeric": True, "flexible-numeric": True}
    # vLLM's bare "Question" cuts inside the restated problem: the answer is lost
    assert theirs == " The question says: "
    assert {k: judge(theirs, "5")[1][k] for k in NUM} == {"strict-numeric": False, "flexible-numeric": False}
