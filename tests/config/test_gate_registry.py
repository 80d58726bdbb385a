"""harness.config.gates: every gate kind declared once (spec, scope and id rule, plan order,
planning rule, docs row), the registry failing closed on a kind declared twice, without
a planning rule, or missing from the families; ids built by the scope's rule only."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Literal

import pytest

from harness.config import gates as G
from harness.config.gates import registry
from harness.config.loader import load_config

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


def test_every_gate_kind_is_declared_once_by_a_family_module():
    assert list(G.DECLARATIONS) == [d.kind for d in G.DECLARATIONS.values()]
    assert set(G.DECLARATIONS) == set(G.GateKind)
    for kind, d in G.DECLARATIONS.items():
        assert d.spec.model_fields["kind"].default is kind
        assert d.module.startswith("harness.config.gates.") and d.module != registry.__name__, d
        assert d.doc and d.scope in ("variant", "task", "comparison", "baseline_file", "baseline_task")
    orders = [(d.scope, d.order) for d in G.DECLARATIONS.values()]
    assert len(set(orders)) == len(orders)


#: GateKind's members as they were before the registry (the self-check's expectations name them)
KINDS = ("variant_effective accuracy_floor max_error_rate max_truncation_rate drafts_observed min_acceptance_length "
         "max_accuracy_drop min_output_match max_acceptance_length_drop baseline_accuracy_drop "
         "baseline_acceptance_length_drop baseline_readable max_position_acceptance_drop "
         "baseline_position_acceptance_drop shape_proven sampled_equivalence").split()


def test_gate_kind_keeps_its_members():
    assert [(k.name, k.value) for k in G.GateKind][:len(KINDS)] == [(v.upper(), v) for v in KINDS]
    assert G.GateKind.MIN_OUTPUT_MATCH == "min_output_match"  # a str enum: compares with the record's kind


def test_a_member_without_a_declaration_is_an_error(monkeypatch):
    monkeypatch.delitem(G.DECLARATIONS, G.GateKind.SHAPE_PROVEN)
    with pytest.raises(TypeError, match="without a declaration.*shape_proven"):
        G.check_declared()


def _spec(kind: G.GateKind, with_plan: bool = True) -> type[G.GateBase]:
    ns = {"__annotations__": {"kind": Literal[kind], "op": Literal["=="]}, "kind": kind, "op": "=="}
    if with_plan:
        ns["plan"] = classmethod(lambda cls, at: None)
    return type("Scratch", (G.GateBase,), ns)


def test_a_kind_declared_twice_is_refused():
    with pytest.raises(TypeError, match="shape_proven already declared by ShapeProven; cannot declare Scratch"):
        G.gate(scope="task", order=999, doc="x")(_spec(G.GateKind.SHAPE_PROVEN))


def test_a_kind_without_a_planning_rule_or_with_a_taken_order_is_refused(monkeypatch):
    monkeypatch.delitem(G.DECLARATIONS, G.GateKind.SHAPE_PROVEN)
    with pytest.raises(TypeError, match="no planning rule"):
        G.gate(scope="task", order=999, doc="x")(_spec(G.GateKind.SHAPE_PROVEN, with_plan=False))
    with pytest.raises(TypeError, match="order 10 of scope task is taken by accuracy_floor"):
        G.gate(scope="task", order=10, doc="x")(_spec(G.GateKind.SHAPE_PROVEN))
    assert G.GateKind.SHAPE_PROVEN not in G.DECLARATIONS  # nothing registered by a refusal


def test_a_class_without_a_gate_kind_is_refused():
    class NoKind(G.GateBase):
        op: Literal["=="] = "=="

    with pytest.raises(TypeError, match="needs a GateKind default"):
        G.gate(scope="task", order=999, doc="x")(NoKind)


def test_a_rule_returning_another_class_is_refused(monkeypatch):
    d = G.DECLARATIONS[G.GateKind.MAX_ERROR_RATE]
    c = load_config(CONFIGS[0])
    monkeypatch.setitem(G.DECLARATIONS, d.kind, replace(d, spec=G.MaxTruncationRate))
    monkeypatch.setattr(G.MaxTruncationRate, "plan", classmethod(
        lambda cls, at: G.MaxErrorRate.at(at, limit=0.0)))
    with pytest.raises(TypeError, match="planning rule of max_error_rate returned a MaxErrorRate"):
        G.plan_gates(c)


def _expected_id(g: G.GateBase) -> str:
    scope = G.DECLARATIONS[g.kind].scope
    k = g.kind.value
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
    assert not set(G.generation_kinds()) & {G.VariantEffective, G.AccuracyFloor, G.MaxErrorRate, G.MaxAccuracyDrop,
                                            G.BaselineAccuracyDrop, G.BaselineReadable, G.ShapeProven}
    assert set(G.generation_kinds()) >= {G.DraftsObserved, G.MinAcceptanceLength, G.MaxAcceptanceLengthDrop,
                                         G.MinOutputMatch, G.BaselineAcceptanceLengthDrop, G.MaxTruncationRate,
                                         G.MaxPositionAcceptanceDrop, G.BaselinePositionAcceptanceDrop,
                                         G.SampledEquivalence}
