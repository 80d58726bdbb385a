"""harness.config.gates: every gate kind declared once, in its own module of
harness.analysis.gatekinds (spec, scope and id rule, plan order, planning rule, judge, docs
row), the registry failing closed on a kind declared twice, without a planning rule or
judge, or a kind module without its declaration; ids built by the scope's rule only."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Literal

import pytest

from harness.analysis.gatekinds.accuracy_floor import AccuracyFloor
from harness.analysis.gatekinds.baseline_acceptance_length_drop import BaselineAcceptanceLengthDrop
from harness.analysis.gatekinds.baseline_accuracy_drop import BaselineAccuracyDrop
from harness.analysis.gatekinds.baseline_position_acceptance_drop import BaselinePositionAcceptanceDrop
from harness.analysis.gatekinds.baseline_readable import BaselineReadable
from harness.analysis.gatekinds.drafts_observed import DraftsObserved
from harness.analysis.gatekinds.max_acceptance_length_drop import MaxAcceptanceLengthDrop
from harness.analysis.gatekinds.max_accuracy_drop import MaxAccuracyDrop
from harness.analysis.gatekinds.max_error_rate import MaxErrorRate
from harness.analysis.gatekinds.max_position_acceptance_drop import MaxPositionAcceptanceDrop
from harness.analysis.gatekinds.max_truncation_rate import MaxTruncationRate
from harness.analysis.gatekinds.min_acceptance_length import MinAcceptanceLength
from harness.analysis.gatekinds.min_output_match import MinOutputMatch
from harness.analysis.gatekinds.sampled_equivalence import SampledEquivalence
from harness.analysis.gatekinds.shape_proven import ShapeProven
from harness.analysis.gatekinds.variant_effective import VariantEffective
from harness.config import gates as G
from harness.config.gates import registry
from harness.config.loader import load_config

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


def test_every_gate_kind_is_declared_once_by_its_own_module():
    assert list(G.DECLARATIONS) == [d.kind for d in G.DECLARATIONS.values()]
    assert set(KINDS) <= set(G.DECLARATIONS)
    for kind, d in G.DECLARATIONS.items():
        assert d.spec.model_fields["kind"].default == kind == d.spec.KIND
        assert d.module == f"{registry.KINDS_PACKAGE}.{kind}" and d.module != registry.__name__, d
        assert d.doc and d.scope in ("variant", "task", "comparison", "baseline_file", "baseline_task")
    orders = [(d.scope, d.order) for d in G.DECLARATIONS.values()]
    assert len(set(orders)) == len(orders)


#: the gate kinds as they were spelled before the registry (the record's ``kind``, the self-check's
#: expectations name them)
KINDS = ("variant_effective accuracy_floor max_error_rate max_truncation_rate drafts_observed min_acceptance_length "
         "max_accuracy_drop min_output_match max_acceptance_length_drop baseline_accuracy_drop "
         "baseline_acceptance_length_drop baseline_readable max_position_acceptance_drop "
         "baseline_position_acceptance_drop shape_proven sampled_equivalence").split()


def test_the_kinds_keep_their_names():
    assert set(KINDS) <= set(G.DECLARATIONS)  # a new kind may join; none is renamed or lost
    assert list(registry.importlib.import_module(registry.KINDS_PACKAGE).KIND_MODULES) == sorted(G.DECLARATIONS)
    assert MinOutputMatch.KIND == "min_output_match"  # a string: compares with the record's kind
    for kind, d in G.DECLARATIONS.items():  # each class named after its kind
        assert d.spec.__name__ == "".join(w.capitalize() for w in kind.split("_")), d


def test_a_kind_module_without_a_declaration_is_an_error(monkeypatch):
    monkeypatch.delitem(G.DECLARATIONS, "shape_proven")
    with pytest.raises(TypeError, match="module harness.analysis.gatekinds.shape_proven declares no gate kind"):
        G.check_declared(["shape_proven"])


def test_the_registry_loads_the_kinds_once_by_name(monkeypatch):
    calls = []
    real = registry.importlib.import_module
    monkeypatch.setattr(registry.importlib, "import_module", lambda name: calls.append(name) or real(name))
    monkeypatch.setattr(registry, "_loaded", False)
    assert G.declarations() is G.declarations() is registry.DECLARATIONS
    assert calls == ["harness.analysis.gatekinds"]


def _spec(kind: str, with_plan: bool = True, with_judge: bool = True) -> type[G.GateBase]:
    ns = {"__annotations__": {"kind": Literal[kind], "op": Literal["=="]}, "kind": kind, "op": "=="}
    if with_plan:
        ns["plan"] = classmethod(lambda cls, at: None)
    if with_judge:
        ns["judge"] = lambda self, m, adjusted_p=None: None
    return type("Scratch", (G.GateBase,), ns)


def test_a_kind_declared_twice_is_refused():
    with pytest.raises(TypeError, match="shape_proven already declared by ShapeProven; cannot declare Scratch"):
        G.gate(scope="task", order=999, doc="x")(_spec("shape_proven"))


def test_a_kind_without_a_planning_rule_or_judge_or_with_a_taken_order_is_refused(monkeypatch):
    monkeypatch.delitem(G.DECLARATIONS, "shape_proven")
    with pytest.raises(TypeError, match="no planning rule"):
        G.gate(scope="task", order=999, doc="x")(_spec("shape_proven", with_plan=False))
    with pytest.raises(TypeError, match="Scratch: no judge"):
        G.gate(scope="task", order=999, doc="x")(_spec("shape_proven", with_judge=False))
    with pytest.raises(TypeError, match="order 10 of scope task is taken by accuracy_floor"):
        G.gate(scope="task", order=10, doc="x")(_spec("shape_proven"))
    assert "shape_proven" not in G.DECLARATIONS  # nothing registered by a refusal


def test_a_class_without_a_gate_kind_is_refused():
    class NoKind(G.GateBase):
        op: Literal["=="] = "=="

    with pytest.raises(TypeError, match="needs a literal default"):
        G.gate(scope="task", order=999, doc="x")(NoKind)
    with pytest.raises(TypeError, match="needs a literal default.*'Not A Kind'"):  # it is a module name and an id part
        G.gate(scope="task", order=999, doc="x")(_spec("Not A Kind"))


def test_a_rule_returning_another_class_is_refused(monkeypatch):
    d = G.DECLARATIONS["max_error_rate"]
    c = load_config(CONFIGS[0])
    monkeypatch.setitem(G.DECLARATIONS, d.kind, replace(d, spec=MaxTruncationRate))
    monkeypatch.setattr(MaxTruncationRate, "plan", classmethod(
        lambda cls, at: MaxErrorRate.at(at, limit=0.0)))
    with pytest.raises(TypeError, match="planning rule of max_error_rate returned a MaxErrorRate"):
        G.plan_gates(c)


def _expected_id(g: G.GateBase) -> str:
    scope = G.DECLARATIONS[g.kind].scope
    k = g.kind
    return {"variant": f"{g.config}/{g.variant}/{k}", "baseline_file": f"{g.config}/{k}",
            "comparison": f"{g.config}/{g.baseline}->{g.variant}/{g.task}/{k}"}.get(
        scope, f"{g.config}/{g.variant}/{g.task}/{k}")


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_every_planned_id_follows_its_scopes_rule(path):
    c = load_config(path)
    gates = G.plan_gates(c) + G.plan_baseline_gates(c)
    assert gates
    for g in gates:
        assert g.id == _expected_id(g)
        assert G.DECLARATIONS[g.kind].scope in (G.BASELINE_SCOPES if g in G.plan_baseline_gates(c) else G.RUN_SCOPES)
    assert len({g.id for g in gates}) == len(gates)


def test_no_gate_id_is_spelled_in_a_planning_rule():
    for d in G.DECLARATIONS.values():
        text = Path(__import__(d.module, fromlist=["_"]).__file__).read_text(encoding="utf-8")
        assert not re.search(r"\bid\s*=", text), f"{d.module}: a gate id spelled by hand"
        assert not re.search(r"/\{\w+\}/", text), f"{d.module}: an id-like path spelled by hand"


def test_prompt_only_kinds_are_the_declared_generation_readers():
    assert not set(G.generation_kinds()) & {VariantEffective, AccuracyFloor, MaxErrorRate, MaxAccuracyDrop,
                                            BaselineAccuracyDrop, BaselineReadable, ShapeProven}
    assert set(G.generation_kinds()) >= {DraftsObserved, MinAcceptanceLength, MaxAcceptanceLengthDrop,
                                         MinOutputMatch, BaselineAcceptanceLengthDrop, MaxTruncationRate,
                                         MaxPositionAcceptanceDrop, BaselinePositionAcceptanceDrop,
                                         SampledEquivalence}
