"""The ``draft-input-placeholder`` fault: the draft-input patch in its placeholder mode
(its wrapper is tested with ``draft-input``'s in test_draft_input.py)."""

from __future__ import annotations

from harness.faults.catalog import draft_input
from harness.faults.catalog.draft_input_placeholder import FAULT


def test_placeholder_fault_shares_the_draft_input_patch():
    assert FAULT.name.endswith("placeholder")  # the wrapper's mode comes from the name
    assert FAULT.targets == draft_input.FAULT.targets and FAULT.install is draft_input.install
    assert FAULT.expectation == draft_input.FAULT.expectation
