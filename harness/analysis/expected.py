"""Declared expected failures put on judged gates: each gate a declaration names carries
it (:class:`~harness.records.run_record.ExpectedFailureRecord`), applied when the run's
engine build matches, so its verdict reads XFAIL / XPASS (pytest's xfail) instead of
FAIL / PASS. The gate's own judgement (``passed``, ``observed``, ``limit``, ``detail``)
is never changed: a declaration relabels an outcome, it does not move a statistic (so
a Holm family is the same with or without it, docs/gates.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.config.expected import declaration_for
from harness.config.schema import ModelConfig
from harness.records.expected import ExpectedFailureRecord
from harness.records.provenance import EngineBuild
from harness.records.run_record import GateResult

__all__ = ["mark_expected"]


def mark_expected(results: Sequence[GateResult], config: ModelConfig,
                  build: EngineBuild | None) -> list[GateResult]:
    """``results`` with the governing declaration of ``config.expected_failures`` on each
    gate it names (:func:`harness.config.expected.declaration_for` on ``build``'s package
    and version; ``build`` None: unknown, nothing applies). Gates no declaration names
    come back unchanged."""
    if not config.expected_failures:
        return list(results)
    package = build.package if build is not None else None
    version = build.version if build is not None else None
    named = build.describe() if build is not None and build.package else None
    out = []
    for g in results:
        found = declaration_for(config.expected_failures, g.id, config.name, package, version)
        if found is None:
            out.append(g)
            continue
        spec, applies = found
        rec = ExpectedFailureRecord(
            gates=tuple(spec.gates), builds=tuple(spec.builds), reason=spec.reason, evidence=spec.evidence,
            strict=spec.strict, applies=applies, build=named,
        )
        out.append(g.model_copy(update={"expected_failure": rec}))
    return out
