"""``num_fewshot`` above the train split is a data error naming the key and the split's
size, refused where the test split's size is checked: before any server starts
(:meth:`Gsm8kTask.available`) and when the task is prepared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.config.schema import TaskSpec
from harness.tasks import ShortDataError, available_questions, prepare_task


def _folder(tmp_path: Path, n_test: int, n_train: int) -> Path:
    d = tmp_path / "gsm8k"
    d.mkdir()
    for split, n in (("test", n_test), ("train", n_train)):
        rows = [{"question": f"{split} question {i}: what is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"}
                for i in range(n)]
        (d / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return d


@pytest.mark.parametrize("how", ["available", "prepare"])
def test_num_fewshot_above_the_train_split_is_a_data_error_naming_key_and_size(tmp_path: Path, how: str) -> None:
    d = _folder(tmp_path, n_test=4, n_train=3)
    spec = TaskSpec(kind="gsm8k", num_questions=4, num_fewshot=5)
    with pytest.raises(ShortDataError) as e:
        if how == "available":
            available_questions("gsm", spec, d)
        else:
            prepare_task("gsm", spec, d, allow_contamination=True)
    msg = str(e.value)
    assert "num_fewshot: 5" in msg and "holds 3 train questions" in msg and str(d / "train.jsonl") in msg


def test_num_fewshot_equal_to_the_train_split_is_accepted(tmp_path: Path) -> None:
    d = _folder(tmp_path, n_test=4, n_train=3)
    spec = TaskSpec(kind="gsm8k", num_questions=4, num_fewshot=3)
    assert available_questions("gsm", spec, d) == (4, str(d / "test.jsonl"))
    assert len(prepare_task("gsm", spec, d, allow_contamination=True).requests) == 4
