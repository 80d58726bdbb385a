"""The false-alarm budget (docs/gates.md, "The false-alarm budget"): the margin tests, the
request as the unit of acceptance, the family and its report-only gates, and the budget's
place in the plan and the record. Unit tier: no engine, no server; expected values are
worked out here by other means (closed forms, scipy, a jackknife)."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
from scipy import stats  # noqa: TID253 - the test's own reference; a cost of this file's collection only

from harness.analysis import gates as AG
from harness.analysis.budget import margin_p, paired_margin_p, paired_min_p, ratio_estimate, split_family
from harness.analysis.divergence import classify_divergences
from harness.analysis.measurements import Measurements
from harness.analysis.noise import output_noise_stored
from harness.analysis.scoring import output_match, score_task
from harness.config.gates import plan_gates
from harness.config.loader import load_config
from harness.config.model_list import load_model_list
from harness.config.schema import ConfigError
from harness.config.select import load_selected
from harness.records.measures import OutputMatchRecord, SpecDecodeCountersRecord, SpecDecodeRecord
from harness.records.samples import Sample
from harness.report.budget_plan import budget_plan


def test_margin_zero_is_the_exact_one_sided_mcnemar_test():
    for b, c in ((5, 0), (9, 3), (20, 14), (0, 4)):
        want = stats.binomtest(b, b + c, 0.5, alternative="greater").pvalue if b + c else 1.0
        assert paired_margin_p(b, c, 200, 0.0) == pytest.approx(want)


def test_a_margin_shifts_the_null_share_of_discordant_pairs():
    # 10 questions lost, none gained, of 100: drop 0.10; "drop <= 0.05" is q <= (1 + 0.05 * 100 / 10) / 2
    # = 0.75, and P(Binomial(10, 0.75) >= 10) = 0.75 ** 10
    assert paired_margin_p(10, 0, 100, 0.05) == pytest.approx(0.75 ** 10)
    # a drop that cannot exceed the margin (D / n <= margin) is never shown: p = 1
    assert paired_margin_p(5, 0, 100, 0.05) == 1.0
    assert paired_min_p(9, 0.05) == pytest.approx(0.525 ** 9)


def test_ratio_variance_is_the_jackknifes_for_clustered_requests():
    rng = random.Random(1)
    den = [float(rng.randint(2, 9)) for _ in range(300)]
    rate = [min(max(rng.gauss(0.6, 0.25), 0.0), 1.0) for _ in den]  # acceptance clusters by request
    num = [round(d * 2 * r) for d, r in zip(den, rate)]
    est = ratio_estimate(num, den, total_num=sum(num), total_den=sum(den), requests=300, hi=2.0)
    assert est is not None and est.per_request
    n, sn, sd = len(num), sum(num), sum(den)
    loo = [(sn - a) / (sd - d) for a, d in zip(num, den)]
    mean = sum(loo) / n
    jack = math.sqrt((n - 1) / n * sum((x - mean) ** 2 for x in loo))  # Efron & Tibshirani ch. 11
    assert est.se == pytest.approx(jack, rel=0.05)


def test_without_per_request_counts_the_fallback_is_the_bhatia_davis_bound():
    est = ratio_estimate(None, None, total_num=120.0, total_den=100.0, requests=30, hi=2.0)
    assert est is not None and not est.per_request
    assert est.se == pytest.approx(math.sqrt(1.2 * 0.8 / 30))


def test_margin_p_is_students_t():
    assert margin_p(0.2, 0.01, 12) == pytest.approx(stats.t.sf(2.0, 12))
    assert margin_p(0.1, 0.0, 5) == 0.0 and margin_p(-0.1, 0.0, 5) == 1.0


def test_the_family_is_the_largest_set_that_can_reach_its_share():
    # budget 0.01: four gates; 0.02 cannot reach 0.01 / k for any k; the other three can at k = 3
    assert split_family([0.0, 0.02, 0.003, 1e-6], 0.01) == [True, False, True, True]
    assert split_family([0.004, 0.004, 0.004], 0.01) == [True, True, False] or \
        split_family([0.004, 0.004, 0.004], 0.01).count(True) == 2


CFG = """\
model: m
variants:
  reference: {}
  spec_sync: {speculative_config: {method: mtp, num_speculative_tokens: 2}, async_scheduling: false}
  spec_async: {speculative_config: {method: mtp, num_speculative_tokens: 2}, async_scheduling: true}
tasks:
  big: {kind: synthetic, num_questions: 200}
  small: {kind: synthetic, num_questions: 9}
comparisons:
  - {baseline: reference, candidate: spec_sync, max_accuracy_drop: 0.05, min_output_match: null}
  - baseline: spec_sync
    candidate: spec_async
    max_accuracy_drop: null
    min_output_match: null
    max_acceptance_length_drop: 0.1
"""


def _cfg(tmp_path, text=CFG):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return load_config(p)


def test_the_plan_states_the_budget_and_the_gates_that_cannot_reach_their_share(tmp_path):
    c = _cfg(tmp_path)
    assert c.false_alarm_budget == 0.01
    b = budget_plan(c)
    assert b is not None and b["false_fail_bound"] == pytest.approx(0.01)
    # on 9 questions the exact paired test reaches at best 0.525 ** 9 = 0.0030 > 0.01 / family size
    assert [r["id"] for r in b["report_only"]] == ["c/reference->spec_sync/small/max_accuracy_drop"]
    ids = {g["id"] for g in b["family"]}
    assert "c/reference->spec_sync/big/max_accuracy_drop" in ids
    assert "c/spec_sync->spec_async/big/max_acceptance_length_drop" in ids
    off = c.model_copy(update={"false_alarm_budget": None})
    assert budget_plan(off) is None


def _samples(variant, task, n, right, drafts=None, accepted=None):
    out = []
    for i in range(n):
        s = Sample("c", variant, task, f"q{i}", "h", "5", completion="x", token_ids=(1, 2, 3), finish_reason="stop",
                   answers={"flexible-numeric": "5"}, correct={"flexible-numeric": i < right})
        if drafts is not None:
            s = dataclasses.replace(s, spec_drafts=drafts[i], spec_accepted_tokens=float(accepted[i]),
                                    spec_draft_tokens=2 * drafts[i])
        out.append(s)
    return out


def _spec(drafts, accepted):
    return SpecDecodeRecord.from_counters(SpecDecodeCountersRecord(
        drafts=sum(drafts), draft_tokens=2 * sum(drafts), accepted_tokens=sum(accepted),
        accepted_per_pos=(sum(accepted) * 0.6, sum(accepted) * 0.4)))


def test_one_flipped_question_on_a_small_task_is_report_only_and_a_large_loss_fails(tmp_path):
    c = _cfg(tmp_path)
    gates = plan_gates(c)  # the whole plan: the family is decided as the dry run states it
    m = Measurements()
    for v, right_big, right_small in (("reference", 180, 9), ("spec_sync", 150, 8)):
        for t, n, r in (("big", 200, right_big), ("small", 9, right_small)):
            xs = _samples(v, t, n, r)
            m.task_record(v, t).samples, m.task_record(v, t).score = xs, score_task(xs)
    res = {r.id.split("/")[2]: r for r in AG.evaluate_gates(gates, m) if r.kind == "max_accuracy_drop"}
    assert res["small"].passed is None and res["small"].verdict == "NOT RUN"
    assert "report-only" in res["small"].detail
    # big: 30 lost, 0 gained of 200; q0 = (1 + 0.05 * 200 / 30) / 2 = 2/3, p = (2/3) ** 30
    assert res["big"].passed is False
    assert f"p={(2 / 3) ** 30:.4g}" in res["big"].detail


def test_acceptance_length_with_the_request_as_the_unit_two_sided(tmp_path):
    c = _cfg(tmp_path)
    [g] = [g for g in plan_gates(c) if g.kind == "max_acceptance_length_drop" and g.task == "big"]
    assert g.two_sided and g.budget == 0.01
    rng = random.Random(3)
    base_d = [float(rng.randint(3, 6)) for _ in range(200)]
    base_a = [round(d * 2 * min(max(rng.gauss(0.7, 0.2), 0), 1)) for d in base_d]

    def judged(cand_a):
        m = Measurements()
        for v, acc in (("spec_sync", base_a), ("spec_async", cand_a)):
            xs = _samples(v, "big", 200, 180, base_d, acc)
            tm = m.task_record(v, "big")
            tm.samples, tm.score, tm.spec = xs, score_task(xs), _spec(base_d, acc)
        return AG.evaluate_gate(g, m)

    assert judged(base_a).passed is True                       # the same counts: no change
    assert judged([a * 0.5 for a in base_a]).passed is False   # halved: a drop of ~0.7 tokens
    rise = judged([min(2 * d, a * 1.4) for a, d in zip(base_a, base_d)])
    assert rise.passed is False and "ROSE" in rise.detail      # spec_sync -> spec_async: a rise fails too


def _power(n, psi, delta, share, margin):
    """Exact power of the margin test (docs/gates.md "Power given up"): D ~ Binomial(n, psi +
    delta) discordant questions, b | D ~ Binomial(D, (psi/2 + delta) / (psi + delta)); rejects
    when P(Binomial(D, q0) >= b) < share, q0 = (1 + margin n / D) / 2 (scipy directly)."""
    tot = 0.0
    q = (psi / 2 + delta) / (psi + delta)
    for d in range(1, n + 1):
        w = stats.binom.pmf(d, n, psi + delta)
        if w < 1e-12:
            continue
        q0 = (1 + margin * n / d) / 2
        if q0 >= 1:
            continue
        ps = stats.binom.sf(list(range(-1, d)), d, q0)  # P(X >= b) for b = 0..d
        first = next((b for b in range(d + 1) if ps[b] < share), None)
        if first is not None:
            tot += w * stats.binom.sf(first - 1, d, q)
            assert paired_margin_p(first, d - first, n, margin) < share
            assert first == 0 or paired_margin_p(first - 1, d - first + 1, n, margin) >= share
    return tot


def test_power_of_the_margin_test_at_gsm8k_size():
    share = 0.01 / 20  # Holm's first step in a list config of 20 tested gates
    assert _power(1319, 0.05, 0.10, share, 0.05) == pytest.approx(0.966, abs=0.005)
    assert _power(1319, 0.05, 0.05, share, 0.0) == pytest.approx(0.995, abs=0.005)
    assert _power(1319, 0.05, 0.0, share, 0.05) < share


def _ids_sample(variant, ids, top=None):
    return Sample("c", variant, "t", "q0", "h", "5", completion="x", token_ids=tuple(ids), finish_reason="stop",
                  top_logprobs=top)


def test_a_divergence_past_the_references_prefix_is_judged_by_the_references_paths():
    # the reference 1 2 3 4; position 1 is a near-tie of its own (2 at -0.50, 7 at -0.51)
    top = (((1, -0.1), (5, -4.0)), ((2, -0.50), (7, -0.51)), ((3, -0.1), (8, -6.0)), ((4, -0.1), (9, -6.0)))
    ref = _ids_sample("reference", (1, 2, 3, 4), top)
    sync = _ids_sample("spec_sync", (1, 7, 5, 6))    # left the reference at 1, at the near-tie
    async_ = _ids_sample("spec_async", (1, 7, 8, 6))  # follows spec_sync's path, differs at 2
    r = classify_divergences([sync], [async_], [ref], "reference", 0.1, baseline_is_reference=False)
    [d] = r.divergences
    assert d.position == 2 and d.verdict == "explained" and d.source == "reference_paths"
    # the same, but spec_sync left the reference where it was confident (2 at -0.1, 9 at -6): not explained
    top2 = (top[0], ((2, -0.1), (7, -6.0)), top[2], top[3])
    r2 = classify_divergences([sync], [async_], [_ids_sample("reference", (1, 2, 3, 4), top2)], "reference", 0.1,
                              baseline_is_reference=False)
    assert r2.divergences[0].verdict == "unexplained"


def test_a_stored_noise_rate_carries_its_uncertainty():
    base = [_ids_sample("reference", (1, 2, 3)) for _ in range(100)]
    base = [dataclasses.replace(x, question_id=f"q{i}") for i, x in enumerate(base)]
    cand = [dataclasses.replace(x, token_ids=(1, 9, 3) if i < 12 else (1, 2, 3)) for i, x in enumerate(base)]
    om = output_match(base, cand)
    assert isinstance(om, OutputMatchRecord) and om.compared == 100 and len(om.mismatches) == 12
    known = output_noise_stored(om, 0.06)
    two = output_noise_stored(om, 0.06, measured_on=100)
    # Fisher's one-sided p by the hypergeometric tail: 12 of 100 vs 6 of 100, 18 mismatches in all
    want = sum(stats.hypergeom.pmf(x, 200, 18, 100) for x in range(12, 19))
    assert two.p_value == pytest.approx(want) and two.test == "fisher_one_sided_two_sample"
    assert known.p_value < two.p_value  # treating the rate as known claims more than the data show


def test_a_model_list_sets_the_budget_of_configs_that_do_not(tmp_path):
    (tmp_path / "a.yaml").write_text(CFG)
    (tmp_path / "b.yaml").write_text("false_alarm_budget: 0.05\n" + CFG)
    (tmp_path / "l.txt").write_text("# evalrun: false_alarm_budget 0.02\na.yaml\nb.yaml\n")
    assert [c.false_alarm_budget for c in load_model_list(tmp_path / "l.txt")] == [0.02, 0.05]
    (tmp_path / "bad.txt").write_text("# evalrun: false_alarm_budget 2\na.yaml\n")
    with pytest.raises(Exception, match="false_alarm_budget must be a number in"):
        load_model_list(tmp_path / "bad.txt")


@pytest.mark.parametrize("line, why", [
    ("#evalrun: false_alarm_budget 2", "must be a number in"),          # spacing does not hide it
    ("# EVALRUN: false_alarm_budget 7", "must be a number in"),         # nor case
    ("# evalrun: false_alarm_budgett 0.02", "only evalrun directive"),  # a misspelt key is named
    ("# evalrun: max_concurrency 4", "only evalrun directive"),
])
def test_a_list_directive_has_one_form_and_a_misspelling_is_refused(tmp_path, line, why):
    (tmp_path / "a.yaml").write_text(CFG)
    (tmp_path / "l.txt").write_text(f"{line}\na.yaml\n")
    with pytest.raises(ConfigError, match=why):
        load_model_list(tmp_path / "l.txt")


def test_a_second_budget_directive_is_refused_and_a_selection_keeps_the_lists_budget(tmp_path):
    (tmp_path / "a.yaml").write_text(CFG)
    (tmp_path / "b.yaml").write_text(CFG)
    (tmp_path / "two.txt").write_text("# evalrun: false_alarm_budget 0.02\n"
                                      "# evalrun: false_alarm_budget 0.03\na.yaml\n")
    with pytest.raises(ConfigError, match="second false_alarm_budget"):
        load_model_list(tmp_path / "two.txt")
    (tmp_path / "l.txt").write_text("# evalrun: false_alarm_budget 0.02\na.yaml\nb.yaml\n")
    assert [c.false_alarm_budget for c in load_selected(tmp_path / "l.txt", keyword="b")] == [0.02]
    assert [c.false_alarm_budget for c in load_selected(tmp_path / "l.txt", names=["a"])] == [0.02]
