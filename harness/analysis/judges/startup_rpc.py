"""The ``startup_rpc_check`` gate kind's judge half (:mod:`harness.config.gates.startup_rpc`
is the declaration; both are for the lead to register).

A variant passes when every check answered None on every worker; it fails when any check
reported a message or could not be called (fail closed: no dev-mode endpoint, an unknown
method, a malformed answer, or no answer recorded at all); it is NOT RUN, with the reason,
only when every check was not run because the worker extension is not installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.config.gates.startup_rpc import StartupRpcCheck
from harness.engine.rpc_checks import RpcCheckOutcome


@dataclass(frozen=True)
class StartupRpcVerdict:
    """A judged ``startup_rpc_check`` gate: ``passed`` None is NOT RUN (never a pass);
    ``observed`` is the number of checks that did not pass (the limit is 0)."""

    gate: StartupRpcCheck
    passed: bool | None
    observed: float | None
    detail: str


def judge_startup_rpc_check(g: StartupRpcCheck, outcomes: Sequence[RpcCheckOutcome] | None) -> StartupRpcVerdict:
    """Judge one variant's start-up checks (module docstring). ``outcomes`` None: the
    checks were never called (the server did not start, or the run stopped before):
    NOT RUN when the variant has no server, which its other gates already report."""
    if outcomes is None:
        return StartupRpcVerdict(g, None, None, "not run: the variant's server did not start")
    by = {o.name: o for o in outcomes}
    absent = [n for n in g.checks if n not in by]
    if absent:
        return StartupRpcVerdict(g, False, float(len(absent)), f"no answer recorded for {', '.join(absent)}")
    got = [by[n] for n in g.checks]
    if all(o.verdict == "not_run" for o in got):
        return StartupRpcVerdict(g, None, None, "; ".join(o.detail for o in got))
    bad = [o for o in got if o.verdict != "passed"]
    if bad:
        return StartupRpcVerdict(g, False, float(len(bad)), "; ".join(o.detail for o in bad))
    return StartupRpcVerdict(g, True, 0.0, "; ".join(o.detail for o in got))
