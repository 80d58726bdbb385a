"""harness.analysis.false_alarms: the exact interval against values computed independently
(closed forms, statsmodels, a published table), and the counting per gate, kind, config and
list on hand-built verdicts."""

from __future__ import annotations

import pytest
from statsmodels.stats.proportion import proportion_confint

from harness.analysis.false_alarms import clopper_pearson, false_alarm_rates, rate
from harness.records.expected import ExpectedFailureRecord
from harness.records.run_record import GateResult


@pytest.mark.parametrize("k,n", [(0, 1), (0, 4), (4, 4), (1, 10), (3, 10), (7, 200), (0, 200), (150, 200)])
def test_clopper_pearson_matches_statsmodels_beta_interval(k, n):
    lo, hi = clopper_pearson(k, n)
    slo, shi = proportion_confint(k, n, alpha=0.05, method="beta")
    assert (lo, hi) == pytest.approx((slo, shi), abs=1e-9)


@pytest.mark.parametrize("n", [1, 3, 4, 10, 30, 200])
def test_clopper_pearson_closed_forms_at_the_ends(n):
    # k = 0: upper = 1 - (alpha/2)^(1/n); k = n: lower = (alpha/2)^(1/n) (Clopper and Pearson 1934)
    assert clopper_pearson(0, n) == pytest.approx((0.0, 1 - 0.025 ** (1 / n)))
    assert clopper_pearson(n, n) == pytest.approx((0.025 ** (1 / n), 1.0))


def test_clopper_pearson_against_a_published_value():
    # 1 of 10: 95% exact interval 0.0025 to 0.4450 (e.g. Newcombe, Stat Med 17 (1998) 857, Table II, method 5)
    lo, hi = clopper_pearson(1, 10)
    assert round(lo, 4) == 0.0025 and round(hi, 4) == 0.4450


def test_clopper_pearson_refuses_impossible_counts():
    for k, n in ((1, 0), (-1, 3), (4, 3)):
        with pytest.raises(ValueError, match="k="):
            clopper_pearson(k, n)


def _g(config: str, kind: str, name: str, passed: bool | None, strict_xpass: bool = False) -> GateResult:
    ef = ExpectedFailureRecord(gates=("*",), builds=("vllm",), reason="known bug", evidence="x", applies=True,
                               strict=True) if strict_xpass else None
    return GateResult(id=f"{config}/{name}/{kind}", kind=kind, config=config, variant=name, op=">=",
                      passed=passed, detail="x", expected_failure=ef)


def test_rates_per_gate_kind_config_and_list_on_hand_built_nights():
    nights = [
        # night 1: clean
        {"a": [_g("a", "max_accuracy_drop", "v1", True), _g("a", "min_output_match", "v1", True)],
         "b": [_g("b", "max_accuracy_drop", "v1", True)]},
        # night 2: a fails its accuracy-drop gate; b's gate NOT RUN (not a failure)
        {"a": [_g("a", "max_accuracy_drop", "v1", False), _g("a", "min_output_match", "v1", True)],
         "b": [_g("b", "max_accuracy_drop", "v1", None)]},
        # night 3: both fail: a on output match, b on accuracy drop
        {"a": [_g("a", "max_accuracy_drop", "v1", True), _g("a", "min_output_match", "v1", False)],
         "b": [_g("b", "max_accuracy_drop", "v1", False)]},
        # night 4: b's strict expected failure passed (XPASS strict: fails the run)
        {"a": [_g("a", "max_accuracy_drop", "v1", True), _g("a", "min_output_match", "v1", True)],
         "b": [_g("b", "max_accuracy_drop", "v1", True, strict_xpass=True)]},
    ]
    r = false_alarm_rates(nights)
    assert r.nights == 4
    assert (r.whole_list.failed, r.whole_list.nights) == (3, 4)
    assert {c: (x.failed, x.nights, x.not_judged) for c, x in r.configs.items()} == {"a": (2, 4, 0), "b": (2, 4, 1)}
    assert {k: x.failed for k, x in r.kinds.items()} == {"max_accuracy_drop": 3, "min_output_match": 1}
    assert {ck: x.failed for ck, x in r.config_kinds.items()} == {
        ("a", "max_accuracy_drop"): 1, ("a", "min_output_match"): 1, ("b", "max_accuracy_drop"): 2}
    assert r.gates["b/v1/max_accuracy_drop"].not_judged == 1
    assert r.whole_list.rate == 0.75 and r.whole_list.ci == clopper_pearson(3, 4)
    d = r.as_dict()
    assert d["list"]["ci95"] == list(clopper_pearson(3, 4))
    assert {(x["config"], x["kind"]) for x in d["config_kinds"]} == set(r.config_kinds)


def test_an_entity_absent_from_some_nights_counts_only_the_nights_it_was_in():
    nights = [{"a": [_g("a", "k1", "v", False)]}, {"a": [_g("a", "k1", "v", True)], "b": [_g("b", "k1", "v", True)]}]
    r = false_alarm_rates(nights)
    assert (r.configs["b"].failed, r.configs["b"].nights) == (0, 1)
    assert rate(0, 1).ci == clopper_pearson(0, 1)
    with pytest.raises(ValueError, match="at least one night"):
        false_alarm_rates([])
