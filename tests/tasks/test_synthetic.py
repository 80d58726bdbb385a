"""Tests of harness/tasks/synthetic.py: determinism, disjoint splits, correct answers,
and that GSM8K's prompts and judge apply unchanged."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from harness.config.schema import TaskSpec
from harness.tasks import prepare_task
from harness.tasks import synthetic as syn
from harness.tasks.answers import judge
from harness.tasks.gsm8k import build_prompt
from harness.tasks.stops import STOP_SEQUENCES

WORDS = {"plus": 1, "minus": -1}


def independent_result(question: str) -> int:
    """Recompute the answer from the question text alone (no use of the generator)."""
    m = re.fullmatch(r"What is (\d) (plus|minus) (\d)\?", question)
    if m:
        return int(m.group(1)) + WORDS[m.group(2)] * int(m.group(3))
    m = re.fullmatch(r"(\w+) has (\d) (\w+) and gets (\d) more\. How many \3 does \1 have\?", question)
    if m:
        return int(m.group(2)) + int(m.group(4))
    m = re.fullmatch(r"(\w+) has (\d) (\w+) and gives away (\d)\. How many \3 does \1 have left\?", question)
    if m:
        return int(m.group(2)) - int(m.group(4))
    raise AssertionError(f"unexpected question form: {question!r}")


@pytest.fixture(scope="module")
def splits():
    return syn.generate_splits()


def test_deterministic_and_seed_dependent(splits):
    again = syn.generate_splits()
    assert again.train == splits.train and again.test == splits.test and again.fewshot == splits.fewshot
    other = syn.generate_splits(seed=syn.DEFAULT_SEED + 1)
    assert [it.question for it in other.test] != [it.question for it in splits.test]


def test_sizes_and_indices(splits):
    assert len(syn.all_items()) == 100 + 55 + 8 * 6 * 72 + 8 * 6 * 44 == 5723
    assert len(splits.test) == syn.DEFAULT_NUM_TEST
    assert len(splits.fewshot) == syn.DEFAULT_NUM_FEWSHOT_ITEMS
    assert len(splits.train) + len(splits.test) + len(splits.fewshot) == 5723
    for part in (splits.train, splits.test, splits.fewshot):
        assert [it.index for it in part] == list(range(len(part)))


def test_splits_disjoint_by_question_text(splits):
    train = {it.question for it in splits.train}
    test = {it.question for it in splits.test}
    few = {it.question for it in splits.fewshot}
    assert len(train) == len(splits.train) and len(test) == len(splits.test) and len(few) == len(splits.fewshot)
    assert not train & test and not train & few and not test & few


def test_every_answer_is_right(splits):
    for part in (splits.train, splits.test, splits.fewshot):
        for it in part:
            want = independent_result(it.question)
            assert want >= 0
            assert it.gold == str(want)
            assert it.answer.endswith(f"#### {want}")
            lhs = re.fullmatch(r"(\d) ([+-]) (\d) = (\d+) #### (\d+)", it.answer)
            assert lhs, it.answer
            a, op, b = int(lhs.group(1)), lhs.group(2), int(lhs.group(3))
            assert (a + b if op == "+" else a - b) == int(lhs.group(4)) == want


def test_judge_gives_full_marks_on_gold(splits):
    for it in splits.test + splits.fewshot:
        # the completion a perfect model would send back: " <answer>\n\n" before "Question"
        _, correct = judge(" " + it.answer + "\n\n", it.gold)
        assert {k: correct[k] for k in ("strict-numeric", "flexible-numeric")} == {
            "strict-numeric": True,
            "flexible-numeric": True,
        }


def test_template_coverage(splits):
    assert [p.template for p in splits.problems["fewshot"][:4]] == [0, 1, 2, 3]
    counts = Counter(p.template for p in splits.problems["test"])
    sizes = [100, 55, 3456, 2112]
    assert set(counts) == {0, 1, 2, 3}
    for t, n in counts.items():
        assert n <= int(syn.MAX_TEST_FRACTION * sizes[t])


def test_bad_sizes_raise():
    with pytest.raises(ValueError):
        syn.generate_splits(num_test=10_000)
    with pytest.raises(ValueError):
        syn.generate_splits(num_fewshot=-1)


def test_prepare_task_dispatches_to_synthetic(splits):
    spec = TaskSpec(kind="synthetic", num_questions=7, num_fewshot=3)
    prepared = prepare_task("arith", spec, None)
    assert len(prepared.requests) == 7
    assert prepared.stop == tuple(STOP_SEQUENCES)
    assert prepared.source.startswith("synthetic:")
    first = prepared.requests[0]
    assert first.question_id == "arith/test/0"
    assert first.prompt == build_prompt(splits.test[0].question, splits.fewshot, 3)
    assert first.prompt.startswith("Question: ") and first.prompt.endswith("\nAnswer:")
    assert first.gold == splits.test[0].gold
    # same data, same hash; different few-shot count, different hash
    assert prepare_task("arith", spec, None).dataset_hash == prepared.dataset_hash
    spec2 = TaskSpec(kind="synthetic", num_questions=7, num_fewshot=2)
    assert prepare_task("arith", spec2, None).dataset_hash != prepared.dataset_hash
    with pytest.raises(ValueError):
        prepare_task("arith", TaskSpec(kind="synthetic", num_fewshot=99), None)


def test_all_questions_default_when_num_questions_is_none():
    prepared = prepare_task("arith", TaskSpec(kind="synthetic", num_fewshot=0), None)
    assert len(prepared.requests) == syn.DEFAULT_NUM_TEST
