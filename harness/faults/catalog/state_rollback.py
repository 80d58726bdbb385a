"""``state-rollback``: after verification, the accepted-token counts the next step's Mamba
/ GDN metadata uses to pick the recurrent-state slot are off by one for every request
that verified drafts (docs/FAULTS.md bug 2, recurrent state rolled back by the wrong
amount)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.faults.fault import Expectation, Fault, plain
from harness.faults.log import logger, report_firing, should_report
from harness.faults.patching import patch_fault
from harness.faults.reports import count
from harness.faults.target import PatchTarget

UPDATE_AFTER_EXECUTE = PatchTarget(
    module="vllm.v1.worker.gpu_model_runner",
    qualname="GPUModelRunner._update_states_after_model_execute",
    params=("output_token_ids", "scheduler_output"),
    reads=(
        "speculative_config",
        "model_config.is_hybrid",
        "input_batch.req_ids",
        "input_batch.num_accepted_tokens_cpu_tensor",
        "num_accepted_tokens",
        "num_accepted_tokens_event",
        "use_async_scheduling",
        "cache_config.mamba_cache_mode",
    ),
)
#: Consumes the perturbed counts (not patched); checked so that a rename fails the tests.
GDN_BUILD = PatchTarget(
    module="vllm.v1.attention.backends.gdn_attn",
    qualname="GDNAttentionMetadataBuilder.build",
    params=("common_prefix_len", "common_attn_metadata", "num_accepted_tokens",
            "num_decode_draft_tokens_cpu"),
    patched=False,
)

#: ``rows(runner, req_ids) -> mask``: the rows a variant of the fault perturbs.
RowSelector = Callable[..., list[bool]]


def off_by_one_counts(counts: list[int], num_drafts: list[int]) -> list[int]:
    """The perturbed accepted counts: ``k -> k+1`` if ``k <= d`` else ``k-1``; d = 0 keeps k.

    ``k`` is the number of valid tokens of the step (accepted drafts + the bonus
    token, 1..d+1) and ``d`` the number of draft tokens the request verified. The
    result stays in 1..d+1, so the recurrent-state slot it selects (``k-1``) was
    written by this very step: the corruption is deterministic (no stale memory).
    """
    out = []
    for k, d in zip(counts, num_drafts):
        if d <= 0 or k <= 0:
            out.append(k)
        else:
            out.append(k + 1 if k <= d else k - 1)
    return out


def _overwrite_counts(runner: Any, wrong: list[int]) -> None:
    """Write ``wrong`` over the runner's host and device accepted counts (after the
    original's non-blocking device-to-host copy landed)."""
    import torch

    event = getattr(runner, "num_accepted_tokens_event", None)
    if event is not None:
        event.synchronize()  # the original's non-blocking D2H copy must land first
    n = len(wrong)
    host = runner.input_batch.num_accepted_tokens_cpu_tensor
    host[:n] = torch.tensor(wrong, dtype=host.dtype)
    dev = runner.num_accepted_tokens.gpu
    dev[:n] = host[:n].to(dev.device, non_blocking=False)


def state_rollback_wrapper(
    name: str, rows: RowSelector | None = None,
) -> Callable[[Callable[..., object]], Callable[..., object]]:
    """``make(original) -> wrapper`` for ``GPUModelRunner._update_states_after_model_execute``.

    The wrapper runs the original, then overwrites the accepted counts it recorded
    with :func:`off_by_one_counts` (see :func:`install`); with ``rows``
    (``rows(runner, req_ids) -> mask``) only the rows it selects.
    """

    def make(original: Callable[..., object]) -> Callable[..., object]:
        warned: list[bool] = []

        def _update_states_after_model_execute(
            self: Any, output_token_ids: Any, scheduler_output: Any, *a: object, **kw: object
        ) -> object:
            result = original(self, output_token_ids, scheduler_output, *a, **kw)
            if not self.speculative_config or not self.model_config.is_hybrid:
                return result
            count(f"{name}.executions")
            if self.use_async_scheduling and self.cache_config.mamba_cache_mode != "align":
                # the next step recomputes the counts on the device: nothing to perturb
                count(f"{name}.ineffective_async")
                if not warned:
                    warned.append(True)
                    logger.warning(
                        "evalrun fault %s: async scheduling without mamba align mode reads "
                        "accepted counts on the device; this fault has no effect in this "
                        "configuration (use async-stale-accepted)",
                        name,
                    )
                return result
            num_reqs = int(output_token_ids.size(0))
            if num_reqs == 0:
                return result
            counts = (output_token_ids != -1).sum(dim=1).tolist()
            spec = scheduler_output.scheduled_spec_decode_tokens or {}
            req_ids = self.input_batch.req_ids[:num_reqs]
            drafts = [len(spec.get(r, ())) for r in req_ids]
            wrong = off_by_one_counts(counts, drafts)
            if rows is not None:
                wrong = [w if keep else k for w, k, keep in zip(wrong, counts, rows(self, list(req_ids)))]
            if wrong == counts:
                return result
            count(f"{name}.changed", sum(w != k for w, k in zip(wrong, counts)))
            _overwrite_counts(self, wrong)
            if should_report(name):
                report_firing(
                    name,
                    "accepted counts per request %s -> %s (drafts %s)",
                    counts[:8], wrong[:8], drafts[:8],
                )
            return result

        return _update_states_after_model_execute

    return make


def install(fault: Fault) -> None:
    """Give the next step a stale accepted-token count (docs/FAULTS.md bug 2).

    Patches ``vllm.v1.worker.gpu_model_runner.GPUModelRunner._update_states_after_model_execute``
    (``CPUModelRunner`` inherits it). After verification, the original computes
    ``num_accepted_tokens = (output_token_ids != -1).sum(dim=1)`` per request and
    copies it to ``input_batch.num_accepted_tokens_cpu_tensor``. The next step's
    ``_prepare_inputs`` copies that host tensor into ``runner.num_accepted_tokens``,
    which ``_build_attention_metadata`` passes as ``num_accepted_tokens`` to the
    Mamba2 / GDN / short-conv metadata builders; the GDN kernel
    (``ops/cpu/gdn_attention.py: _spec_forward`` on CPU) resumes the recurrent state
    from slot ``num_accepted_tokens - 1`` and shifts the conv rolling buffer by the
    same offset.

    The wrapper runs the original, waits for its copy (``num_accepted_tokens_event``),
    then overwrites the host counts (and the device buffer) of every request that
    verified ``d >= 1`` draft tokens in this step with :func:`off_by_one_counts`:
    ``k -> k+1`` when a draft was rejected (the state keeps one rejected draft
    token), ``k -> k-1`` when all drafts were accepted (the state loses the last
    accepted token). Requests without drafts (prefill) keep their count. Token ids,
    the scheduler's ``num_computed_tokens`` and the acceptance metrics stay true; only
    the recurrent state is wrong, so later logits and greedy outputs diverge from
    the reference.

    Effective where the runner reads host counts (``needs_cpu_accepted_counts`` in
    ``_prepare_inputs``): synchronous scheduling (always on CPU, the platform forces
    it) or ``mamba_cache_mode == "align"``. With async scheduling and no align mode
    (GPU default for MTP) the next step recomputes the counts on device and this
    fault does nothing; it logs a warning then.
    """
    patch_fault(fault.name, UPDATE_AFTER_EXECUTE, state_rollback_wrapper(fault.name))


FAULT = Fault(
    name="state-rollback",
    summary="after verification, accepted-token counts used for the Mamba/GDN "
    "state slot are off by one for every request that verified drafts",
    mirrors="docs/FAULTS.md bug 2: stale accepted-token counts roll recurrent state "
    "back by the wrong amount",
    expected="greedy outputs diverge from the reference; accuracy down",
    targets=(UPDATE_AFTER_EXECUTE, GDN_BUILD),
    install=install,
    expectation=Expectation(must_fail=plain("min_output_match")),
)
