"""Tests of harness/tasks/gsm8k.py, answers.py and stops.py (the number parser itself: test_numbers.py).

Expected values are written by hand. The real GSM8K data is read from
../shared/data/gsm8k beside the repo and never copied here; the few JSONL lines
written to temporary folders below are invented.
"""

from __future__ import annotations

import hashlib
import json
import sys
import types
from pathlib import Path

import pytest

from harness.analysis.scoring import score_task
from harness.records.samples import Sample
from harness.tasks.answers import GSM8K_PIPELINES as PIPELINES
from harness.tasks.answers import answer_text, extract_flexible, extract_strict, judge, normalize_latex
from harness.tasks.gsm8k import (
    DataUnavailableError,
    GsmItem,
    build_prompt,
    build_requests,
    dataset_hash,
    load_gsm8k,
)
from harness.tasks.numbers import parse_number
from harness.tasks.requests import Request
from harness.tasks.stops import STOP_SEQUENCES, VLLM_GSM8K_STOP_SEQUENCES

SHARED = Path(__file__).resolve().parents[3] / "shared/data/gsm8k"
needs_shared = pytest.mark.skipif(
    not (SHARED / "test.jsonl").is_file() or not (SHARED / "train.jsonl").is_file(),
    reason=f"real GSM8K data not found at {SHARED} (expected test.jsonl and train.jsonl)",
)

S, F = "strict-numeric", "flexible-numeric"


def num(d: dict) -> dict:
    """evalrun's own pipelines of a judge result (lm-eval's are tested in test_lm_eval_gsm8k.py)."""
    return {k: d[k] for k in (S, F)}


# ------------------------------------------------------------------ required cases


def test_dollar_amount_with_trailing_period_flexible_right():
    answers, correct = judge("The shoes cost $20 and the hat $9, so it costs $29.00.", "29")
    assert answers[F] == "$29.00"
    assert correct[F] is True
    assert answers[S] is None and correct[S] is False


def test_number_followed_by_words_flexible_right():
    answers, correct = judge("The total is 72 clips, altogether.", "72")
    assert answers[F] == "72"
    assert correct[F] is True


def test_gold_with_thousands_separator_strict_right():
    answers, correct = judge("She earns 5600 dollars.\n#### 5600", "5,600")
    assert answers[S] == "5600"
    assert num(correct) == {S: True, F: True}


def test_negative_gold():
    assert judge("#### -3", "-3")[1][S] is True
    assert judge("#### 3", "-3")[1][S] is False
    assert judge("#### 3", "-3")[1][F] is False


def test_decimal_equal_to_integer():
    answers, correct = judge("#### 18.00", "18")
    assert answers[S] == "18.00"
    assert correct[S] is True


def test_leading_zero_flexible_right():
    answers, correct = judge("The answer is 08.", "8")
    assert answers[F] == "08"
    assert correct[F] is True


def test_run_on_into_invented_question():
    answers, correct = judge("#### 18\n\nQuestion: blah\nAnswer: #### 9", "18")
    assert num(answers) == {S: "18", F: "9"}
    assert num(correct) == {S: True, F: False}


def test_gold_with_surrounding_whitespace():
    assert judge("#### 42", "  42 \n")[1][S] is True
    with pytest.raises(ValueError):  # a malformed gold is bad data, not a wrong answer
        judge("#### 42", " 4,2 ")
    assert num(judge("So 1,234 in all.\n#### 1234", "\t1,234\n")[1]) == {S: True, F: True}


def test_fraction_not_equal_to_integer():
    assert parse_number("3.5") != parse_number("3")
    assert num(judge("#### 3.5", "3")[1]) == {S: False, F: False}


def test_no_number_both_none_both_wrong():
    answers, correct = judge("I do not know how to solve this.", "7")
    assert num(answers) == {S: None, F: None}
    assert num(correct) == {S: False, F: False}


def test_extract_strict_takes_first_marker_only_with_number():
    assert extract_strict("#### 5\n#### 6") == "5"
    assert extract_strict("#### none\n#### 6") == "6"
    assert extract_strict("# 5") is None
    assert extract_strict("####$1,200") == "$1,200"


def test_extract_flexible_last_number():
    assert extract_flexible("4 + 5 = 9 apples") == "9"
    assert extract_flexible("no digits") is None


def test_judge_bad_gold_raises():
    with pytest.raises(ValueError, match="not a number"):
        judge("#### 5", "five")


def test_pipelines_and_stops():
    assert PIPELINES == ("strict-numeric", "flexible-numeric", "strict-match", "flexible-extract")
    # the blank line before the next "Question:" that build_prompt writes between examples
    assert STOP_SEQUENCES == ("\n\nQuestion:",)
    shots = build_prompt("q", [GsmItem(0, "a", "b #### 1", "1"), GsmItem(1, "c", "d #### 2", "2")], 2)
    assert shots.count(STOP_SEQUENCES[0]) == 2  # between the examples, and before the test question


# ------------------------------------------------------------------------- loading


@needs_shared
def test_load_shared_folder():
    test = load_gsm8k("test", SHARED)
    train = load_gsm8k("train", SHARED)
    assert len(test) == 1319
    assert len(train) == 7473
    with (SHARED / "test.jsonl").open(encoding="utf-8") as f:
        first = json.loads(f.readline())
    expected_gold = first["answer"].split("####")[-1].strip()
    assert test[0].gold == expected_gold
    assert test[0].question == first["question"]
    assert test[0].answer == first["answer"]
    assert test[0].index == 0 and test[-1].index == 1318
    assert isinstance(test[0], GsmItem)
    assert all(parse_number(it.gold) is not None for it in test + train)


@needs_shared
def test_load_from_env_var(monkeypatch):
    monkeypatch.setenv("EVALRUN_DATA_DIR", str(SHARED))
    assert len(load_gsm8k("test")) == 1319


@needs_shared
def test_dataset_hash_stable_and_sensitive():
    test = load_gsm8k("test", SHARED)
    h = dataset_hash(test)
    assert len(h) == 64 and all(c in "0123456789abcdef" for c in h)
    assert dataset_hash(load_gsm8k("test", SHARED)) == h
    assert dataset_hash(test[:-1]) != h
    assert dataset_hash(load_gsm8k("train", SHARED)) != h


def _offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _assert_howto(msg: str):
    assert "--data-dir" in msg
    assert "EVALRUN_DATA_DIR" in msg
    assert "test.jsonl" in msg and "train.jsonl" in msg
    assert "hub" in msg


def test_empty_env_dir_unavailable(monkeypatch, tmp_path):
    _offline(monkeypatch)
    monkeypatch.setenv("EVALRUN_DATA_DIR", str(tmp_path))
    with pytest.raises(DataUnavailableError) as ei:
        load_gsm8k("test")
    assert isinstance(ei.value, RuntimeError)
    assert str(tmp_path / "test.jsonl") in str(ei.value)
    _assert_howto(str(ei.value))


def test_missing_folder_unavailable(tmp_path):
    with pytest.raises(DataUnavailableError, match="does not exist") as ei:
        load_gsm8k("test", tmp_path / "nowhere")
    _assert_howto(str(ei.value))


def test_no_folder_and_no_datasets_package(monkeypatch):
    _offline(monkeypatch)
    monkeypatch.delenv("EVALRUN_DATA_DIR", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(DataUnavailableError, match="datasets") as ei:
        load_gsm8k("test")
    _assert_howto(str(ei.value))


def test_no_folder_hub_unreachable(monkeypatch):
    _offline(monkeypatch)
    monkeypatch.delenv("EVALRUN_DATA_DIR", raising=False)
    fake = types.ModuleType("datasets")

    def load_dataset(*args, **kwargs):
        raise ConnectionError("offline")

    fake.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", fake)
    with pytest.raises(DataUnavailableError, match="ConnectionError") as ei:
        load_gsm8k("train")
    _assert_howto(str(ei.value))


def test_hub_rows_become_items(monkeypatch):
    monkeypatch.delenv("EVALRUN_DATA_DIR", raising=False)
    calls = []
    fake = types.ModuleType("datasets")

    def load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        return [{"question": "Invented: 2 + 2?", "answer": "2 + 2 = 4\n#### 4"}]

    fake.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", fake)
    items = load_gsm8k("test")
    assert calls == [(("openai/gsm8k", "main"), {"split": "test"})]
    assert items == [GsmItem(0, "Invented: 2 + 2?", "2 + 2 = 4\n#### 4", "4")]


def _write(folder: Path, name: str, lines: list[str]) -> Path:
    p = folder / name
    p.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return p


GOOD = json.dumps({"question": "Invented: 1 + 1?", "answer": "1 + 1 = 2\n#### 2"})


def test_malformed_line_names_file_and_line(tmp_path):
    p = _write(tmp_path, "test.jsonl", [GOOD, '{"question": "broken"', GOOD])
    with pytest.raises(DataUnavailableError) as ei:
        load_gsm8k("test", tmp_path)
    assert f"{p}:2:" in str(ei.value)
    _assert_howto(str(ei.value))


@pytest.mark.parametrize(
    "bad, fragment",
    [
        (json.dumps({"question": "q", "answer": "no marker"}), "####"),
        (json.dumps({"question": "q"}), "answer"),
        (json.dumps(["q", "a"]), "JSON object"),
        (json.dumps({"question": "q", "answer": "x\n#### many"}), "not a number"),
    ],
)
def test_invalid_item_names_file_and_line(tmp_path, bad, fragment):
    p = _write(tmp_path, "train.jsonl", [GOOD, "", bad])
    with pytest.raises(DataUnavailableError, match=fragment) as ei:
        load_gsm8k("train", tmp_path)
    assert f"{p}:3:" in str(ei.value)


def test_blank_lines_skipped_and_indices_count_items(tmp_path):
    other = json.dumps({"question": "Invented: 10 - 4?", "answer": "10 - 4 = 6\n#### 6 "})
    _write(tmp_path, "test.jsonl", [GOOD, "", other])
    items = load_gsm8k("test", tmp_path)
    assert [(it.index, it.gold) for it in items] == [(0, "2"), (1, "6")]


def test_unknown_split():
    with pytest.raises(ValueError, match="split"):
        load_gsm8k("validation", Path("."))


def test_gold_after_last_marker(tmp_path):
    line = json.dumps({"question": "q", "answer": "a #### 1 b\n####  5,600  "})
    _write(tmp_path, "test.jsonl", [line])
    assert load_gsm8k("test", tmp_path)[0].gold == "5,600"


# ------------------------------------------------------------------------- prompts


@needs_shared
def test_build_requests_prompt_shape():
    test = load_gsm8k("test", SHARED)
    train = load_gsm8k("train", SHARED)
    reqs = build_requests(test, train, num_questions=3, num_fewshot=5)
    assert len(reqs) == 3
    assert [r.question_id for r in reqs] == ["gsm8k/test/0", "gsm8k/test/1", "gsm8k/test/2"]
    for r, item in zip(reqs, test):
        assert isinstance(r, Request)
        assert r.prompt.count("Question:") - 1 == 5
        assert r.prompt.endswith("Answer:")
        assert r.prompt.endswith(f"Question: {item.question}\nAnswer:")
        assert r.prompt.startswith(f"Question: {train[0].question}\nAnswer: {train[0].answer}\n\n")
        assert r.gold == item.gold
        assert len(r.prompt_hash) == 16
    # the few-shot block is the same for every question
    block = reqs[0].prompt[: reqs[0].prompt.rindex("Question:")]
    assert all(r.prompt.startswith(block) for r in reqs)
    assert block.endswith("\n\n") and block.count("Question:") == 5

    zero = build_requests(test, train, num_questions=1, num_fewshot=0)
    assert zero[0].prompt == f"Question: {test[0].question}\nAnswer:"
    assert len(build_requests(test, train, None, 2)) == 1319


def test_build_requests_synthetic():
    shots = [GsmItem(i, f"Q{i}?", f"A{i}\n#### {i}", str(i)) for i in range(3)]
    tests = [GsmItem(7, "What is 2+2?", "#### 4", "4")]
    [r] = build_requests(tests, shots, None, 2, task_name="gsm8k_small")
    assert r.prompt == (
        "Question: Q0?\nAnswer: A0\n#### 0\n\n"
        "Question: Q1?\nAnswer: A1\n#### 1\n\n"
        "Question: What is 2+2?\nAnswer:"
    )
    assert r.question_id == "gsm8k_small/test/7"
    assert r.gold == "4"
    [one] = build_requests([GsmItem(0, "x", "#### 1", "1")], [], 1, 0)
    assert one.prompt_hash == hashlib.sha256(b"Question: x\nAnswer:").hexdigest()[:16]
    with pytest.raises(ValueError):
        build_requests(tests, shots, None, 4)
    with pytest.raises(ValueError):
        build_requests(tests, shots, -1, 1)
    assert build_prompt("q", shots, 1) == "Question: Q0?\nAnswer: A0\n#### 0\n\nQuestion: q\nAnswer:"


# ------------------------------------------------------------------- reasoning blocks, LaTeX numbers, stop sequences
# Expected verdicts are what a person reads off each completion; none is copied from the code under test.

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
