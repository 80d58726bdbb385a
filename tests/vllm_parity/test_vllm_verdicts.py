"""vLLM's verdict on vLLM's own gates, side by side with evalrun's.

vLLM's own scoring functions (``get_answer_value``, ``_score_gsm8k``,
``get_acceptance_length``, the two assertions of ``test_gsm8k_correctness``) are run from
a copy of vLLM's code (``data/gsm8k_eval_scoring.py.txt``, source named in it) on the same
constructed completions as evalrun's vLLM-form gate, which is planned from vLLM's real
configs (``tests/data/vllm_gsm8k/configs/``, copied with their source named). Every
verdict must agree. Beside them, evalrun's own pipelines judge some of the probes
differently: that difference is what the ``vllm`` pipeline exists for.

Stop strings are applied as vLLM's server applies them (:func:`served_text`: the text up to
the first stop string, which is left out), so a probe is what the model generated before
the stop list cut it.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.analysis.gatekinds.accuracy_floor import AccuracyFloor
from harness.analysis.gatekinds.min_acceptance_length import MinAcceptanceLength
from harness.analysis.gates import evaluate_gates
from harness.analysis.measurements import Measurements
from harness.analysis.scoring import score_task
from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.config.schema import VLLM_PIPELINE
from harness.engine.metrics import parse_spec_decode_counters
from harness.records.completions import Completion
from harness.records.measures import SpecDecodeRecord
from harness.tasks import prepare_task
from harness.tasks.answers import VLLM_RULES_PIPELINES
from harness.tasks.gsm8k import load_gsm8k
from harness.tasks.judging import judge_completion
from harness.tasks.requests import Request
from harness.tasks.stops import STOP_SEQUENCES
from harness.tasks.vllm_gsm8k import VLLM_INVALID, vllm_answer_value

HERE = Path(__file__).resolve().parent
CONFIGS = HERE.parents[0] / "data" / "vllm_gsm8k" / "configs"
COMPLETIONS_CONFIG = CONFIGS / "Qwen3-0.6B-FP8.yaml"            # vLLM's: completions mode
CHAT_CONFIG = CONFIGS / "sampling" / "Qwen3.5-4B-watermark.yaml"  # vLLM's: use_chat_completions
FLOOR_CONFIG = CONFIGS / "DeepSeek-V2-Lite-Chat-KVPP.yaml"      # vLLM's: threshold 0.65, tolerance 0.08
SPEC_CONFIG = CONFIGS / "DeepSeek-V4-Flash-DSpark-confidence-TP4.yaml"  # vLLM's: min_acceptance_length 1.2


def _vllm() -> dict[str, Any]:
    """vLLM's functions, run from the copy of its code."""
    ns: dict[str, Any] = {}
    path = HERE / "data" / "gsm8k_eval_scoring.py.txt"
    exec(compile(path.read_text(encoding="utf-8"), "vllm_gsm8k_eval", "exec"), ns)
    return ns


VLLM = _vllm()


def served_text(generated: str, stops: tuple[str, ...] | list[str]) -> str:
    """What vLLM's server returns for ``generated`` under ``stops``: the text before the
    first stop string (vLLM's default ``include_stop_str_in_output=False``)."""
    cut = min((i for i in (generated.find(s) for s in stops) if i >= 0), default=len(generated))
    return generated[:cut]


#: (name, what the model generated, the reference answer's last line): commas, decimals,
#: negatives, leading zeros, reasoning text, and text running on past the answer.
PROBES = [
    ("runs-on-into-a-new-question", " 2 + 3 = 5\n#### 5\nQuestion: Tom has 7 pears. How many?\nAnswer: 7", "#### 5"),
    ("restates-the-question", " Restating the Question: 4 boxes of 3 is 4 * 3 = 12.\n#### 12", "#### 12"),
    ("runs-on-into-an-assistant-turn", " 6 * 7 = 42\n#### 42\nAssistant: or maybe 43", "#### 42"),
    ("runs-on-past-a-separator", " 4 + 5 = 9\n#### 9<|separator|>and then 10", "#### 9"),
    ("decimal-zeros", " He pays 5 dollars.\n#### 5.00", "#### 5"),
    ("decimal-half", " Each gets 5.5 apples.", "#### 5"),
    ("thousands-comma", " The total is 1,234.", "#### 1,234"),
    ("negative-both", " The change is -3.\n#### -3", "#### -3"),
    ("negative-gold-only", " The change is 3.\n#### 3", "#### -3"),
    ("leading-zero", " #### 08", "#### 8"),
    ("reasoning-only", "<think>so it is 12</think>", "#### 12"),
    ("reasoning-after-the-answer", " #### 12\n<think>or 13", "#### 12"),
    ("reasoning-before-the-answer", "<think>maybe 13</think> #### 12", "#### 12"),
]


def _write_jsonl(path: Path, rows: list[dict[str, str]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture
def probe_data(tmp_path: Path) -> Path:
    """A GSM8K folder whose test split is :data:`PROBES` (answers ``"Reasoning.\\n#### N"``)."""
    _write_jsonl(tmp_path / "test.jsonl", [{"question": f"Probe {name}?", "answer": f"Reasoning.\n{last}"}
                                           for name, _, last in PROBES])
    _write_jsonl(tmp_path / "train.jsonl", [{"question": f"Shot {i}: what is {i} + 1?",
                                             "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"} for i in range(5)])
    return tmp_path


def _prepared(config: Path, data: Path, n: int):
    """The GSM8K task of a vLLM-form config, prepared on ``data`` (``n`` questions)."""
    cfg = load_config(config)
    spec = cfg.tasks["gsm8k"].model_copy(update={"num_questions": n})
    return cfg, spec, prepare_task("gsm8k", spec, data)


def test_the_vllm_form_sends_vllms_stop_strings_in_completions_mode_and_none_in_chat(probe_data):
    cfg, spec, pt = _prepared(COMPLETIONS_CONFIG, probe_data, len(PROBES))
    assert spec.vllm_rules and not spec.use_chat_completions
    assert list(pt.stop) == VLLM["COMPLETION_STOP"]
    cfg, spec, pt = _prepared(CHAT_CONFIG, probe_data, len(PROBES))
    assert spec.vllm_rules and spec.use_chat_completions
    assert pt.stop == ()


def test_evalruns_vllm_pipeline_gives_vllms_verdict_on_every_probe(probe_data):
    cfg, spec, pt = _prepared(COMPLETIONS_CONFIG, probe_data, len(PROBES))
    raw_answers = [json.loads(line)["answer"] for line in (probe_data / "test.jsonl").read_text().splitlines()]
    flips = []
    for (name, generated, _), req, answer in zip(PROBES, pt.requests, raw_answers, strict=True):
        # vLLM: its stop list, its rule on the completion and on the whole reference answer
        vllm_pred = VLLM["get_answer_value"](served_text(generated, VLLM["COMPLETION_STOP"]))
        vllm_right = vllm_pred == VLLM["get_answer_value"](answer)
        # evalrun: the stop list the prepared task sends, then judging as a run judges
        text = served_text(generated, pt.stop)
        sample = judge_completion(cfg.name, "reference", "gsm8k", req,
                                  Completion(req.question_id, text, finish_reason="stop"), vllm_rules=True)
        assert sample.correct[VLLM_PIPELINE] is vllm_right, name
        assert sample.answers[VLLM_PIPELINE] == (None if vllm_pred == VLLM["INVALID"] else str(vllm_pred)), name
        if sample.correct["flexible-numeric"] != vllm_right:
            flips.append(name)
    # evalrun's own pipeline beside it, on the same served text, judges these the other way
    # (worked out by hand from the two rules; docs/vllm-parity.md)
    assert flips == ["decimal-zeros", "decimal-half", "negative-gold-only", "leading-zero", "reasoning-only",
                     "reasoning-after-the-answer"]


def test_the_issues_done_when_cases(probe_data):
    """A run-on into a new "Question" is right; ``#### 5.00`` is wrong, as vLLM reads it."""
    cfg, spec, pt = _prepared(COMPLETIONS_CONFIG, probe_data, len(PROBES))
    by_name = {name: (gen, req) for (name, gen, _), req in zip(PROBES, pt.requests, strict=True)}
    for name, right in (("runs-on-into-a-new-question", True), ("decimal-zeros", False)):
        gen, req = by_name[name]
        s = judge_completion(cfg.name, "reference", "gsm8k", req,
                             Completion(req.question_id, served_text(gen, pt.stop), finish_reason="stop"),
                             vllm_rules=True)
        assert s.correct[VLLM_PIPELINE] is right, name
    # under evalrun's own stop string (a native config) the run-on is not cut, and is wrong
    gen, req = by_name["runs-on-into-a-new-question"]
    s = judge_completion(cfg.name, "reference", "gsm8k", req,
                         Completion(req.question_id, served_text(gen, STOP_SEQUENCES), finish_reason="stop"))
    assert s.correct["flexible-numeric"] is False


def test_every_gold_of_the_test_split_reads_as_vllm_reads_its_label(gsm8k_dir):
    """vLLM reads the label from the whole reference answer; evalrun from the text after
    ``####``: the same integer for all 1319, the two negative golds read without their sign."""
    items = load_gsm8k("test", gsm8k_dir)
    assert len(items) == 1319
    assert [vllm_answer_value(it.gold) for it in items] == [VLLM["get_answer_value"](it.answer) for it in items]
    assert [(it.index, it.gold, vllm_answer_value(it.gold)) for it in items if it.gold.startswith("-")] == [
        (489, "-10", 10), (1113, "-3", 3)]


_TEXT = st.lists(st.sampled_from(list("0123456789,.- #abQ\n") + ["٣", "３", "<think>", "</think>", "00", "08"]),
                max_size=30).map("".join)


@settings(max_examples=200, deadline=None)
@given(_TEXT)
def test_the_answer_rule_is_vllms_on_any_text(text):
    assert vllm_answer_value(text) == VLLM["get_answer_value"](text)
    assert VLLM_INVALID == VLLM["INVALID"]


def _floor_gate(config: Path) -> tuple[Any, AccuracyFloor]:
    cp = build_plan([load_config(config)]).configs[0]
    (g,) = [x for x in cp.gates if isinstance(x, AccuracyFloor) and x.variant == "reference"]
    return cp, g


def _evalrun_floor(config: Path, right: int, wrong: int, failed: int) -> Any:
    """evalrun's verdict on the vLLM-form floor of ``config`` for that many questions
    answered right, wrong and failed (the request got no answer)."""
    cp, g = _floor_gate(config)
    samples = []
    for i in range(right + wrong + failed):
        qid = f"gsm8k/test/{i}"
        req = Request(qid, f"question {i}", "7", "0" * 16)
        c = (Completion(qid, "#### 7", finish_reason="stop") if i < right
             else Completion(qid, "#### 8", finish_reason="stop") if i < right + wrong
             else Completion(qid, None, error=f"request {qid}: no response within 600 s (attempt 1)"))
        samples.append(judge_completion(cp.config.name, "reference", "gsm8k", req, c, vllm_rules=True))
    m = Measurements()
    m.task_record("reference", "gsm8k").score = score_task(samples, VLLM_RULES_PIPELINES)
    (res,) = [r for r in evaluate_gates(cp.gates, m) if r.id == g.id]
    return res


def _vllm_floor(config: Path, right: int, wrong: int, failed: int) -> bool:
    """vLLM's verdict: its scoring of the same completions (a failed request is ``""``, as
    its client returns it) and its assertion."""
    raw = yaml.safe_load(config.read_text())
    states = ["#### 7"] * right + ["#### 8"] * wrong + [""] * failed
    labels = [VLLM["get_answer_value"]("#### 7")] * len(states)
    accuracy = VLLM["_score_gsm8k"](states, [0] * len(states), labels, 5, 256, 1.0)["accuracy"]
    try:
        VLLM["accuracy_floor"](accuracy, raw["accuracy_threshold"], raw.get("tolerance", 0.08))
    except AssertionError:
        return False
    return True


@pytest.mark.parametrize("right, wrong, failed", [
    (114, 86, 0),    # 0.57 >= 0.65 - 0.08 is false in floating point
    (115, 85, 0),    # 0.575: passes
    (114, 76, 10),   # 114/190 = 0.6 of the answered, 0.57 of all: vLLM fails it
    (120, 60, 20),   # 0.6 of all: passes with failed requests
    (0, 0, 200),     # every request failed: accuracy 0, fails
])
def test_the_vllm_form_floor_gives_vllms_verdict(right, wrong, failed):
    vllm = _vllm_floor(FLOOR_CONFIG, right, wrong, failed)
    res = _evalrun_floor(FLOOR_CONFIG, right, wrong, failed)
    assert res.passed is vllm
    assert res.observed == right / (right + wrong + failed)


def test_the_vllm_form_floor_is_not_rounded():
    _, g = _floor_gate(FLOOR_CONFIG)
    assert g.pipeline == VLLM_PIPELINE
    assert g.limit == 0.65 - 0.08 and g.limit != 0.57


def _metrics_text(drafts: float, accepted: float) -> str:
    """vLLM's /metrics for one engine (the counters vLLM's test and evalrun read)."""
    lab = 'engine="0",model_name="m"'
    return "\n".join([
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f"vllm:spec_decode_num_drafts_total{{{lab}}} {drafts}",
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
        f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {drafts * 7}",
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
        f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {accepted}",
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="0"}} {accepted}',
        "",
    ])


@pytest.mark.parametrize("drafts, accepted", [(100, 20), (100, 19), (1000, 200), (3, 1)])
def test_min_acceptance_length_gives_vllms_verdict(drafts, accepted, monkeypatch):
    text = _metrics_text(drafts, accepted)
    monkeypatch.setitem(VLLM, "requests", SimpleNamespace(
        get=lambda url: SimpleNamespace(text=text, raise_for_status=lambda: None)))
    vllm_len = VLLM["get_acceptance_length"]("http://127.0.0.1:8000/v1")
    minimum = yaml.safe_load(SPEC_CONFIG.read_text())["min_acceptance_length"]
    try:
        VLLM["acceptance_floor"](vllm_len, minimum)
        vllm_ok = True
    except AssertionError:
        vllm_ok = False

    # vLLM's exact floor is evalrun's rule with the false-alarm budget off; with it (the default)
    # the floor fails only when a test shows the length below it (docs/gates.md)
    cp = build_plan([load_config(SPEC_CONFIG).model_copy(update={"false_alarm_budget": None})]).configs[0]
    gates = [x for x in cp.gates if isinstance(x, MinAcceptanceLength)]
    assert gates and {g.limit for g in gates} == {minimum}
    m = Measurements()
    for g in gates:  # a fresh server: the task's counter difference is the snapshot
        m.task_record(g.variant, g.task).spec = SpecDecodeRecord.from_counters(parse_spec_decode_counters(text))
    for r in evaluate_gates(gates, m):
        assert r.passed is vllm_ok and r.observed == vllm_len, r.id
