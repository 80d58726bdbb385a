"""Gate kind ``startup_rpc_check``: per variant, every start-up check the config names
(``startup_rpc_checks``, e.g. vLLM's ``DeepSeek-V4-Flash-EPLB-TEP4.yaml``) answered None on
every worker, called right after the variant's server was ready as vLLM's test calls it
(``POST /collective_rpc {"method": NAME}``, :mod:`harness.engine.rpc_checks`)."""

from __future__ import annotations

from typing import Literal

from harness.analysis.gatekinds._common import result
from harness.analysis.measurements import Measurements
from harness.config.gates.registry import GateBase, Place, gate
from harness.records.run_record import GateResult


@gate(scope="variant", order=20,
      doc="every start-up check the config names (`startup_rpc_checks`) answered None on every worker, called "
          "through vLLM's dev-mode endpoint `POST /collective_rpc` once the server is ready (an error fails it; "
          "NOT RUN when the worker extension cannot be imported, and then no server starts)")
class StartupRpcCheck(GateBase):
    """The variant's start-up checks ``checks`` all hold: ``observed`` is the number that
    did not pass, ``limit`` 0."""

    kind: Literal["startup_rpc_check"] = "startup_rpc_check"
    op: Literal["=="] = "=="
    limit: float = 0
    #: the method names, in the config's order.
    checks: tuple[str, ...] = ()

    @classmethod
    def plan(cls, at: Place) -> StartupRpcCheck | None:
        """Every variant of a config that names checks; none otherwise (its record is unchanged)."""
        checks = at.config.startup_rpc_checks
        if not checks:
            return None
        return cls.at(at, checks=tuple(checks),
                      description=f"start-up checks {', '.join(checks)} hold on every worker")

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """Passes when every check answered None on every worker; fails when a check
        reported a message or could not be called (no dev-mode endpoint, an unknown method,
        a malformed answer) or when no answer is recorded for it (fail closed); NOT RUN,
        with the reason, when every check was not run (the worker extension cannot be
        imported by the servers' interpreter). A variant that did not run is NOT RUN
        before this judge (:func:`harness.analysis.gates.evaluate_gate`)."""
        outcomes = m.variant(self.variant).startup_checks or []
        by = {o.name: o for o in outcomes}
        absent = [n for n in self.checks if n not in by]
        if absent:
            return result(self, float(len(absent)), self.limit, False,
                          f"no answer recorded for {', '.join(absent)} (the checks were not called)")
        got = [by[n] for n in self.checks]
        if all(o.verdict == "not_run" for o in got):
            return result(self, None, self.limit, None, "; ".join(o.detail for o in got))
        bad = [o for o in got if o.verdict != "passed"]
        if bad:
            return result(self, float(len(bad)), self.limit, False, "; ".join(o.detail for o in bad))
        return result(self, 0.0, self.limit, True, "; ".join(o.detail for o in got))
