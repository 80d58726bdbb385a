"""``draft-input``: the MTP/EAGLE drafter is fed the committed token before the last one
(docs/FAULTS.md bug 1, the drafter fed the wrong token)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING

from harness.faults.fault import Expectation, Fault, plain
from harness.faults.log import report_firing, should_report
from harness.faults.patching import patch_fault
from harness.faults.reports import count
from harness.faults.target import PatchTarget

if TYPE_CHECKING:
    import torch

PROPOSE = PatchTarget(
    module="vllm.v1.spec_decode.llm_base_proposer",
    qualname="SpecDecodeBaseProposer.propose",
    params=(
        "num_speculative_tokens",
        "target_token_ids",
        "target_positions",
        "target_hidden_states",
        "next_token_ids",
        "token_indices_to_sample",
        "common_attn_metadata",
    ),
)


def wrong_next_token_ids(bound: inspect.BoundArguments, mode: str) -> torch.Tensor:
    """The replacement for ``next_token_ids`` in ``SpecDecodeBaseProposer.propose``.

    ``propose`` builds the drafter's input ids by shifting ``target_token_ids`` left
    by one and writing ``next_token_ids[i]`` (the last committed token of request
    ``i``: the bonus token, or the last accepted draft) at
    ``token_indices_to_sample[i]`` (``set_inputs_first_pass``), the position whose
    target hidden state is paired with it. The token *at* that position in
    ``target_token_ids`` is the committed token just before it. ``prev`` returns
    exactly that token, ``placeholder`` returns id 0.
    """
    import torch

    args = bound.arguments
    next_ids: torch.Tensor = args["next_token_ids"]
    if mode == "placeholder":
        return torch.zeros_like(next_ids)
    target_ids: torch.Tensor = args["target_token_ids"]
    idx = args["token_indices_to_sample"]
    if idx is None:
        # Unpadded path: the last token of each (rejection-trimmed) query.
        idx = args["common_attn_metadata"].query_start_loc[1:] - 1
        rejected = args.get("num_rejected_tokens_gpu")
        if rejected is not None:
            idx = idx - rejected
    n = min(int(next_ids.shape[0]), int(idx.shape[0]))
    idx = idx[:n].long().clamp(0, max(int(target_ids.shape[0]) - 1, 0))
    wrong = next_ids.clone()
    wrong[:n] = target_ids[idx].to(next_ids.dtype)
    return wrong


def draft_input_wrapper(name: str) -> Callable[[Callable[..., object]], Callable[..., object]]:
    """``make(original) -> wrapper`` for ``SpecDecodeBaseProposer.propose`` (fault ``name``).

    The wrapper binds the call to the original's signature, replaces
    ``next_token_ids`` by :func:`wrong_next_token_ids` (id 0 for a name ending in
    ``placeholder``) and calls the original.
    """
    mode = "placeholder" if name.endswith("placeholder") else "prev"

    def make(original: Callable[..., object]) -> Callable[..., object]:
        sig = inspect.signature(original)

        def propose(*args: object, **kwargs: object) -> object:
            bound = sig.bind(*args, **kwargs)
            before = bound.arguments["next_token_ids"]
            after = wrong_next_token_ids(bound, mode)
            bound.arguments["next_token_ids"] = after
            count(f"{name}.executions")
            count(f"{name}.changed", int((after != before).sum()))
            if should_report(name):
                report_firing(
                    name,
                    "drafter input (last committed token per request) %s -> %s",
                    before[:8].tolist(), after[:8].tolist(),
                )
            return original(*bound.args, **bound.kwargs)

        return propose

    return make


def install(fault: Fault) -> None:
    """Feed the drafter a wrong "last committed token" (docs/FAULTS.md bug 1).

    Patches ``vllm.v1.spec_decode.llm_base_proposer.SpecDecodeBaseProposer.propose``
    (inherited unchanged by ``EagleProposer``, which the model runner uses for
    ``method: mtp``, ``eagle`` and ``eagle3``; also ``DraftModelProposer``). The
    wrapper replaces the ``next_token_ids`` argument before the original runs:

    * ``draft-input``: ``next_token_ids[i] := target_token_ids[token_indices_to_sample[i]]``,
      the committed token before the last one (when ``token_indices_to_sample`` is
      None, the unpadded path, the index is ``query_start_loc[1:] - 1``, minus
      ``num_rejected_tokens_gpu`` when given). The drafter then embeds token ``t-1``
      where the target's hidden state at ``t-1`` expects token ``t``.
    * ``draft-input-placeholder``: ``next_token_ids[i] := 0``.

    Only the drafter's own input buffer sees the wrong token: the runner keeps its
    ``next_token_ids`` (``_copy_valid_sampled_token_count`` stores them for async
    scheduling before ``propose`` runs), the target model's inputs, the KV cache of
    the target and the rejection sampler are untouched. So the verifier still decides
    every token: greedy outputs are identical to the unfaulted run, while the draft
    tokens (and so the acceptance length) are worse. The CPU model runner takes the
    padded path (``disable_padded_drafter_batch`` is False by default):
    ``prepare_next_token_ids_padded`` -> ``prepare_inputs_padded`` -> ``propose``
    with ``token_indices_to_sample`` set, before ``_bookkeeping_sync``.
    """
    patch_fault(fault.name, PROPOSE, draft_input_wrapper(fault.name))


FAULT = Fault(
    name="draft-input",
    summary="the MTP/EAGLE drafter is fed the committed token before the last one",
    mirrors="docs/FAULTS.md bug 1: drafter fed the wrong token (wrong index into the "
    "sequence when looking up the last committed token)",
    expected="greedy outputs identical to the unfaulted run; acceptance length down",
    targets=(PROPOSE,),
    install=install,
    expectation=Expectation(must_fail=plain("min_acceptance_length"), must_pass=plain("min_output_match")),
)
