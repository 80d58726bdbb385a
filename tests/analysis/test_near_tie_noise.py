"""The near-tie threshold under the engine's numerics noise (docs/gates.md, "Near ties";
docs/numerics.md, "What it means for the gates"): ``near_tie_nats + 8 x level`` when
``EVALRUN_NUMERICS_NOISE`` is set, the configured value otherwise; one function
(:func:`harness.analysis.divergence.near_tie_bound`) used by the analysis, the gate's plan
and its detail. Unit tier."""

from __future__ import annotations

import pytest
from scipy.stats import norm  # noqa: TID253 - the test's own reference; a cost of this file's collection only

from harness.analysis.divergence import (
    NOISE_TIE_SDS,
    NearTieBound,
    classify_divergences,
    near_tie_bound,
    noise_bound_of,
)
from harness.analysis.gatekinds.min_output_match import _output_match_classified
from harness.analysis.night_model import AcceptanceModel, NightModel, QuestionBehaviour
from harness.analysis.night_simulation import simulate_nights
from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.records.measures import DivergenceReportRecord, OutputMatchRecord
from harness.records.samples import Sample

NOISE = "EVALRUN_NUMERICS_NOISE"


@pytest.mark.parametrize(("spec", "want", "widening"), [
    (None, 0.5, 0.0), ("", 0.5, 0.0), ("0", 0.5, 0.0),
    ("gpu", 0.5 + 12.0, 12.0),  # 8 x 1.5
    ("0.25", 0.5 + 2.0, 2.0),  # 8 x 0.25
])
def test_the_threshold_is_the_configured_one_plus_eight_times_the_level(spec, want, widening):
    env = {} if spec is None else {NOISE: spec}
    b = near_tie_bound(0.5, env)
    assert b.nats == pytest.approx(want) and b.widening_nats == pytest.approx(widening)
    assert b.configured_nats == 0.5
    assert ("widened by" in b.describe()) == (widening > 0)


def test_the_factor_keeps_a_nights_noise_flips_inside_a_001_budget():
    # the gap at a flip is at most the difference of two independent noise differences (sd 2 x level):
    # P(gap > K x level) <= P(Z > K / 2); about 66 divergences on a night of the CPU list's main config
    per_divergence = norm.sf(NOISE_TIE_SDS / 2)
    assert per_divergence == pytest.approx(3.167e-5, rel=1e-3)
    assert 66 * per_divergence <= 0.01 < 66 * norm.sf((NOISE_TIE_SDS - 1) / 2)


def S(qid, ids, top=None):
    return Sample(config="c", variant="x", task="t", question_id=qid, prompt_hash="h", gold="1",
                  completion=" ".join(map(str, ids)), token_ids=tuple(ids), finish_reason="stop", top_logprobs=top)


def test_a_six_nat_gap_is_explained_at_level_15_and_unexplained_without_noise():
    conf = ((1, -0.01), (2, -9.0))
    six = ((5, -0.10), (6, -6.10), (7, -9.0))  # the candidate's token 6 is 6 nats below the reference's 5
    ref = [S("q", [1, 5, 3], (conf, six, conf))]
    cand = [S("q", [1, 6, 3])]
    for env, verdict in (({}, "unexplained"), ({NOISE: "gpu"}, "explained"), ({NOISE: "1.5"}, "explained")):
        b = near_tie_bound(0.5, env)
        r = classify_divergences(ref, cand, ref, "reference", b.nats, True, widening_nats=b.widening_nats or None)
        (d,) = r.divergences
        assert d.gap_nats == pytest.approx(6.0) and d.verdict == verdict, env
        assert r.near_tie_widening_nats == (12.0 if env else None)
    # without noise the record is the one written before (no new key)
    r0 = classify_divergences(ref, cand, ref, "reference", 0.5, True)
    assert "near_tie_widening_nats" not in r0.model_dump(mode="json")


def _config(tmp_path):
    p = tmp_path / "sim.yaml"
    p.write_text("""\
model: fake-model
variants:
  reference: {}
  spec_sync: {speculative_config: {method: mtp, num_speculative_tokens: 2}, async_scheduling: false}
tasks:
  arith: {kind: synthetic, num_questions: 60, num_fewshot: 1, max_tokens: 16}
gates:
  accuracy_threshold: 0.5
comparisons:
  - {baseline: reference, candidate: spec_sync, min_output_match: 0.95, near_tie_nats: 0.5}
""")
    return load_config(p)


def test_the_output_match_gate_judges_by_the_widened_threshold_and_says_so(tmp_path, monkeypatch):
    monkeypatch.delenv(NOISE, raising=False)
    cfg = _config(tmp_path)
    model = NightModel(tuple(QuestionBehaviour(0.3, True, 6) for _ in range(20)), 0.0, (6.0,),
                       AcceptanceModel(2.0, 0.0, 0.0, 0.0, 4.0, "test"), 3)
    # 30% of the questions diverge at a 6-nat gap: unexplained at 0.5 nats, every night fails
    assert simulate_nights([cfg], model, nights=4, seed=1).kinds["min_output_match"].failed == 4
    (g,) = [g for g in build_plan([cfg]).configs[0].gates if g.kind == "min_output_match"]
    assert "gap <= 0.5 nats, are explained" in g.description and "widened" not in g.description
    monkeypatch.setenv(NOISE, "gpu")
    assert simulate_nights([cfg], model, nights=4, seed=1).kinds["min_output_match"].failed == 0
    (g,) = [g for g in build_plan([cfg]).configs[0].gates if g.kind == "min_output_match"]
    assert g.near_tie_nats == 0.5  # the configured value; the widening is the run's
    assert ("gap <= 12.5 nats (0.5 configured, widened by 12 = 8 x the numerics noise's 1.5 nats, "
            "EVALRUN_NUMERICS_NOISE), are explained") in g.description


def test_the_bound_a_report_used_is_read_back_from_it():
    assert noise_bound_of(DivergenceReportRecord(near_tie_nats=0.5, compared=1)) == NearTieBound(0.5)
    b = noise_bound_of(DivergenceReportRecord(near_tie_nats=12.5, compared=1, near_tie_widening_nats=12.0))
    assert b.configured_nats == pytest.approx(0.5) and b.noise_level_nats == pytest.approx(1.5)


def test_the_gates_detail_says_the_threshold_was_widened_and_by_how_much(tmp_path, monkeypatch):
    monkeypatch.setenv(NOISE, "gpu")
    (g,) = [g for g in build_plan([_config(tmp_path)]).configs[0].gates if g.kind == "min_output_match"]
    conf = ((1, -0.01), (2, -9.0))
    six = ((5, -0.10), (6, -6.10), (7, -9.0))
    ref = [S("q", [1, 5, 3], (conf, six, conf)), S("r", [1, 5, 3], (conf, six, conf))]
    cand = [S("q", [1, 6, 3]), S("r", [1, 5, 3])]
    b = near_tie_bound(0.5)
    dv = classify_divergences(ref, cand, ref, "reference", b.nats, True, widening_nats=b.widening_nats)
    r = _output_match_classified(g, OutputMatchRecord(compared=2, matched=1, output_match_rate=0.5), dv, None)
    assert r.passed is True
    assert ("near-tie <= 12.5 nats (0.5 configured, widened by 12 = 8 x the numerics noise's 1.5 nats, "
            "EVALRUN_NUMERICS_NOISE): 0 unexplained, 1 explained") in r.detail
