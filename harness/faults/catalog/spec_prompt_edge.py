"""``spec-prompt-edge``: the ``state-rollback`` off-by-one, only for requests whose prompt
holds exactly ``num_speculative_tokens + 1`` tokens (docs/FAULTS.md, prompt-length edge)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from harness.faults.catalog.state_rollback import GDN_BUILD, UPDATE_AFTER_EXECUTE, state_rollback_wrapper
from harness.faults.fault import EVERY_KIND, Expectation, Fault, plain, shape
from harness.faults.patching import patch_fault


class _SpecConfig(Protocol):
    num_speculative_tokens: int


class _RequestState(Protocol):
    num_prompt_tokens: int


class EdgeRunner(Protocol):
    """What :func:`prompt_edge_rows` reads of vLLM's model runner."""

    speculative_config: _SpecConfig
    requests: Mapping[str, _RequestState]


def prompt_edge_rows(runner: EdgeRunner, req_ids: list[str]) -> list[bool]:
    """Which rows the ``spec-prompt-edge`` fault perturbs: requests whose prompt holds
    exactly ``num_speculative_tokens + 1`` tokens (``runner.requests[id].num_prompt_tokens``,
    vLLM's ``CachedRequestState``)."""
    edge = int(runner.speculative_config.num_speculative_tokens) + 1
    states = runner.requests
    return [r in states and int(states[r].num_prompt_tokens) == edge for r in req_ids]


def install(fault: Fault) -> None:
    """The ``state-rollback`` off-by-one, only for requests whose prompt holds exactly
    ``num_speculative_tokens + 1`` tokens (:func:`prompt_edge_rows`; docs/FAULTS.md,
    "prompt-length edge"): the shape of the public reports of garbage output at that
    one prompt length with MTP on hybrids.

    Patches ``GPUModelRunner._update_states_after_model_execute`` exactly as
    :func:`harness.faults.catalog.state_rollback.install` does, with the rows restricted
    to those requests (``runner.requests[req_id].num_prompt_tokens``); every other request
    keeps its true count, so a task whose prompts are all longer (GSM8K, the synthetic
    task) never triggers it (``spec-prompt-edge.changed`` stays 0: "not exercised")."""
    patch_fault(fault.name, UPDATE_AFTER_EXECUTE, state_rollback_wrapper(fault.name, prompt_edge_rows))


FAULT = Fault(
    name="spec-prompt-edge",
    summary="the state-rollback off-by-one, only for requests whose prompt is exactly "
    "num_speculative_tokens + 1 tokens long",
    mirrors="public reports of MTP on hybrid models giving garbage for prompts of exactly "
    "num_speculative_tokens + 1 tokens (docs/FAULTS.md, prompt-length edge)",
    expected="every gate of a task without such prompts passes; greedy outputs of the "
    "edge-length prompts diverge from the reference (the prompt-edges shape catches it)",
    targets=(UPDATE_AFTER_EXECUTE, GDN_BUILD),
    install=install,
    # invisible on the plain task, caught by the prompt-edges shape's output match
    expectation=Expectation(must_fail=shape("min_output_match"),
                            must_pass=plain(EVERY_KIND) + shape("shape_proven", "drafts_observed")),
)
