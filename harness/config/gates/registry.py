"""The registry of gate kinds: each kind declared once, by :func:`gate` on its spec class, in
its own module of :data:`KINDS_PACKAGE` (``harness/analysis/gatekinds/<kind>.py``).

A declaration ties together, for one kind: its spec model (the pydantic class, whose
``kind`` literal is the kind and the name of its module), its scope (where it is planned,
which fixes its id rule), its place in the plan's order, its planning rule (the class's
:meth:`GateBase.plan`), its judge (the class's :meth:`GateBase.judge`), its documentation
row (docs/gates.md, "Gates"), whether it reads generated tokens (NOT RUN on a task that
only scores prompts) and the config settings that set it (calibration recommends them).

Why this kind-agnostic half is in the config stage and the kinds in the analysis stage:
the config loader needs every planned gate id (declared expected failures are checked
against them at load, :func:`harness.config.expected.check_expected_failures`) and the
plan (:mod:`harness.config.plan`) holds the gates, while a judge reads measurements,
statistics and the record's ``GateResult`` (later stages). So the places, scopes and id
rules, the base class, the decorator and the plan walk are here, and the kinds are loaded
by name on first use, once (:func:`declarations`: ``importlib.import_module(KINDS_PACKAGE)``),
as a plugin registry loads its plugins (lm-eval's registry, inspect_ai's registry lookup).
That is the one edge from an earlier stage to a later one: tests/test_architecture.py
allows it for this module and this name only.

The registry fails closed: :func:`gate` refuses a class without a kind literal, a kind
declared twice, a class without its own planning rule or judge, and an ``order`` another
kind of its scope has; :func:`check_declared` (run when the kinds are loaded) refuses a
kind module that declares no kind of its name and a kind declared outside its own module.
"""

from __future__ import annotations

import difflib
import importlib
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field

from harness.config.schema import ComparisonSpec, GateSpec, ModelConfig, VariantSpec

#: The package of gate kinds, one module per kind named after it (modules whose name starts
#: with ``_`` hold what several kinds share), loaded by name by :func:`declarations`.
KINDS_PACKAGE = "harness.analysis.gatekinds"

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

    def gate_id(self, kind: str) -> str:
        """The id of a gate of ``kind`` planned here: the scope's rule (:data:`Scope`)."""
        c = self.config.name
        if self.scope == "baseline_file":
            return f"{c}/{kind}"
        if self.scope == "variant":
            return f"{c}/{self.variant}/{kind}"
        if self.scope == "comparison":
            return f"{c}/{self.comp.baseline}->{self.comp.candidate}/{self.task}/{kind}"
        return f"{c}/{self.variant}/{self.task}/{kind}"

    def common(self, kind: str) -> dict[str, Any]:
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

    A declared subclass (:func:`gate`) overrides ``kind`` with its literal, :meth:`plan`
    with its planning rule and :meth:`judge` with its judge; :func:`gate` sets
    :attr:`KIND` to the literal."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: the declared kind (the ``kind`` literal), on the class: set by :func:`gate`.
    KIND: ClassVar[str]

    id: str
    config: str
    variant: str
    task: str | None = None
    baseline: str | None = None
    limit: float | None = None
    op: Literal[">=", "<=", "=="]
    description: str = ""
    kind: str

    @classmethod
    def plan(cls: type[_G], at: Place) -> _G | None:
        """The planning rule: the gate of this kind at ``at``, or None when the config does
        not ask for it there. Every declared kind overrides it."""
        raise NotImplementedError(f"{cls.__name__}: a declared gate kind defines its planning rule")

    def judge(self, m: Any, adjusted_p: float | None = None) -> Any:
        """The judge: this gate's verdict (a ``harness.records.run_record.GateResult``) on
        the config's measurements ``m`` (``harness.analysis.measurements.Measurements``),
        with the Holm-adjusted p-value of a gate in a Holm family, else None. Every
        declared kind overrides it, in the analysis stage (so these types are named there,
        not here)."""
        raise NotImplementedError(f"{type(self).__name__}: a declared gate kind defines its judge")

    @classmethod
    def at(cls: type[_G], place: Place, **fields: Any) -> _G:
        """A gate of this class at ``place``: its id by the scope's rule, the place's config,
        variant, task and baseline, and ``fields`` (limit, settings, description)."""
        return cls(**place.common(cls.KIND), **fields)


@dataclass(frozen=True)
class Declaration:
    """One gate kind as declared (:func:`gate`).

    Attributes:
        kind: the kind (the spec's ``kind`` literal, the name of its module).
        spec: the spec model, with its planning rule and its judge.
        scope: where it is planned (:data:`Scope`), which fixes its id rule.
        order: its place among the kinds of its scope in the plan (lower first).
        doc: what it passes on, its row of docs/gates.md's table "Gates".
        reads_generation: it reads generated tokens or speculative decoding: NOT RUN on a
            task that only scores prompts.
        settings: the config keys (``gates:`` or a comparison's) that set it, which
            calibration may recommend.
        module: the module that declares it.
    """

    kind: str
    spec: type[GateBase]
    scope: Scope
    order: int
    doc: str
    reads_generation: bool
    settings: tuple[str, ...]
    module: str


#: kind -> declaration, in declaration order (filled by :func:`gate` as the kind modules are
#: imported). Read it through :func:`declarations`, which loads every kind first.
DECLARATIONS: dict[str, Declaration] = {}

#: a kind: the name of its module and the last part of its gate ids
_KIND_NAME = re.compile(r"[a-z][a-z0-9_]*")


def gate(*, scope: Scope, order: int, doc: str, reads_generation: bool = False,
         settings: tuple[str, ...] = ()) -> Callable[[type[_G]], type[_G]]:
    """Class decorator: declare the decorated spec model as its ``kind``'s one definition,
    and set its :attr:`GateBase.KIND`.

    Raises:
        TypeError: the class has no ``kind`` literal (lower case, digits, ``_``), does not
            define its own :meth:`GateBase.plan` or :meth:`GateBase.judge`, its kind is
            declared already, or another kind of the same scope has the same ``order``.
    """
    def declare(cls: type[_G]) -> type[_G]:
        kind = cls.model_fields["kind"].default if "kind" in cls.model_fields else None
        if not isinstance(kind, str) or not _KIND_NAME.fullmatch(kind):
            raise TypeError(f"gate class {cls.__name__}: its kind field needs a literal default of lower case "
                            f"letters, digits and _ (the name of its module), not {kind!r}")
        if kind in DECLARATIONS:
            raise TypeError(f"gate kind {kind} already declared by {DECLARATIONS[kind].spec.__name__}; "
                            f"cannot declare {cls.__name__} too")
        if "plan" not in vars(cls):
            raise TypeError(f"gate class {cls.__name__}: no planning rule (define the classmethod plan)")
        if "judge" not in vars(cls):
            raise TypeError(f"gate class {cls.__name__}: no judge (define the method judge)")
        clash = [d.kind for d in DECLARATIONS.values() if d.scope == scope and d.order == order]
        if clash:
            raise TypeError(f"gate kind {kind}: order {order} of scope {scope} is taken by {clash[0]}")
        cls.KIND = kind
        DECLARATIONS[kind] = Declaration(kind, cls, scope, order, " ".join(doc.split()), reads_generation,
                                         settings, cls.__module__)
        return cls
    return declare


_LOAD = threading.RLock()
_loaded = False


def declarations() -> dict[str, Declaration]:
    """Every declared gate kind, kind -> declaration. The first call loads the kinds, once:
    imports :data:`KINDS_PACKAGE` by name (which imports each of its kind modules) and
    checks them (:func:`check_declared`).

    Raises:
        TypeError: :func:`gate`'s or :func:`check_declared`'s refusal (every call, until the
            kinds load).
    """
    global _loaded
    with _LOAD:
        if not _loaded:
            package = importlib.import_module(KINDS_PACKAGE)
            check_declared(package.KIND_MODULES)
            _loaded = True
    return DECLARATIONS


def check_declared(kind_modules: Iterable[str], declared: Mapping[str, Declaration] = DECLARATIONS) -> None:
    """Fail closed on kinds and kind modules that drifted apart: each module of
    :data:`KINDS_PACKAGE` named in ``kind_modules`` (its name, without the package) declares
    the kind of its name, and each kind is declared in its own module.

    Raises:
        TypeError: a kind module without the declaration of its kind, or a kind declared
            in another module than ``<KINDS_PACKAGE>.<kind>``.
    """
    problems = [f"module {KINDS_PACKAGE}.{name} declares no gate kind {name} (a spec class with @gate whose kind "
                f"is {name!r})" for name in kind_modules if name not in declared]
    problems += [f"gate kind {d.kind} is declared in {d.module}, not in its own module {KINDS_PACKAGE}.{d.kind}"
                 for d in declared.values() if d.module != f"{KINDS_PACKAGE}.{d.kind}"]
    if problems:
        raise TypeError("; ".join(problems))


def declaration(kind: str) -> Declaration:
    """The declaration of ``kind`` (a gate kind as the record and the self-check's
    expectations spell it).

    Raises:
        ValueError: ``kind`` is not a declared gate kind (the nearest are named).
    """
    known = declarations()
    if kind not in known:
        near = difflib.get_close_matches(kind, known, n=3)
        raise ValueError(f"{kind!r} is not a declared gate kind" + (f" (nearest: {', '.join(near)})" if near else "")
                         + f"; declared: {', '.join(known)}")
    return known[kind]


def in_scope(scope: Scope) -> list[Declaration]:
    """The declarations of ``scope`` in plan order."""
    return sorted((d for d in declarations().values() if d.scope == scope), key=lambda d: d.order)


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
            raise TypeError(f"planning rule of {d.kind} returned a {type(g).__name__}")
        out.append(g)
    return out


#: every scope, in the plan's order (:func:`harness.config.gates.plan_gates`, then the baseline's)
SCOPES: tuple[Scope, ...] = RUN_SCOPES + BASELINE_SCOPES


def docs_table() -> str:
    """docs/gates.md's table "Gates", one row per declared kind in plan order (by scope, then
    by its ``order``)."""
    rows = ["| gate | passes when |", "| --- | --- |"]
    rows += [f"| `{d.kind}` | {d.doc} |" for scope in SCOPES for d in in_scope(scope)]
    return "\n".join(rows) + "\n"


def generation_kinds() -> tuple[type[GateBase], ...]:
    """The spec classes of the kinds that read generated tokens or speculative decoding
    (:attr:`Declaration.reads_generation`): NOT RUN on a task that only scores prompts."""
    return tuple(d.spec for d in declarations().values() if d.reads_generation)


def gate_union() -> Any:
    """Any planned gate as a pydantic discriminated union: ``kind`` selects the class among
    every declared spec model, in declaration order (``harness.config.gates.Gate``)."""
    return Annotated[Union[tuple(d.spec for d in declarations().values())], Field(discriminator="kind")]
