"""Calibration's recommendation rules, registered per gate kind: each gate kind that declares
settings (:attr:`harness.config.gates.Declaration.settings`) may have one rule, which
:func:`harness.report.calibration.summarize` calls and which may recommend only those
settings (:func:`run_rule`). The rules themselves are in :mod:`harness.report.calibration`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from harness.config.gates import GateBase, declaration

#: gate kind -> its recommendation rule, in registration order (the order of the keys in
#: ``calibration.json``), for the kinds planned per comparison: called per comparison and task
#: as ``rule(entry, tasks by (variant, task), k, "<baseline>-><candidate>/<task>", recommended, why)``.
COMPARISON_RULES: dict[str, Callable[..., None]] = {}
#: the same for every other kind (config-level settings): called once per config as
#: ``rule(config summary, k, recommended gates, why)``.
GATES_RULES: dict[str, Callable[..., None]] = {}

_R = TypeVar("_R", bound=Callable[..., None])


def recommends(spec: type[GateBase]) -> Callable[[_R], _R]:
    """Decorator: register the decorated function as the recommendation rule of the gate
    kind whose spec class is ``spec``.

    Raises:
        TypeError: ``spec`` is not a declared kind's spec class, its kind declares no
            settings to recommend, or already has a rule.
    """
    def register(fn: _R) -> _R:
        kind = getattr(spec, "KIND", None)
        d = declaration(kind) if isinstance(kind, str) else None
        if d is None or d.spec is not spec:
            raise TypeError(f"{fn.__name__}: {spec.__name__} is not the spec class of a declared gate kind")
        rules = COMPARISON_RULES if d.scope == "comparison" else GATES_RULES
        if not d.settings or d.kind in rules:
            raise TypeError(f"{fn.__name__}: gate kind {d.kind} declares no settings or has a rule already")
        rules[d.kind] = fn
        return fn
    return register


def run_rule(kind: str, rule: Callable[..., None], out: Mapping[str, object], *args: Any) -> None:
    """``rule(*args)``, which writes into ``out``.

    Raises:
        TypeError: the rule wrote a key that is not a declared setting of ``kind``.
    """
    before = set(out)
    rule(*args)
    settings = declaration(kind).settings
    extra = set(out) - before - set(settings)
    if extra:
        raise TypeError(f"the recommendation rule of {kind} writes {sorted(extra)}, not settings of that kind "
                        f"(declared: {list(settings)})")
