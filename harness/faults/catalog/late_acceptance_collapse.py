"""``late-acceptance-collapse``: every draft is rejected once a request's output reaches a
position (vLLM #58080: an MTP drafter ignoring ``--hf-overrides`` killed acceptance past the
draft's reach; SGLang #30763: acceptance decaying along the output). Only per-request
analysis sees where; the pooled acceptance length stays above its floor."""

from __future__ import annotations

from collections.abc import Callable

from harness.faults.fault import Expectation, Fault, plain
from harness.faults.log import report_firing, should_report
from harness.faults.patching import patch_fault
from harness.faults.reports import count
from harness.faults.target import PatchTarget

UPDATE_DRAFTS = PatchTarget(
    module="vllm.v1.core.sched.scheduler",
    qualname="Scheduler.update_draft_token_ids",
    params=("draft_token_ids",),
    reads=("requests",),
)
#: Output position (0-based, generated tokens so far) from which every draft is spoiled. In
#: configs/selfcheck-per-request-cpu.yaml (arith cut at 26 tokens) a clean request has 7 verify
#: steps accepting both drafts before it and 4 accepting none after it: pooled mean acceptance
#: length 1 + 14/11 = 2.27, above the floor 2.0; the late half of the steps accepts 4 of 12.
COLLAPSE_AT = 22


def spoiled(ids: list[int]) -> list[int]:
    """Draft token ids the verifier rejects: each id moved by one inside the vocabulary (the
    target's greedy token equals the new id only when the drafter was wrong by exactly that)."""
    return [t - 1 if t > 0 else 1 for t in ids]


def spoil_wrapper(name: str,
                  chosen: Callable[[object], bool]) -> Callable[[Callable[..., object]], Callable[..., object]]:
    """``make(original) -> wrapper`` for ``Scheduler.update_draft_token_ids``: after the original
    stores each request's drafts (``request.spec_token_ids``), a request for which
    ``chosen(request)`` holds gets :func:`spoiled` drafts instead. The scheduler verifies exactly
    those (``scheduled_spec_decode_tokens`` under synchronous scheduling), so greedy outputs stay
    the target's own while their drafts are rejected; counts ``<name>.executions`` /
    ``<name>.changed`` (requests whose drafts were spoiled)."""

    def make(original: Callable[..., object]) -> Callable[..., object]:
        def update_draft_token_ids(self: object, draft_token_ids: object, *args: object, **kwargs: object) -> object:
            out = original(self, draft_token_ids, *args, **kwargs)
            requests: dict = getattr(self, "requests")  # noqa: B009 - a declared attribute of the target
            n = 0
            for req_id in getattr(draft_token_ids, "req_ids", ()):
                request = requests.get(req_id)
                ids = getattr(request, "spec_token_ids", None)
                if request is None or not ids or not chosen(request):
                    continue
                request.spec_token_ids = spoiled(list(ids))
                n += 1
            count(f"{name}.executions")
            count(f"{name}.changed", n)
            if n and should_report(name):
                report_firing(name, "drafts of %d requests spoiled", n)
            return out

        return update_draft_token_ids

    return make


def past_position(request: object) -> bool:
    """The request has generated at least :data:`COLLAPSE_AT` tokens."""
    return int(getattr(request, "num_output_tokens", 0)) >= COLLAPSE_AT


def install(fault: Fault) -> None:
    """Reject every draft once a request's output is :data:`COLLAPSE_AT` tokens long
    (docs/FAULTS.md, "Faults only per-request analysis sees").

    Patches ``vllm.v1.core.sched.scheduler.Scheduler.update_draft_token_ids``: after it stores
    the drafter's tokens on each request, a request with ``num_output_tokens >= COLLAPSE_AT``
    gets each draft id moved by one (:func:`spoiled`). Under synchronous scheduling those are
    the tokens the next step verifies, so the verifier rejects them and emits its own token:
    greedy outputs unchanged, acceptance zero from that output position on.
    """
    patch_fault(fault.name, UPDATE_DRAFTS, spoil_wrapper(fault.name, past_position))


FAULT = Fault(
    name="late-acceptance-collapse",
    summary="every draft rejected once a request's output reaches a position",
    mirrors="vLLM #58080 / SGLang #30763: acceptance dying past a position of the output",
    expected="greedy outputs identical; acceptance zero late in each output, pooled acceptance length above its floor",
    targets=(UPDATE_DRAFTS,),
    install=install,
    expectation=Expectation(must_fail=plain("late_acceptance_drop"),
                            must_pass=plain("min_acceptance_length", "min_output_match", "zero_acceptance_share")),
    runner=None,
)
