"""Declared expected failures put on judged gates: each gate a declaration names carries
it (:class:`~harness.records.run_record.ExpectedFailureRecord`), applied when the run's
engine builds match (every build the gate's variants ran on: both sides of a
comparison), so its verdict reads XFAIL / XPASS (pytest's xfail) instead of
FAIL / PASS. The gate's own judgement (``passed``, ``observed``, ``limit``, ``detail``)
is never changed: a declaration relabels an outcome, it does not move a statistic (so
a Holm family is the same with or without it, docs/gates.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from harness.config.expected import applies, gate_matches
from harness.config.schema import ExpectedFailureSpec, ModelConfig
from harness.records.expected import ExpectedFailureRecord
from harness.records.provenance import EngineBuild
from harness.records.run_record import GateResult

__all__ = ["mark_expected"]


def mark_expected(results: Sequence[GateResult], config: ModelConfig,
                  build: EngineBuild | None | Callable[[GateResult], Sequence[EngineBuild | None]]
                  ) -> list[GateResult]:
    """``results`` with the governing declaration of ``config.expected_failures`` on each
    gate it names (:func:`harness.config.expected.declaration_for`). Gates no declaration
    names come back unchanged.

    Args:
        results: the judged gates.
        config: the config whose declarations apply.
        build: the engine builds each gate's variants ran (a function of the gate: for a
            comparison both sides'), or one build for every gate. A declaration applies to
            a gate only when it applies to every one of its builds; a build that is
            unknown (None, or no package / version) on any side: nothing applies.
    """
    if not config.expected_failures:
        return list(results)
    out = []
    for g in results:
        builds = list(build(g)) if callable(build) else [build]
        found = _governing(config, g.id, builds)
        if found is None:
            out.append(g)
            continue
        spec, applies = found
        named = " and ".join(dict.fromkeys(b.describe() for b in builds if b is not None and b.package)) or None
        rec = ExpectedFailureRecord(
            gates=tuple(spec.gates), builds=tuple(spec.builds), reason=spec.reason, evidence=spec.evidence,
            strict=spec.strict, applies=applies, build=named,
        )
        out.append(g.model_copy(update={"expected_failure": rec}))
    return out


def _governing(config: ModelConfig, gate_id: str, builds: Sequence[EngineBuild | None],
               ) -> tuple[ExpectedFailureSpec, bool | None] | None:
    """The declaration that governs ``gate_id`` on all of ``builds`` (each side of a
    comparison; :func:`harness.config.expected.declaration_for` for one build): the first
    naming the gate that applies to every build; else the first naming it, with None
    when some build is unknown, else False; None when no declaration names the gate."""
    sides = list(builds) or [None]
    named = [spec for spec in config.expected_failures if any(gate_matches(p, gate_id, config.name)
                                                              for p in spec.gates)]
    if not named:
        return None
    verdicts = {id(spec): [applies(spec, b.package if b else None, b.version if b else None) for b in sides]
                for spec in named}
    for spec in named:
        if all(a is True for a in verdicts[id(spec)]):
            return spec, True
    first = named[0]
    return first, (None if any(a is None for a in verdicts[id(first)]) else False)
