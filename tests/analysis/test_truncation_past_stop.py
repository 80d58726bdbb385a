"""Token ids past a stop string, truncation by max_tokens.

Expected counts and shares are counted by hand from the constructed samples.
"""

from __future__ import annotations

import textwrap

import pytest

from harness.analysis.gates import evaluate_gates
from harness.analysis.measurements import Measurements
from harness.analysis.noise import output_noise_rerun
from harness.analysis.scoring import output_match, score_task
from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.records.samples import Sample, read_jsonl, write_jsonl
from harness.report.summary import comparison_rows, render_markdown, score_rows
from tests.record_factory import typed

TEXT = " The total is 18.\n#### 18\n\n"
IDS = tuple(range(100, 120))  # 20 committed ids


def smp(qid, text=TEXT, ids=IDS, finish="stop", stop_reason="\n\nQuestion:", right=True, variant="v"):
    return Sample("c", variant, "t", qid, "h", "18", completion=text, token_ids=tuple(ids),
                  finish_reason=finish, stop_reason=stop_reason,
                  answers={"strict-numeric": "18", "flexible-numeric": "18"},
                  correct={"strict-numeric": right, "flexible-numeric": right})


def test_ids_past_the_stop_are_a_match_with_a_note():
    # the example: same text, the spec side carries 11 extra ids after the stop
    ref = [smp("q0")]
    spec = [smp("q0", ids=IDS + tuple(range(500, 511)))]
    om = output_match(ref, spec)
    assert (om.compared, om.matched, om.output_match_rate) == (1, 1, 1.0)
    assert om.mismatches == ()
    assert len(om.past_stop) == 1
    ps = om.past_stop[0]
    assert (ps.question_id, ps.side, ps.extra_ids, ps.common_ids) == ("q0", "candidate", 11, 20)
    # the reverse direction names the baseline side
    assert output_match(spec, ref).past_stop[0].side == "baseline"


def test_real_divergences_stay_divergences():
    base = [smp("a"), smp("b"), smp("c"), smp("d")]
    cand = [
        smp("a"),                                                      # identical
        smp("b", text=TEXT + "Extra", ids=IDS + (7, 8)),               # longer text: the model went on
        smp("c", ids=IDS[:5] + (999,) + IDS[6:]),                      # same text, ids differ at 5
        smp("d", ids=IDS + (1, 2, 3)),                                 # same text, ids past the stop
    ]
    om = output_match(base, cand)
    assert (om.compared, om.matched) == (4, 2)
    assert [(x.question_id, x.first_divergence) for x in om.mismatches] == [("b", 20), ("c", 5)]
    assert [x.question_id for x in om.past_stop] == ["d"]


def test_noise_rerun_uses_the_same_rule():
    base = [smp("a"), smp("b")]
    rerun = [smp("a", ids=IDS + (1,)), smp("b")]          # a: only ids past the stop differ
    cand = [smp("a"), smp("b", ids=(1,) + IDS[1:])]       # b: a real divergence at 0
    nz = output_noise_rerun(base, rerun, cand)
    assert nz.noise_mismatched == 0 and nz.candidate_mismatched == 1 and nz.candidate_only == ("b",)


def test_truncated_share_and_stop_reasons():
    xs = [
        smp("q0"), smp("q1"),
        smp("q2", finish="length", stop_reason=None, right=False),
        smp("q3", stop_reason=None),                     # end-of-sequence token
        smp("q4", stop_reason=151645),                   # a stop token id
        Sample("c", "v", "t", "q5", "h", "18", error="request q5: HTTP 500"),
    ]
    sc = score_task(xs)
    assert sc.truncated == 1 and sc.truncated_ids == ("q2",)
    assert sc.truncated_rate == pytest.approx(1 / 5)     # over the 5 successful requests
    assert sc.stop_reasons == {"\n\nQuestion:": 2, "eos": 1, "token 151645": 1}


def test_stop_reason_survives_jsonl_and_old_lines_read_back(tmp_path):
    p = tmp_path / "s.jsonl"
    write_jsonl(p, [smp("q0"), smp("q1", stop_reason=None)])
    back = read_jsonl(p)
    assert back[0].stop_reason == "\n\nQuestion:" and back[1].stop_reason is None
    assert "stop_reason" not in p.read_text().splitlines()[1]   # left out when None (old format)


CFG = """\
model: x
false_alarm_budget: null
variants:
  reference: {}
  spec:
    speculative_config: {method: mtp, num_speculative_tokens: 2}
tasks:
  t: {kind: synthetic, num_questions: 10}
gates:
  accuracy_threshold: 0.9
  tolerance: 0.05
  max_truncation_rate: 0.1
comparisons:
  - {baseline: reference, candidate: spec, max_accuracy_drop: 0.05, min_output_match: null}
"""


def test_max_truncation_rate_gate_and_truncation_named_in_accuracy_gates(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(textwrap.dedent(CFG))
    cp = build_plan([load_config(p)]).configs[0]
    ref = [smp(f"q{i}", variant="reference") for i in range(10)]                      # 10/10 right
    # spec: q0..q2 cut by max_tokens and wrong; q3 wrong but finished
    spec = [smp(f"q{i}", variant="spec", finish="length" if i < 3 else "stop", right=i > 3) for i in range(10)]
    m = Measurements()
    m.task_record("reference", "t").score = score_task(ref)
    m.task_record("spec", "t").score = score_task(spec)
    m.task_record("reference", "t").samples = ref
    m.task_record("spec", "t").samples = spec
    res = {g.id.split("/", 1)[1]: g for g in evaluate_gates(cp.gates, m)}
    tr = res["spec/t/max_truncation_rate"]
    assert tr.observed == pytest.approx(0.3) and tr.limit == 0.1 and tr.passed is False
    assert tr.questions == ("q0", "q1", "q2")
    assert res["reference/t/max_truncation_rate"].passed is True
    floor = res["spec/t/accuracy_floor"]                     # 6/10 < 0.85
    assert floor.passed is False and "3 of 10 spec completions (30.0%) were cut by max_tokens" in floor.detail
    drop = res["reference->spec/t/max_accuracy_drop"]        # 1.0 -> 0.6
    assert drop.passed is False and "cut by max_tokens" in drop.detail
    assert "cut by max_tokens" not in res["reference/t/accuracy_floor"].detail


def test_reports_show_truncated_share_and_mark_truncated_flips():
    rec = typed({
        "run_id": "r", "passed": False, "exit_code": 1, "status": "completed",
        "configs": [{
            "name": "c", "gates": [],
            "variants": {"spec": {"engine": {}, "tasks": {"t": {
                "status": "ran", "accuracy": {"strict-numeric": 0.6, "flexible-numeric": 0.6},
                "num_requests": 10, "error_count": 0, "truncated": 3, "truncated_rate": 0.3}}}},
            "comparisons": [{
                "baseline": "reference", "candidate": "spec", "task": "t", "output_match_rate": 1.0,
                "matched": 10, "compared": 10,
                "past_stop": [{"question_id": "q9", "side": "candidate", "extra_ids": 3, "common_ids": 20}],
                "truncated": {"baseline": [], "candidate": ["q0", "q1", "q2"]},
                "paired": {"n": 10, "accuracy_a": 0.8, "accuracy_b": 0.6, "a_only": ["q0", "q3"], "b_only": [],
                           "p_value": 0.5}}],
        }],
    })
    assert score_rows(rec)[0]["truncated"] == "0.300 (3)"
    row = comparison_rows(rec)[0]
    assert row["lost_ids"] == ["q0 (truncated)", "q3"]
    assert "1 only up to the stop" in row["output_match"]
    md = render_markdown(rec)
    assert "truncated (max_tokens)" in md and "0.300 (3)" in md and "q0 (truncated)" in md
