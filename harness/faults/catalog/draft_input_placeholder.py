"""``draft-input-placeholder``: the drafter is fed token id 0 instead of the last
committed token (docs/FAULTS.md bug 1, the -1 placeholder of an optimistic draft slot
clamped into the vocabulary; -1 itself would crash the embedding). The patch of
:mod:`harness.faults.catalog.draft_input` in its placeholder mode."""

from __future__ import annotations

from harness.faults.catalog.draft_input import PROPOSE, install
from harness.faults.fault import Expectation, Fault, plain

FAULT = Fault(
    name="draft-input-placeholder",
    summary="the MTP/EAGLE drafter is fed token id 0 instead of the last committed token",
    mirrors="docs/FAULTS.md bug 1: drafter fed the -1 placeholder of an optimistic draft "
    "slot (as id 0, the clamped placeholder)",
    expected="greedy outputs identical to the unfaulted run; acceptance length down",
    targets=(PROPOSE,),
    install=install,
    expectation=Expectation(must_fail=plain("min_acceptance_length"), must_pass=plain("min_output_match")),
)
