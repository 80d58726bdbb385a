"""harness.report.recommenders: calibration's recommendation rules are registered per gate
kind and recommend only the settings that kind declares (harness.config.gates)."""

from __future__ import annotations

import typing

import pytest

from harness.analysis.gatekinds.accuracy_floor import AccuracyFloor
from harness.analysis.gatekinds.min_acceptance_length import MinAcceptanceLength
from harness.analysis.gatekinds.min_output_match import MinOutputMatch
from harness.analysis.gatekinds.shape_proven import ShapeProven
from harness.config.gates import DECLARATIONS
from harness.report import calibration
from harness.report.recommenders import COMPARISON_RULES, GATES_RULES, recommends, run_rule


def test_every_recommended_key_is_a_declared_setting_of_a_rule_s_kind():
    gates_keys = set(typing.get_type_hints(calibration.RecommendedGates))
    comp_keys = set(typing.get_type_hints(calibration.RecommendedComparison)) - {"baseline", "candidate", "task"}
    assert gates_keys <= {s for k in GATES_RULES for s in DECLARATIONS[k].settings}
    assert comp_keys <= {s for k in COMPARISON_RULES for s in DECLARATIONS[k].settings}
    assert all(DECLARATIONS[k].scope == "comparison" for k in COMPARISON_RULES)
    assert not any(DECLARATIONS[k].scope == "comparison" for k in GATES_RULES)


def test_a_rule_for_a_kind_without_settings_or_a_second_rule_is_refused():
    with pytest.raises(TypeError, match="shape_proven declares no settings"):
        recommends(ShapeProven)(lambda *a: None)
    with pytest.raises(TypeError, match="min_output_match declares no settings or has a rule already"):
        recommends(MinOutputMatch)(lambda *a: None)


def test_a_rule_for_a_class_that_is_not_a_declared_kind_is_refused():
    class Undeclared(ShapeProven):
        pass

    with pytest.raises(TypeError, match="Undeclared is not the spec class of a declared gate kind"):
        recommends(Undeclared)(lambda *a: None)


def test_a_rule_writing_an_undeclared_setting_is_refused():
    out: dict[str, object] = {"kept": 1}

    def rule(target: dict[str, object]) -> None:
        target["min_acceptance_length"] = 1.5
        target["tolerance"] = 0.1

    with pytest.raises(TypeError, match=r"min_acceptance_length writes \['tolerance'\]"):
        run_rule(MinAcceptanceLength.KIND, rule, out, out)
    run_rule(AccuracyFloor.KIND, lambda t: t.update(tolerance=0.2), out, out)
    assert out["tolerance"] == 0.2
