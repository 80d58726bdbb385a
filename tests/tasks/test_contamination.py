"""harness.tasks.contamination: few-shot contamination, refused at run time, and the
subset-size warning recorded beside it (kind 7). Data folders are written here (a few
made-up items), never copied from the shared GSM8K folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.config.schema import TaskSpec
from harness.tasks import ContaminationError, prepare_task
from harness.tasks.contamination import normalise_question

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

FAKE = Path(__file__).resolve().parents[1] / "fake_vllm.py"

TEST = ["Ann has 3 pens and buys 4 more. How many pens?", "A box holds 6 eggs. How many eggs in 2 boxes?",
        "Tom reads 5 pages a day. How many pages in 3 days?", "A cat has 4 legs. How many legs have 2 cats?"]


def data_dir(tmp_path: Path, train: list[str]) -> Path:
    d = tmp_path / "data"
    d.mkdir(exist_ok=True)
    (d / "test.jsonl").write_text("".join(json.dumps({"question": q, "answer": f"work\n#### {i}"}) + "\n"
                                          for i, q in enumerate(TEST)))
    (d / "train.jsonl").write_text("".join(json.dumps({"question": q, "answer": f"w\n#### {i}"}) + "\n"
                                           for i, q in enumerate(train)))
    return d


def test_normalised_text():
    assert normalise_question("  How MANY  apples?\n") == normalise_question("how many apples")
    assert normalise_question("3 apples") != normalise_question("4 apples")


def test_question_among_its_own_fewshot_examples_is_refused(tmp_path):
    # train[0] (the one few-shot example) is test item 2 with other spacing and case
    d = data_dir(tmp_path, ["tom reads 5 pages a day.  How many pages in 3 days ?", "Other question 1?"])
    spec = TaskSpec(kind="gsm8k", num_questions=4, num_fewshot=1)
    with pytest.raises(ContaminationError) as e:
        prepare_task("gsm8k", spec, d)
    msg = str(e.value)
    assert str(d) in msg
    assert "gsm8k/test/2 = few-shot example 0" in msg and "gsm8k/test/2 = train item 0" in msg
    assert "--allow-contamination" in msg
    ok = prepare_task("gsm8k", spec, d, allow_contamination=True)
    assert ok.contamination == {"fewshot": [["gsm8k/test/2", 0]], "train": [["gsm8k/test/2", 0]]}


def test_train_split_overlapping_the_test_split_is_refused(tmp_path):
    # train item 2 is test item 1; it is not a few-shot example (num_fewshot 1)
    d = data_dir(tmp_path, ["Q one?", "Q two?", TEST[1]])
    with pytest.raises(ContaminationError,
                       match=r"1 test question\(s\) are in the train split: gsm8k/test/1 = train item 2"):
        prepare_task("gsm8k", TaskSpec(kind="gsm8k", num_questions=4, num_fewshot=1), d)
    # a question not asked (num_questions 1) is not reported
    assert prepare_task("gsm8k", TaskSpec(kind="gsm8k", num_questions=1, num_fewshot=1), d).contamination is None


def test_clean_data_and_real_gsm8k_pass(tmp_path, gsm8k_dir):
    assert prepare_task("gsm8k", TaskSpec(kind="gsm8k", num_questions=4, num_fewshot=2),
                        data_dir(tmp_path, ["Q one?", "Q two?"])).contamination is None
    # the real splits share no question (checked over all 1319 test questions)
    assert prepare_task("gsm8k", TaskSpec(kind="gsm8k", num_fewshot=5), gsm8k_dir).contamination is None


FAKE_CFG = """\
model: fake-model
startup_max_wait_seconds: 30
variants:
  reference: {env: {FAKE_MODE: ok}}
tasks:
  gsm8k: {num_questions: 4, num_fewshot: 1, max_tokens: 8}
gates:
  accuracy_threshold: 0.5
"""


def test_runner_refuses_contaminated_task_and_records_the_override(tmp_path, capsys):
    d = data_dir(tmp_path, [TEST[3], "Q two?"])
    cfg = tmp_path / "fake.yaml"
    cfg.write_text(FAKE_CFG)
    base = ["--config", str(cfg), "--python", str(FAKE), "--data-dir", str(d),
            "--results-dir", str(tmp_path / "res"), "--quiet"]
    assert main(base + ["--run-id", "refused"]) == 2
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines at spaces
    assert "gsm8k/test/3 = few-shot example 0" in err and str(d) in err
    rec = json.loads((tmp_path / "res/refused/run.json").read_text())
    assert rec["provenance"]["allow_contamination"] is False
    assert all(g["passed"] is None for g in rec["configs"][0]["gates"] if g["task"] == "gsm8k")

    code = main(base + ["--run-id", "allowed", "--allow-contamination"])
    assert code in (0, 1)
    rec = json.loads((tmp_path / "res/allowed/run.json").read_text())
    assert rec["provenance"]["allow_contamination"] is True
    assert rec["provenance"]["datasets"]["fake/gsm8k"]["contamination"] == {
        "fewshot": [["gsm8k/test/3", 0]], "train": [["gsm8k/test/3", 0]]}
    # kind 7: 4 questions against a threshold presumably measured on all 1319
    [w] = rec["configs"][0]["subset_warnings"]
    assert w["questions"] == 4 and w["assumed_calibration_questions"] == 1319
    summary = (tmp_path / "res/allowed/summary.md").read_text()
    assert "## Warnings" in summary and "a fair floor is" in summary and "contaminated data" in summary


def test_synthetic_splits_pass_the_same_check():
    # generated disjoint by question text; the check over all 200 test questions finds nothing
    assert prepare_task("arith", TaskSpec(kind="synthetic", num_fewshot=5), None).contamination is None
