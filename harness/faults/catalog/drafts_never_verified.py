"""``drafts-never-verified``: on every sixth request the drafts are counted but never accepted
(vLLM #52107: drafts counted but never verified, 0% acceptance), while the other requests
accept as before. The patch of :mod:`harness.faults.catalog.late_acceptance_collapse` with
another choice of requests."""

from __future__ import annotations

from collections.abc import Callable

from harness.faults.catalog.late_acceptance_collapse import UPDATE_DRAFTS, spoil_wrapper
from harness.faults.fault import Expectation, Fault, plain
from harness.faults.patching import patch_fault

#: One request in this many (by arrival at the scheduler) never gets a draft accepted.
EVERY = 6


def every_nth() -> Callable[[object], bool]:
    """``chosen(request)``: True for the 6th, 12th, ... request id the scheduler shows it (a
    request keeps its verdict), so one request in :data:`EVERY` is hit; with 1/6 of the arith
    requests rejecting all (about 3 times their clean verify steps), the pooled mean acceptance
    length stays near 2.27, above the self-check's floor of 2.0."""
    seen: dict[str, bool] = {}

    def chosen(request: object) -> bool:
        rid = str(getattr(request, "request_id", ""))
        if rid not in seen:
            seen[rid] = (len(seen) + 1) % EVERY == 0
        return seen[rid]

    return chosen


def install(fault: Fault) -> None:
    """Reject every draft of one request in :data:`EVERY` (docs/FAULTS.md, "Faults only
    per-request analysis sees").

    Patches ``vllm.v1.core.sched.scheduler.Scheduler.update_draft_token_ids`` as
    ``late-acceptance-collapse`` does, for the requests :func:`every_nth` chooses: their drafts
    are moved by one id after the drafter proposed them, so the verifier rejects them all.
    Greedy outputs unchanged.
    """
    patch_fault(fault.name, UPDATE_DRAFTS, spoil_wrapper(fault.name, every_nth()))


FAULT = Fault(
    name="drafts-never-verified",
    summary="one request in six never gets a draft accepted, the others accept as before",
    mirrors="vLLM #52107: drafts counted but never verified (0% acceptance) on some requests",
    expected="greedy outputs identical; a share of requests with no accepted draft, pooled acceptance length "
             "above its floor",
    targets=(UPDATE_DRAFTS,),
    install=install,
    expectation=Expectation(must_fail=plain("zero_acceptance_share"),
                            must_pass=plain("min_acceptance_length", "min_output_match")),
    runner=None,
)
