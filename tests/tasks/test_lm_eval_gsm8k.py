"""lm-eval's own GSM8K filters beside evalrun's number-aware pipelines.

Expected values are worked out by hand from lm-eval's gsm8k.yaml (read here with
PyYAML, not through evalrun): strict-match = regex ``#### (\\-?[0-9\\.\\,]+)`` then the
first match; flexible-extract = the last match of ``(-?[$0-9.,]{2,})|(-?[0-9]+)``;
exact_match after removing ``,``, ``$``, everything up to ``#### `` and a final ``.``.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import lm_eval  # noqa: TID253 - a base dependency of evalrun: its absence is a failure, not a skip
import pytest
import yaml

from harness.analysis.gates import evaluate_gates
from harness.analysis.measurements import Measurements
from harness.analysis.scoring import correctness, score_task
from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.records.samples import Sample
from harness.tasks.answers import judge
from harness.tasks.lm_eval_gsm8k import lm_eval_info

SM, FE, SN, FN = "strict-match", "flexible-extract", "strict-numeric", "flexible-numeric"


@pytest.mark.parametrize(
    "completion, gold, lm_answers, lm_correct, evalrun_correct",
    [
        # 18.00 is 18 for evalrun; lm-eval compares strings "18.00" vs "18"
        ("So she pays 18.00 in all.\n#### 18.00", "18", ("18.00", "18.00"), (False, False), (True, True)),
        # "$" is not in strict-match's character class: nothing found; flexible keeps "$1,200"
        ("#### $1,200", "1,200", (None, "$1,200"), (False, True), (True, True)),
        # a trailing period is removed by regexes_to_ignore "\.$"
        ("The answer is 72.", "72", (None, "72."), (False, True), (False, True)),
        # thousands separators are removed on both sides
        ("She earns 5600 dollars.\n#### 5600", "5,600", ("5600", "5600"), (True, True), (True, True)),
        # the last match wins for flexible-extract, the first #### for strict-match
        ("#### 7\nthen 3 more", "7", ("7", "3"), (True, False), (True, False)),
        ("no number here", "4", (None, None), (False, False), (False, False)),
    ],
)
def test_lm_eval_filters_and_evalrun_pipelines_side_by_side(completion, gold, lm_answers, lm_correct, evalrun_correct):
    answers, correct = judge(completion, gold)
    assert (answers[SM], answers[FE]) == lm_answers
    assert (correct[SM], correct[FE]) == lm_correct
    assert (correct[SN], correct[FN]) == evalrun_correct


def test_provenance_names_lm_eval_version_and_task_version():
    info = lm_eval_info()
    yml = Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml"
    want = yaml.safe_load(yml.read_text())["metadata"]["version"]
    assert info["error"] is None
    assert info["version"] == metadata.version("lm-eval")
    assert info["gsm8k_task_version"] == want
    assert Path(info["gsm8k_config"]).resolve() == yml.resolve()
    assert info["pipelines"] == [SM, FE]


def _sample(qid: str, right: bool, with_lm_eval: bool) -> Sample:
    corr = {SN: right, FN: right}
    if with_lm_eval:
        corr.update({SM: right, FE: right})
    return Sample("c", "v", "t", qid, "h", "1", completion="x", token_ids=(1,), finish_reason="stop",
                  answers={k: "1" for k in corr}, correct=corr)


def test_missing_pipeline_is_left_out_and_its_gate_not_run(tmp_path):
    """Samples judged without lm-eval carry no strict-match: the score leaves it out
    (not 0 correct) and a gate reading it is NOT RUN, never passed."""
    xs = [_sample(f"q{i}", i < 3, with_lm_eval=False) for i in range(4)]
    sc = score_task(xs)
    assert set(sc.accuracy) == {SN, FN}
    assert correctness(xs, SM) == {}
    p = tmp_path / "c.yaml"
    # false_alarm_budget: null: 4 questions cannot reach the budget's share (0.58 ** 4 > 0.01),
    # so under the budget the floor is report-only; this test is about the pipeline, not the budget
    p.write_text("model: m\nfalse_alarm_budget: null\nvariants: {reference: {}}\ntasks: {t: {num_questions: 4}}\n"
                 "gates: {accuracy_threshold: 0.5, accuracy_pipeline: strict-match}\n")
    cp = build_plan([load_config(p)]).configs[0]
    m = Measurements()
    m.task_record("reference", "t").score = sc
    res = {g.id.split("/", 1)[1]: g for g in evaluate_gates(cp.gates, m)}
    floor = res["reference/t/accuracy_floor"]
    assert floor.passed is None and "strict-match was not computed" in floor.detail
    # with lm-eval's verdicts present the same gate is judged: 3/4 >= 0.5 - 0.08
    m.task_record("reference", "t").score = score_task([_sample(f"q{i}", i < 3, with_lm_eval=True) for i in range(4)])
    res = {g.id.split("/", 1)[1]: g for g in evaluate_gates(cp.gates, m)}
    assert res["reference/t/accuracy_floor"].passed is True
    assert res["reference/t/accuracy_floor"].observed == pytest.approx(0.75)
