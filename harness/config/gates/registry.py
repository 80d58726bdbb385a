"""The registry of gate kinds: each kind declared once, by :func:`gate` on its spec class.

A declaration ties together, for one kind: its spec model (the pydantic class, whose
``kind`` literal is the kind), its scope (where it is planned, which fixes its id rule),
its place in the plan's order, its planning rule (the class's :meth:`GateBase.plan`), its
documentation row (docs/gates.md, "Gates"), whether it reads generated tokens (NOT RUN on
a task that only scores prompts) and the config settings that set it (calibration
recommends them). Judges are bound to the declared kinds from the analysis stage
(:mod:`harness.analysis.judges`), which refuses a judge for an undeclared class and a
declared kind without a judge.

:class:`GateKind` is the index of the kinds: :func:`check_declared` (run when
:mod:`harness.config.gates` is imported) fails on a member without a declaration and on
a declaration whose kind is not a member, so the index cannot drift from the families.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from harness.config.schema import ComparisonSpec, GateSpec, ModelConfig, VariantSpec


class GateKind(str, Enum):
    """Every kind of gate evalrun judges (docs/gates.md); each member is declared by one
    spec class of a family module of :mod:`harness.config.gates`."""

    VARIANT_EFFECTIVE = "variant_effective"
    ACCURACY_FLOOR = "accuracy_floor"
    MAX_ERROR_RATE = "max_error_rate"
    MAX_TRUNCATION_RATE = "max_truncation_rate"
    DRAFTS_OBSERVED = "drafts_observed"
    MIN_ACCEPTANCE_LENGTH = "min_acceptance_length"
    MAX_ACCURACY_DROP = "max_accuracy_drop"
    MIN_OUTPUT_MATCH = "min_output_match"
    MAX_ACCEPTANCE_LENGTH_DROP = "max_acceptance_length_drop"
    BASELINE_ACCURACY_DROP = "baseline_accuracy_drop"
    BASELINE_ACCEPTANCE_LENGTH_DROP = "baseline_acceptance_length_drop"
    BASELINE_READABLE = "baseline_readable"
    MAX_POSITION_ACCEPTANCE_DROP = "max_position_acceptance_drop"
    BASELINE_POSITION_ACCEPTANCE_DROP = "baseline_position_acceptance_drop"
    SHAPE_PROVEN = "shape_proven"
    SAMPLED_EQUIVALENCE = "sampled_equivalence"


#: Where a kind is planned, which fixes its id (``<config>/...``):
#: ``variant``: once per variant, ``<config>/<variant>/<kind>``;
#: ``task``: per variant and task, ``<config>/<variant>/<task>/<kind>``;
#: ``comparison``: per comparison and gated task, ``<config>/<baseline>-><candidate>/<task>/<kind>``;
#: ``baseline_file``: once per config against its stored baseline, ``<config>/<kind>`` (variant ``-``);
#: ``baseline_task``: per variant and task against the stored baseline, ``<config>/<variant>/<task>/<kind>``.
Scope = Literal["variant", "task", "comparison", "baseline_file", "baseline_task"]
#: The scopes of the in-run plan and of the plan against a stored baseline.
RUN_SCOPES: tuple[Scope, ...] = ("variant", "task", "comparison")
BASELINE_SCOPES: tuple[Scope, ...] = ("baseline_file", "baseline_task")


@dataclass(frozen=True)
class Place:
    """One place a gate may be planned: a config and, by scope, a variant, a task or a
    comparison. ``variant`` is the candidate of a comparison, ``-`` for a config-level gate."""

    config: ModelConfig
    scope: Scope
    variant: str = "-"
    task: str | None = None
    comparison: ComparisonSpec | None = None

    @property
    def settings(self) -> GateSpec:
        """The gate settings of the place's task (:meth:`ModelConfig.gates_for`), else the config's."""
        return self.config.gates_for(self.task) if self.task is not None else self.config.gates

    @property
    def variant_spec(self) -> VariantSpec:
        """The place's variant (the candidate of a comparison)."""
        return self.config.variants[self.variant]

    @property
    def comp(self) -> ComparisonSpec:
        """The place's comparison.

        Raises:
            TypeError: the place is not a comparison's.
        """
        if self.comparison is None:
            raise TypeError(f"{self.scope} place of {self.config.name} has no comparison")
        return self.comparison

    def gate_id(self, kind: GateKind) -> str:
        """The id of a gate of ``kind`` planned here: the scope's rule (:data:`Scope`)."""
        c = self.config.name
        if self.scope == "baseline_file":
            return f"{c}/{kind.value}"
        if self.scope == "variant":
            return f"{c}/{self.variant}/{kind.value}"
        if self.scope == "comparison":
            return f"{c}/{self.comp.baseline}->{self.comp.candidate}/{self.task}/{kind.value}"
        return f"{c}/{self.variant}/{self.task}/{kind.value}"

    def common(self, kind: GateKind) -> dict[str, Any]:
        """The fields every gate planned here shares: id, config, variant, task, baseline."""
        out: dict[str, Any] = {"id": self.gate_id(kind), "config": self.config.name, "variant": self.variant}
        if self.task is not None:
            out["task"] = self.task
        if self.comparison is not None:
            out["baseline"] = self.comparison.baseline
        return out


_G = TypeVar("_G", bound="GateBase")


class GateBase(BaseModel):
    """Fields of every planned gate: a stable ``id`` (:meth:`Place.gate_id`), the variant it
    judges (the candidate for comparisons), its task (None for per-variant gates), the
    ``baseline`` variant of a comparison, a ``limit`` and an ``op`` (the value must be
    ``>=`` or ``<=`` the limit; ``==`` for yes/no checks), and a sentence for people.

    A declared subclass (:func:`gate`) overrides ``kind`` with its literal and
    :meth:`plan` with its planning rule."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    config: str
    variant: str
    task: str | None = None
    baseline: str | None = None
    limit: float | None = None
    op: Literal[">=", "<=", "=="]
    description: str = ""
    kind: GateKind

    @classmethod
    def plan(cls: type[_G], at: Place) -> _G | None:
        """The planning rule: the gate of this kind at ``at``, or None when the config does
        not ask for it there. Every declared kind overrides it."""
        raise NotImplementedError(f"{cls.__name__}: a declared gate kind defines its planning rule")

    @classmethod
    def at(cls: type[_G], place: Place, **fields: Any) -> _G:
        """A gate of this class at ``place``: its id by the scope's rule, the place's config,
        variant, task and baseline, and ``fields`` (limit, settings, description)."""
        kind = cls.model_fields["kind"].default
        return cls(**place.common(kind), **fields)


@dataclass(frozen=True)
class Declaration:
    """One gate kind as declared (:func:`gate`).

    Attributes:
        kind: the kind (the spec's ``kind`` literal).
        spec: the spec model.
        scope: where it is planned (:data:`Scope`), which fixes its id rule.
        order: its place among the kinds of its scope in the plan (lower first).
        doc: what it passes on, its row of docs/gates.md's table "Gates".
        reads_generation: it reads generated tokens or speculative decoding: NOT RUN on a
            task that only scores prompts.
        settings: the config keys (``gates:`` or a comparison's) that set it, which
            calibration may recommend.
        module: the family module that declares it.
    """

    kind: GateKind
    spec: type[GateBase]
    scope: Scope
    order: int
    doc: str
    reads_generation: bool
    settings: tuple[str, ...]
    module: str


#: kind -> declaration, in declaration order (filled by :func:`gate`).
DECLARATIONS: dict[GateKind, Declaration] = {}

def gate(*, scope: Scope, order: int, doc: str, reads_generation: bool = False,
         settings: tuple[str, ...] = ()) -> Callable[[type[_G]], type[_G]]:
    """Class decorator: declare the decorated spec model as its ``kind``'s one definition.

    Raises:
        TypeError: the class has no ``kind`` literal of :class:`GateKind`, does not define
            its own :meth:`GateBase.plan`, its kind is declared already, or another kind of
            the same scope has the same ``order``.
    """
    def declare(cls: type[_G]) -> type[_G]:
        kind = cls.model_fields["kind"].default if "kind" in cls.model_fields else None
        if not isinstance(kind, GateKind):
            raise TypeError(f"gate class {cls.__name__}: its kind field needs a GateKind default, not {kind!r}")
        if kind in DECLARATIONS:
            raise TypeError(f"gate kind {kind.value} already declared by {DECLARATIONS[kind].spec.__name__}; "
                            f"cannot declare {cls.__name__} too")
        if "plan" not in vars(cls):
            raise TypeError(f"gate class {cls.__name__}: no planning rule (define the classmethod plan)")
        clash = [d.kind.value for d in DECLARATIONS.values() if d.scope == scope and d.order == order]
        if clash:
            raise TypeError(f"gate kind {kind.value}: order {order} of scope {scope} is taken by {clash[0]}")
        DECLARATIONS[kind] = Declaration(kind, cls, scope, order, " ".join(doc.split()), reads_generation,
                                         settings, cls.__module__)
        return cls
    return declare


def check_declared(declarations: Mapping[GateKind, Declaration] = DECLARATIONS) -> None:
    """Fail closed on an index that drifted from the families.

    Raises:
        TypeError: a :class:`GateKind` member without a declaration.
    """
    missing = [k.value for k in GateKind if k not in declarations]
    if missing:
        raise TypeError(f"gate kinds without a declaration (a spec class with @gate): {', '.join(missing)}")


def in_scope(scope: Scope) -> list[Declaration]:
    """The declarations of ``scope`` in plan order."""
    return sorted((d for d in DECLARATIONS.values() if d.scope == scope), key=lambda d: d.order)


def planned_at(place: Place) -> list[GateBase]:
    """Every gate planned at ``place``: each kind of its scope, in order, by its rule.

    Raises:
        TypeError: a rule returned a gate of another class than its own.
    """
    out: list[GateBase] = []
    for d in in_scope(place.scope):
        g = d.spec.plan(place)
        if g is None:
            continue
        if type(g) is not d.spec:
            raise TypeError(f"planning rule of {d.kind.value} returned a {type(g).__name__}")
        out.append(g)
    return out


def docs_table() -> str:
    """docs/gates.md's table "Gates", one row per declared kind in :class:`GateKind` order."""
    rows = ["| gate | passes when |", "| --- | --- |"]
    rows += [f"| `{k.value}` | {DECLARATIONS[k].doc} |" for k in GateKind if k in DECLARATIONS]
    return "\n".join(rows) + "\n"


def generation_kinds() -> tuple[type[GateBase], ...]:
    """The spec classes of the kinds that read generated tokens or speculative decoding
    (:attr:`Declaration.reads_generation`): NOT RUN on a task that only scores prompts."""
    return tuple(d.spec for d in DECLARATIONS.values() if d.reads_generation)
