"""Planned gates: the kind-agnostic registry and the plan, derived here and nowhere else.

Every gate kind is declared once, in its own module of :mod:`harness.analysis.gatekinds`
(``<kind>.py``), with :func:`~.registry.gate`: the spec model (its type), the scope (which
fixes the id rule, :meth:`~.registry.Place.gate_id`), the place in the plan, the planning
rule (the class's ``plan``), the judge (the class's ``judge``), the documentation row of
docs/gates.md, whether it reads generated tokens, and the settings calibration may
recommend. :func:`plan_gates` and :func:`plan_baseline_gates` walk the config's places in a
fixed order and ask every kind of the place's scope: no gate id is spelled by hand.

The kinds are in the analysis stage (a judge reads measurements, statistics and the
record's ``GateResult``), the plan in this one (the config loader checks declared expected
failures against the planned gate ids): the registry loads the kinds by name on first use
(:func:`~.registry.declarations`, the one edge to a later stage, as a plugin registry does).
:data:`DECLARATIONS` and :data:`Gate` are read through it too (module ``__getattr__``).

Per-task settings (``tasks.<name>.gates``: pipeline, thresholds, limits) reach every gate
of that task because each rule reads :attr:`~.registry.Place.settings`, i.e.
:meth:`~harness.config.schema.ModelConfig.gates_for` of the place's task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.config.gates.registry import (
    BASELINE_SCOPES,
    KINDS_PACKAGE,
    RUN_SCOPES,
    SCOPES,
    Declaration,
    GateBase,
    Place,
    Scope,
    check_declared,
    declaration,
    declarations,
    docs_table,
    gate,
    gate_union,
    generation_kinds,
    planned_at,
)
from harness.config.gates.sampling import greedy_output_match, sampling_notes, scorer_variant
from harness.config.schema import ModelConfig

if TYPE_CHECKING:
    #: Any planned gate (for the type checker: the declared kinds' base).
    Gate = GateBase
    #: kind -> declaration (:func:`~.registry.declarations`).
    DECLARATIONS: dict[str, Declaration]
else:  # hidden from mypy, which would read every unknown name of the module as Any
    def __getattr__(name: str) -> Any:
        """``Gate``: any planned gate, a pydantic discriminated union of every declared spec
        model (``kind`` selects the class; :func:`~.registry.gate_union`); ``DECLARATIONS``:
        :func:`~.registry.declarations`. Both load the kinds first.

        Raises:
            AttributeError: any other name.
        """
        if name == "Gate":
            return gate_union()
        if name == "DECLARATIONS":
            return declarations()
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BASELINE_SCOPES", "DECLARATIONS", "Declaration", "Gate", "GateBase", "KINDS_PACKAGE", "Place", "RUN_SCOPES",
    "SCOPES", "Scope", "check_declared", "declaration", "declarations", "docs_table", "gate", "gate_union",
    "generation_kinds", "greedy_output_match", "plan_baseline_gates", "plan_gates", "planned_at", "sampling_notes",
    "scorer_variant",
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
