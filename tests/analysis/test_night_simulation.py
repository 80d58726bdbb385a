"""harness.analysis.night_simulation and night_model: simulated nights judged by evalrun's own
gates on hand-made behaviour whose verdicts are known without the simulation (no noise: no
gate fails; divergences at near ties: output match holds; the same divergences with a
confident reference: output match fails), and the variance components of the acceptance
model recovered from data drawn with known components."""

from __future__ import annotations

import math
import random

import pytest

from harness.analysis.night_model import AcceptanceModel, NightModel, QuestionBehaviour, _variance_components
from harness.analysis.night_simulation import NOT_SIMULATED, simulate_nights
from harness.config.loader import load_config


def _config(tmp_path, extra="", budget="0.01"):
    p = tmp_path / "sim.yaml"
    p.write_text(f"""\
model: fake-model
false_alarm_budget: {budget}
variants:
  reference: {{}}
  spec_sync: {{speculative_config: {{method: mtp, num_speculative_tokens: 2}}, async_scheduling: false}}
tasks:
  arith: {{kind: synthetic, num_questions: 60, num_fewshot: 1, max_tokens: 16}}
gates:
  accuracy_threshold: 0.8
  tolerance: 0.2
  min_acceptance_length: 1.5
comparisons:
  - {{baseline: reference, candidate: spec_sync, max_accuracy_drop: 0.05, min_output_match: 0.95{extra}}}
""")
    return load_config(p)


def _model(divergence: float, gap: float, answer_change: float = 0.0, sd_run: float = 0.0) -> NightModel:
    qs = tuple(QuestionBehaviour(divergence, True, 6) for _ in range(20))
    return NightModel(qs, answer_change, (gap,), AcceptanceModel(2.0, 0.0, sd_run, 0.0, 4.0, "test"), 3)


def test_no_noise_no_gate_fails(tmp_path):
    r = simulate_nights([_config(tmp_path)], _model(0.0, 0.05), nights=5)
    assert r.whole_list.failed == 0 and r.nights == 5
    assert not set(r.kinds) & NOT_SIMULATED
    assert {"accuracy_floor", "max_accuracy_drop", "min_output_match", "min_acceptance_length"} <= set(r.kinds)


def test_divergences_at_near_ties_are_explained_and_confident_ones_fail_output_match(tmp_path):
    cfg = _config(tmp_path, ", near_tie_nats: 0.5")
    near = simulate_nights([cfg], _model(0.3, 0.05), nights=5, seed=1)
    assert near.kinds["min_output_match"].failed == 0
    # the same divergences, but the reference ranks the other token 2 nats below: unexplained
    far = simulate_nights([cfg], _model(0.3, 2.0), nights=5, seed=1)
    assert far.kinds["min_output_match"].failed == 5


def test_answer_changes_flip_accuracy_both_ways_and_fail_the_paired_drop_sometimes(tmp_path):
    off = _config(tmp_path, budget="null")  # the rule before the false-alarm budget
    r = simulate_nights([off], _model(0.5, 0.05, answer_change=1.0), nights=40, seed=2)
    # half the completions take a path whose answer is wrong: discordance about 0.5 on 60
    # questions, so the paired drop exceeds 0.05 in some nights and not in others
    assert 0 < r.kinds["max_accuracy_drop"].failed < 40
    again = simulate_nights([off], _model(0.5, 0.05, answer_change=1.0), nights=40, seed=2)
    assert again.as_dict() == r.as_dict()  # the same seed reproduces


def test_with_the_false_alarm_budget_the_same_flips_stay_quiet(tmp_path):
    # the same clean nights under the default budget 0.01: the config's tested gates fail
    # with probability at most 0.01 a night, so 4 or more red nights of 40 has probability
    # P(Binomial(40, 0.01) >= 4) < 0.001 (the accuracy floor, a fixed rule, does fail here:
    # these flips halve the accuracy below the config's floor)
    r = simulate_nights([_config(tmp_path)], _model(0.5, 0.05, answer_change=1.0), nights=40, seed=2)
    assert r.kinds["max_accuracy_drop"].failed <= 3 and r.kinds["min_output_match"].failed <= 3


def test_accuracy_from_config_draws_the_modal_accuracy_from_the_threshold(tmp_path):
    qs = tuple(QuestionBehaviour(0.0, False, 6) for _ in range(5))  # the measured questions are all wrong
    model = NightModel(qs, 0.0, (), AcceptanceModel(2.0, 0.0, 0.0, 0.0, 4.0, "test"), 2)
    cfg = _config(tmp_path)
    assert simulate_nights([cfg], model, nights=2).kinds["accuracy_floor"].failed == 2
    assert simulate_nights([cfg], model, nights=2, accuracy_from_config=True).kinds["accuracy_floor"].failed == 0


def test_variance_components_recover_known_spreads():
    rng = random.Random(7)
    mu, sd_q, sd_run, sd_e = 1.0, 0.8, 0.3, 0.4
    u = {q: rng.gauss(0, sd_q) for q in range(400)}
    rows = []
    for run in range(12):
        v = rng.gauss(0, sd_run)
        for q in range(400):
            rows.append((run, ("c", "t", str(q)), mu + u[q] + v + rng.gauss(0, sd_e), 0.0, 4.0))
    m = _variance_components(rows)
    assert m.mu == pytest.approx(mu, abs=0.25)
    assert m.sd_question == pytest.approx(sd_q, rel=0.1)
    assert m.sd_request == pytest.approx(sd_e, rel=0.05)
    # 12 runs: the run spread's own sampling error is about sd / sqrt(2 * 11)
    assert m.sd_run == pytest.approx(sd_run, abs=3 * sd_run / math.sqrt(22))
    assert m.drafts_per_request == 4.0
