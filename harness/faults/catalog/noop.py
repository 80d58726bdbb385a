"""``noop``: patches nothing; the ``active`` log line alone proves the plugin ran (tests
the plumbing: entry point, environment propagation to every process, log capture)."""

from __future__ import annotations

from harness.faults.fault import Expectation, Fault, plain


def install(fault: Fault) -> None:
    """Patch nothing: the ``active`` log line alone proves the plugin ran."""


FAULT = Fault(
    name="noop",
    summary="patches nothing; logs that the plugin is active (plumbing test)",
    mirrors="none",
    expected="identical to the unfaulted run",
    targets=(),
    install=install,
    expectation=Expectation(must_pass=plain("min_output_match", "min_acceptance_length")),
    runner=None,
)
