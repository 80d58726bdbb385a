"""``async-placeholder-token``: with async scheduling the drafter's backup token is looked
up at the optimistic (placeholder-inflated) sequence length instead of the last committed
token (docs/FAULTS.md bug 1 in vLLM's own async path)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

from harness.faults.fault import Expectation, Fault, plain
from harness.faults.log import report_firing, should_report
from harness.faults.patching import patch_fault
from harness.faults.reports import count
from harness.faults.state import STATE
from harness.faults.target import PatchTarget

if TYPE_CHECKING:
    import numpy as np
    import torch

PREPARE_PADDED = PatchTarget(
    module="vllm.v1.spec_decode.llm_base_proposer",
    qualname="SpecDecodeBaseProposer.prepare_next_token_ids_padded",
    params=("sampled_token_ids", "requests", "gpu_input_batch", "discard_request_mask"),
    reads=("backup_next_token_ids",),
)
#: Holds the optimistic sequence lengths the pre-fix lookup used (not patched).
OPTIMISTIC_SEQ_LENS = PatchTarget(
    module="vllm.v1.worker.gpu_model_runner",
    qualname="GPUModelRunner._prepare_inputs",
    params=("scheduler_output",),
    reads=("optimistic_seq_lens_cpu", "use_async_scheduling"),
    patched=False,
)


class _OptimisticRunner(Protocol):
    optimistic_seq_lens_cpu: torch.Tensor


class InflatedLengths:
    """A view of an ``InputBatch`` whose ``num_tokens_no_spec`` is the optimistic
    sequence length plus one, so that vLLM's own lookup
    ``get_token_id(num_tokens_no_spec[i] - 1)`` reads index ``seq_lens_cpu[i]``: the
    lookup before the fix. Every other attribute is the real batch's."""

    def __init__(self, batch: object, seq_lens: np.ndarray) -> None:
        self._batch = batch
        self.num_tokens_no_spec = seq_lens + 1

    def __getattr__(self, name: str) -> object:
        return getattr(self._batch, name)


def placeholder_token_wrapper(name: str) -> Callable[[Callable[..., object]], Callable[..., object]]:
    """``make(original) -> wrapper`` for ``SpecDecodeBaseProposer.prepare_next_token_ids_padded``.

    The wrapper runs the original twice on the same inputs: once as vLLM does
    (the fixed lookup), once with the backup-token index taken from the
    runner's optimistic sequence length (:class:`InflatedLengths`). It returns the
    second result, where in addition every row whose looked-up token is the
    placeholder and whose request was in the previous async step's batch
    (``input_batch.prev_req_id_to_index``, set only under async scheduling: its
    last committed token exists only on the device) gets the placeholder as the
    drafter's input, as in the seed's engine; placeholder ids (-1) are clamped to 0. Counters:
    ``<name>.executions`` (calls), ``<name>.backup_placeholder`` (rows whose backup
    token became the placeholder), ``<name>.changed`` (rows whose next token, the
    drafter's input, differs from the fixed run's).
    """

    def make(original: Callable[..., object]) -> Callable[..., object]:
        def prepare_next_token_ids_padded(
            self: Any, sampled_token_ids: object, requests: object, gpu_input_batch: Any,
            discard_request_mask: object, *a: object, **kw: object,
        ) -> object:
            runner = STATE.current_runner()
            fixed: Any = original(self, sampled_token_ids, requests, gpu_input_batch, discard_request_mask, *a, **kw)
            if runner is None:
                return fixed
            count(f"{name}.executions")
            n = int(gpu_input_batch.num_reqs)
            fixed_next = fixed[0].clone()
            fixed_backup = self.backup_next_token_ids.np[:n].copy()
            optimistic = cast(_OptimisticRunner, runner).optimistic_seq_lens_cpu
            view = InflatedLengths(gpu_input_batch, optimistic[:n].numpy().astype("int64"))
            again = original(self, sampled_token_ids, requests, view, discard_request_mask, *a, **kw)
            next_ids, valid = cast(tuple[Any, Any], again)
            backup = self.backup_next_token_ids.np[:n]
            count(f"{name}.backup_placeholder", int(((backup == -1) & (fixed_backup != -1)).sum()))
            # rows carried over from the previous async step: their last committed token
            # exists only on the device, the host-side lookup returns the placeholder
            prev = getattr(gpu_input_batch, "prev_req_id_to_index", None) or {}
            ids = gpu_input_batch.req_ids
            fed = [i for i in range(n) if backup[i] == -1 and ids[i] in prev]
            if fed:
                next_ids = next_ids.clone()
                next_ids[fed] = -1
            next_ids = next_ids.clamp(min=0)  # -1 would fail the CPU embedding lookup
            changed = int((next_ids[:n] != fixed_next[:n]).sum())
            count(f"{name}.changed", changed)
            if changed and should_report(name):
                report_firing(name, "drafter input %s -> %s (backup %s -> %s)", fixed_next[:8].tolist(),
                              next_ids[:8].tolist(), fixed_backup[:8].tolist(), backup[:8].tolist())
            return next_ids, valid

        return prepare_next_token_ids_padded

    return make


def install(fault: Fault) -> None:
    """Take the backup token at the optimistic sequence length (docs/FAULTS.md
    bug 1, in vLLM's own async path).

    Patches ``vllm.v1.spec_decode.llm_base_proposer.SpecDecodeBaseProposer.prepare_next_token_ids_padded``
    (inherited by ``EagleProposer``, which serves ``method: mtp``), the function the
    seed's fix 1 changed (vLLM's fix "Fix backup token index in async spec decode
    (fixes Nemotron BF16 accuracy)"). vLLM computes, per request, the
    "backup" next token (the drafter's input token when the step sampled none for
    the request, e.g. a chunk of a prompt) as
    ``requests[req_id].get_token_id(gpu_input_batch.num_tokens_no_spec[i] - 1)``,
    the last committed token. Before the fix it was
    ``get_token_id(common_attn_metadata.seq_lens_cpu[i])``: under async scheduling
    that length is optimistic (it counts the draft slots of the step before as if
    accepted, ``GPUModelRunner._prepare_inputs``: ``optimistic_seq_lens_cpu =
    num_computed_tokens_cpu + num_scheduled_tokens``), so the index lands on a
    placeholder slot and ``get_token_id`` returns -1, which was fed to the drafter.
    The wrapper (:func:`placeholder_token_wrapper`) reproduces exactly that lookup
    with the runner's ``optimistic_seq_lens_cpu``. In vLLM 0.32 the kernel
    ``_eagle_prepare_next_token_padded`` consults the backup only for discarded
    rows (partial prefills), whose length carries no draft slots, so the lookup
    alone never reaches the drafter (measured: docs/FAULTS.md, first self-check
    run). The wrapper therefore also feeds the looked-up placeholder to the drafter
    for the rows where the seed's engine did: rows carried over from the previous
    async step (``input_batch.prev_req_id_to_index``), whose last committed token
    the host does not have. The placeholder -1 is clamped to token id 0: on the
    CPU an embedding lookup of -1 raises instead of reading garbage.

    In the async path the returned next tokens are not only the drafter's input:
    ``GPUModelRunner._copy_valid_sampled_token_count`` stores them as
    ``input_batch.prev_sampled_token_ids``, the next step's input of the target
    model. So the placeholder also reaches the target, and greedy outputs diverge
    (the seed saw GSM8K fall from 0.93 to 0.74), besides the acceptance collapse.

    Under synchronous scheduling the same lookup runs (the function is shared) but
    ``prev_req_id_to_index`` is never set (``_bookkeeping_sync`` sets it only on
    its async branch): the drafter's input changes only where vLLM itself uses the
    backup, a partial-prefill row whose prompt was chunked (the pre-fix index there
    is the next prompt token instead of the last one; rare with these prompts).
    """
    patch_fault(fault.name, PREPARE_PADDED, placeholder_token_wrapper(fault.name))


FAULT = Fault(
    name="async-placeholder-token",
    summary="async scheduling: the drafter's backup token is looked up at the optimistic "
    "(placeholder-inflated) sequence length instead of the last committed token",
    mirrors="docs/FAULTS.md bug 1 in vLLM's async path "
    "(SpecDecodeBaseProposer.prepare_next_token_ids_padded before vLLM's backup-token index fix)",
    expected="acceptance length down; greedy outputs diverge and accuracy falls (in the async "
    "path the same next token is the target's next input: _copy_valid_sampled_token_count)",
    targets=(PREPARE_PADDED, OPTIMISTIC_SEQ_LENS),
    install=install,
    # in the async path the same next token is also the target's next input
    # (GPUModelRunner._copy_valid_sampled_token_count -> input_batch.prev_sampled_token_ids),
    # so outputs diverge too (the seed: GSM8K 0.93 -> 0.74)
    expectation=Expectation(
        must_fail=plain("min_acceptance_length", "max_acceptance_length_drop", "min_output_match"),
        sync_executes=True,
    ),
    scheduling="async",
)
