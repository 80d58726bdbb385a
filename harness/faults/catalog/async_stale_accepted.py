"""``async-stale-accepted``: with async scheduling the accepted-token counts for the
recurrent-state update are taken by row index, not following the batch reorder
(docs/FAULTS.md bug 2 in vLLM's own async path)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from harness.faults.catalog.state_rollback import GDN_BUILD
from harness.faults.fault import Expectation, Fault, plain
from harness.faults.log import report_firing, should_report
from harness.faults.patching import patch_fault
from harness.faults.reports import count
from harness.faults.target import PatchTarget

if TYPE_CHECKING:
    import torch

BATCH_CHANGE = PatchTarget(
    module="vllm.v1.worker.gpu_model_runner",
    qualname="update_num_computed_tokens_for_batch_change",
    params=("num_computed_tokens", "num_accepted_tokens", "prev_positions",
            "valid_sampled_token_count", "prev_num_draft_tokens", "cpu_num_computed_tokens"),
)


def stale_accepted_counts(num_accepted_tokens: torch.Tensor, prev_positions: torch.Tensor,
                          valid_sampled_token_count: torch.Tensor,
                          prev_num_draft_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The accepted counts as taken without following the batch reorder.

    Args:
        num_accepted_tokens: int tensor ``[n]``, vLLM's (correct) counts per row of
            the current batch.
        prev_positions: int tensor ``[n]``, row of each current row in the previous
            step's batch (-1: not in it).
        valid_sampled_token_count: int tensor ``[>= n]``, valid tokens (1 + accepted
            drafts) per row of the previous step's batch.
        prev_num_draft_tokens: int tensor, drafts per previous row.

    Returns:
        ``(counts, reordered)``: for rows that verified drafts in the previous step
        (``prev_positions >= 0`` and drafts > 0) and moved (``prev_positions[i] !=
        i``), the count of previous row ``i`` (whatever request sat there; at least
        1; rows beyond the previous batch keep theirs), else the correct count;
        ``reordered`` the boolean mask of the rows given a stale count.
    """
    import torch

    n = int(prev_positions.shape[0])
    rows = torch.arange(n, device=prev_positions.device, dtype=prev_positions.dtype)
    gather = prev_positions.clamp(min=0).long()
    participating = (prev_positions >= 0) & (prev_num_draft_tokens[gather] > 0)
    # the previous step's buffer covers its own batch size; a row beyond it has no stale value
    m = min(n, int(valid_sampled_token_count.shape[0]))
    reordered = participating & (prev_positions != rows) & (rows < m)
    stale = num_accepted_tokens[:n].clone()
    stale[:m] = valid_sampled_token_count[:m].to(num_accepted_tokens.dtype).clamp(min=1)
    return torch.where(reordered, stale, num_accepted_tokens[:n]), reordered


def stale_accepted_wrapper(name: str) -> Callable[[Callable[..., object]], Callable[..., object]]:
    """``make(original) -> wrapper`` for ``update_num_computed_tokens_for_batch_change``
    as ``vllm.v1.worker.gpu_model_runner`` calls it.

    Runs the original (positions and ``num_computed_tokens`` stay right), then
    overwrites ``num_accepted_tokens`` with :func:`stale_accepted_counts`. Counters:
    ``<name>.executions``, ``<name>.reordered_rows`` (rows with drafts that moved),
    ``<name>.changed`` (rows whose count changed).
    """

    def make(original: Callable[..., object]) -> Callable[..., object]:
        def update_num_computed_tokens_for_batch_change(
            num_computed_tokens: torch.Tensor, num_accepted_tokens: torch.Tensor, prev_positions: torch.Tensor,
            valid_sampled_token_count: torch.Tensor, prev_num_draft_tokens: torch.Tensor,
            *a: object, **kw: object,
        ) -> object:
            result = original(num_computed_tokens, num_accepted_tokens, prev_positions,
                              valid_sampled_token_count, prev_num_draft_tokens, *a, **kw)
            count(f"{name}.executions")
            n = int(prev_positions.shape[0])
            before = num_accepted_tokens[:n].clone()
            wrong, reordered = stale_accepted_counts(num_accepted_tokens, prev_positions,
                                                     valid_sampled_token_count, prev_num_draft_tokens)
            num_accepted_tokens[:n].copy_(wrong)
            changed = int((wrong != before).sum())
            count(f"{name}.reordered_rows", int(reordered.sum()))
            count(f"{name}.changed", changed)
            if changed and should_report(name):
                report_firing(name, "accepted counts %s -> %s (previous rows %s)", before[:8].tolist(),
                              wrong[:8].tolist(), prev_positions[:8].tolist())
            return result

        return update_num_computed_tokens_for_batch_change

    return make


def install(fault: Fault) -> None:
    """Hand reordered rows the accepted counts of whatever request sat in their row
    before (docs/FAULTS.md bug 2, in vLLM's own async path).

    Patches ``vllm.v1.worker.gpu_model_runner.update_num_computed_tokens_for_batch_change``
    (defined in ``vllm/v1/spec_decode/utils.py``, looked up in the runner's module).
    Under async scheduling with speculative decoding and no Mamba "align" cache mode
    (the CPU case: prefix caching off), ``GPUModelRunner._prepare_inputs`` skips the
    host copy of the accepted counts ("the CPU copy races with the in-flight D2H
    copy and with input-batch row moves") and calls this function, which gathers
    the previous step's ``valid_sampled_token_count`` through ``prev_positions``
    (current row -> previous row, built by ``_compute_prev_positions`` from
    ``input_batch.prev_req_id_to_index``) into ``num_accepted_tokens``; the GDN /
    Mamba metadata builders then resume each request's recurrent state from slot
    ``num_accepted_tokens - 1``. That gather through ``prev_positions`` is the
    seed's fix 2; before it, counts were taken by row index while ``condense()`` /
    ``swap_states`` had moved requests, so reordered rows got another request's
    (stale) count. The wrapper (:func:`stale_accepted_wrapper`) re-injects that: for
    rows that verified drafts and moved, the count is read from the same row index
    of the previous step.

    On a CPU there is no device-to-host race to produce the stale value by timing;
    it is re-injected as the value the race produced. Under synchronous scheduling
    the runner never calls this function (the host counts are exact), so the fault
    does not execute: its counters stay 0.
    """
    patch_fault(fault.name, BATCH_CHANGE, stale_accepted_wrapper(fault.name))


FAULT = Fault(
    name="async-stale-accepted",
    summary="async scheduling: accepted-token counts for the recurrent-state update are "
    "taken by row index, not following the batch reorder",
    mirrors="docs/FAULTS.md bug 2 in vLLM's async path "
    "(update_num_computed_tokens_for_batch_change without the prev_positions gather)",
    expected="greedy outputs diverge from the reference where reordered rows carried drafts",
    targets=(BATCH_CHANGE, GDN_BUILD),
    install=install,
    expectation=Expectation(must_fail=plain("min_output_match"), sync_executes=False),
    scheduling="async",
)
