"""The ``startup_rpc_check`` gate kind's declaration half: a config's
``startup_rpc_checks`` (vLLM form, e.g. vLLM's ``DeepSeek-V4-Flash-EPLB-TEP4.yaml``) judged
per variant, right after its server is ready (:mod:`harness.engine.rpc_checks` calls them).

Written for the lead to port into the gate registry (gate kinds are being moved): it is
not yet a member of ``GateKind`` nor imported by :mod:`harness.config.gates`, so no
config plans it and records stay as they were. The judge half is
:mod:`harness.analysis.judges.startup_rpc`. Porting it: add
``STARTUP_RPC_CHECK = "startup_rpc_check"`` to ``GateKind``, make :class:`StartupRpcCheck`
a ``GateBase`` subclass declared with ``@gate(scope="variant", ...)`` whose ``plan`` is
:func:`plan_startup_rpc_check`, read ``startup_rpc_checks`` into the config types instead of
warning about it, and store each variant's :class:`~harness.engine.rpc_checks.RpcCheckOutcome`
list where its judge reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

#: The kind's name (the record's ``kind``; the last part of the gate id).
KIND = "startup_rpc_check"
#: Docs row: what the gate judges.
DOC = ("every start-up check the config names (``startup_rpc_checks``) answered None on every worker, "
       "called as vLLM's test calls it (``POST /collective_rpc``)")


@dataclass(frozen=True)
class StartupRpcCheck:
    """One variant's start-up checks: ``checks`` must all pass (``op`` ``==``: the count of
    checks that did not pass must be 0).

    Attributes:
        id: ``<config>/<variant>/startup_rpc_check`` (the variant scope's rule).
        config: the config's name.
        variant: the variant whose server is checked.
        checks: the method names, in the config's order.
    """

    id: str
    config: str
    variant: str
    checks: tuple[str, ...]
    op: Literal["=="] = "=="
    limit: float = 0

    @property
    def description(self) -> str:
        """One sentence for people."""
        return f"start-up checks {', '.join(self.checks)} hold on every worker"


def plan_startup_rpc_check(config: str, variants: Sequence[str], checks: Sequence[str]) -> list[StartupRpcCheck]:
    """One gate per variant when the config names checks, none otherwise (a config
    without ``startup_rpc_checks`` plans nothing, so its record is unchanged)."""
    if not checks:
        return []
    return [StartupRpcCheck(id=f"{config}/{v}/{KIND}", config=config, variant=v, checks=tuple(checks))
            for v in variants]
