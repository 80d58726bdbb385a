"""Planned gates: every gate kind declared once, in one module per family; the plan derived here and nowhere else.

Each family module (:mod:`.accuracy`, :mod:`.acceptance`, :mod:`.position`,
:mod:`.output_match`, :mod:`.sampled`, :mod:`.requests`, :mod:`.engine`, :mod:`.shape`,
:mod:`.baseline`) declares its kinds with :func:`~.registry.gate`: the spec model (its
type), the scope (which fixes the id rule, :meth:`~.registry.Place.gate_id`), the place in
the plan, the planning rule (the class's ``plan``), the documentation row of
docs/gates.md, whether it reads generated tokens, and the settings calibration may
recommend. :func:`plan_gates` and :func:`plan_baseline_gates` walk the config's places in a
fixed order and ask every kind of the place's scope: no gate id is spelled by hand.

Why the judges are not in these modules: the plan is stage 1 (``config``), because the
config loader already needs every planned gate id (declared expected failures are checked
against them at load, :func:`harness.config.expected.check_expected_failures`) and the
plan is read by every later stage; a judge reads measurements, statistics and the record's
``GateResult`` (stages 2 to 6). tests/test_architecture.py forbids a stage-1 module to
import those. So the judges are bound to these declarations by kind from the analysis
stage (:mod:`harness.analysis.judges`, one module per family of the same name), and that
registry fails closed at import: a judge for an undeclared class, two judges for one
class, or a declared kind without a judge is an error.

Per-task settings (``tasks.<name>.gates``: pipeline, thresholds, limits) reach every gate
of that task because each rule reads :attr:`~.registry.Place.settings`, i.e.
:meth:`~harness.config.schema.ModelConfig.gates_for` of the place's task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Union

from pydantic import Field

from harness.config.gates.acceptance import (
    BaselineAcceptanceLengthDrop,
    DraftsObserved,
    MaxAcceptanceLengthDrop,
    MinAcceptanceLength,
)
from harness.config.gates.accuracy import AccuracyFloor, BaselineAccuracyDrop, MaxAccuracyDrop
from harness.config.gates.baseline import BaselineReadable
from harness.config.gates.engine import VariantEffective
from harness.config.gates.output_match import MinOutputMatch, greedy_output_match
from harness.config.gates.position import BaselinePositionAcceptanceDrop, MaxPositionAcceptanceDrop
from harness.config.gates.registry import (
    BASELINE_SCOPES,
    DECLARATIONS,
    RUN_SCOPES,
    Declaration,
    GateBase,
    GateKind,
    Place,
    Scope,
    check_declared,
    docs_table,
    gate,
    generation_kinds,
    planned_at,
)
from harness.config.gates.requests import MaxErrorRate, MaxTruncationRate
from harness.config.gates.sampled import SampledEquivalence, sampling_notes, scorer_variant
from harness.config.gates.shape import ShapeProven
from harness.config.schema import ModelConfig

check_declared()

if TYPE_CHECKING:
    #: Any planned gate (for the type checker: the declared kinds' base).
    Gate = GateBase
else:
    #: Any planned gate; ``kind`` selects the class (a pydantic discriminated union of
    #: every declared spec model, in declaration order).
    Gate = Annotated[Union[tuple(d.spec for d in DECLARATIONS.values())], Field(discriminator="kind")]

__all__ = [
    "AccuracyFloor", "BaselineAcceptanceLengthDrop", "BaselineAccuracyDrop", "BaselinePositionAcceptanceDrop",
    "BaselineReadable", "BASELINE_SCOPES", "DECLARATIONS", "Declaration", "DraftsObserved", "Gate", "GateBase",
    "GateKind", "MaxAcceptanceLengthDrop", "MaxAccuracyDrop", "MaxErrorRate", "MaxPositionAcceptanceDrop",
    "MaxTruncationRate", "MinAcceptanceLength", "MinOutputMatch", "Place", "RUN_SCOPES", "SampledEquivalence",
    "Scope", "ShapeProven", "VariantEffective", "check_declared", "docs_table", "gate", "generation_kinds",
    "greedy_output_match", "plan_baseline_gates", "plan_gates", "sampling_notes", "scorer_variant",
]


def plan_gates(config: ModelConfig) -> list[Gate]:
    """Every in-run gate of ``config``, in a stable order: per variant (its ``variant``-scope
    kinds, then per task its ``task``-scope kinds), then per comparison and gated task
    (its ``tasks``, else every task) the ``comparison``-scope kinds; within a scope by
    each kind's declared ``order``."""
    out: list[Gate] = []
    for vname in config.variants:
        out += planned_at(Place(config, "variant", vname))
        for tname in config.tasks:
            out += planned_at(Place(config, "task", vname, tname))
    for comp in config.comparisons:
        for tname in comp.tasks or config.tasks:
            out += planned_at(Place(config, "comparison", comp.candidate, tname, comp))
    return out


def plan_baseline_gates(config: ModelConfig) -> list[Gate]:
    """The gates against a stored baseline (judged only when ``<baseline dir>/<config>.json``
    exists): the ``baseline_file``-scope kinds once, then per variant and task the
    ``baseline_task``-scope kinds; each from the task's own settings."""
    out: list[Gate] = planned_at(Place(config, "baseline_file"))
    for vname in config.variants:
        for tname in config.tasks:
            out += planned_at(Place(config, "baseline_task", vname, tname))
    return out
