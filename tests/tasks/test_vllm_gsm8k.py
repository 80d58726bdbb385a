"""Tests of harness/tasks/vllm_gsm8k.py (vLLM's GSM8K rules) and the ``vllm_rules`` switch of
a GSM8K task: the pipeline ``vllm`` beside evalrun's own, the stop strings, the record.

The expected values are worked out by hand from vLLM's rule as its ``gsm8k_eval.py`` states
it (commas removed, the last run of digits, ``ast.literal_eval``); tests/vllm_parity/ runs
vLLM's own functions beside these.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.config.schema import VLLM_PIPELINE, TaskSpec
from harness.records.completions import Completion
from harness.tasks import DataUnavailableError, prepare_task, record_pipelines
from harness.tasks.answers import GSM8K_PIPELINES, VLLM_RULES_PIPELINES, judge
from harness.tasks.judging import judge_completion
from harness.tasks.pipelines import answer_pipeline
from harness.tasks.requests import Request
from harness.tasks.stops import STOP_SEQUENCES, VLLM_GSM8K_STOP_SEQUENCES
from harness.tasks.vllm_gsm8k import VLLM_INVALID, judge_vllm, vllm_answer_value, vllm_stop_sequences


@pytest.mark.parametrize("text, value", [
    ("#### 1,234", 1234),
    ("#### -3", 3),
    ("#### 18.00", 0),
    ("5.5 apples", 5),
    ("#### 08", VLLM_INVALID),
    ("#### 00", 0),
    ("no number", VLLM_INVALID),
    ("", VLLM_INVALID),
    ("<think>12</think>", 12),
    ("#### 12 <think>13", 13),
    ("#### ３", VLLM_INVALID),     # a Unicode digit run Python does not read as a literal
    ("1,2,3", 123),
])
def test_vllms_answer_rule(text, value):
    assert vllm_answer_value(text) == value


def test_judge_vllm_reads_both_sides_by_the_same_rule():
    assert judge_vllm("#### 3", "-3") == ("3", True)
    assert judge_vllm("#### 18.00", "18") == ("0", False)
    assert judge_vllm("nothing", "18") == (None, False)
    with pytest.raises(ValueError, match="no integer"):
        judge_vllm("#### 8", "08")


def test_the_pipeline_is_registered_as_vllms():
    p = answer_pipeline(VLLM_PIPELINE)
    assert p.source == "vllm" and p.extract is not None
    assert p.extract("#### 1,234.50") == "50" and p.extract("none") is None


def test_judge_puts_vllm_first_only_when_asked():
    answers, correct = judge("<think>12</think>", "12", vllm_rules=True)
    assert list(answers)[0] == VLLM_PIPELINE and answers[VLLM_PIPELINE] == "12" and correct[VLLM_PIPELINE]
    assert correct["flexible-numeric"] is False        # evalrun's own: reasoning is not answer text
    answers, correct = judge("<think>12</think>", "12")
    assert VLLM_PIPELINE not in answers and VLLM_PIPELINE not in correct


def test_a_failed_request_has_no_verdict_in_any_pipeline():
    req = Request("gsm8k/test/0", "p", "5", "0" * 16)
    s = judge_completion("c", "v", "gsm8k", req, Completion("gsm8k/test/0", None, error="timeout"), vllm_rules=True)
    assert s.error == "timeout" and not s.correct


def test_stop_strings():
    assert vllm_stop_sequences(chat=False) == VLLM_GSM8K_STOP_SEQUENCES == ("Question", "Assistant:", "<|separator|>")
    assert vllm_stop_sequences(chat=True) == ()


def test_the_switch_is_absent_from_the_record_when_off():
    off = TaskSpec().model_dump(mode="json", exclude={"gates"})
    assert "vllm_rules" not in off
    on = TaskSpec(vllm_rules=True).model_dump(mode="json", exclude={"gates"})
    assert on == {**off, "vllm_rules": True}
    assert TaskSpec.model_validate(on).vllm_rules is True


def test_the_switch_is_for_gsm8k_tasks_only():
    with pytest.raises(ValidationError, match="vllm_rules"):
        TaskSpec(kind="synthetic", vllm_rules=True)


def test_record_pipelines_put_vllm_first_when_it_was_scored():
    assert record_pipelines("gsm8k", None, [*GSM8K_PIPELINES, VLLM_PIPELINE]) == VLLM_RULES_PIPELINES
    assert record_pipelines(None, None, [VLLM_PIPELINE, "strict-numeric"]) == VLLM_RULES_PIPELINES
    assert record_pipelines("gsm8k", None, GSM8K_PIPELINES) == GSM8K_PIPELINES


def _data(tmp_path: Path, gold: str) -> Path:
    rows = [{"question": "Q?", "answer": f"Work.\n#### {gold}"}]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "train.jsonl").write_text(json.dumps({"question": "S?", "answer": "1\n#### 1"}) + "\n")
    return tmp_path


def test_prepare_sends_vllms_stops_with_the_switch_and_evalruns_without(tmp_path):
    data = _data(tmp_path, "5")
    spec = TaskSpec(num_questions=1, num_fewshot=1)
    assert prepare_task("gsm8k", spec, data).stop == STOP_SEQUENCES
    assert prepare_task("gsm8k", spec.model_copy(update={"use_chat_completions": True}), data).stop == \
        VLLM_GSM8K_STOP_SEQUENCES
    on = spec.model_copy(update={"vllm_rules": True})
    assert prepare_task("gsm8k", on, data).stop == VLLM_GSM8K_STOP_SEQUENCES
    assert prepare_task("gsm8k", on.model_copy(update={"use_chat_completions": True}), data).stop == ()


def test_prepare_refuses_a_gold_vllms_rule_cannot_read(tmp_path):
    data = _data(tmp_path, "08")
    spec = TaskSpec(num_questions=1, num_fewshot=1, vllm_rules=True)
    with pytest.raises(DataUnavailableError, match="gsm8k/test/0"):
        prepare_task("gsm8k", spec, data)
    prepare_task("gsm8k", spec.model_copy(update={"vllm_rules": False}), data)  # evalrun's own rule reads 8
