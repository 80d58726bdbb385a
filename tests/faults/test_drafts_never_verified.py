"""The ``drafts-never-verified`` fault: the late-acceptance patch for one request in six, each
request keeping its verdict."""

from __future__ import annotations

import types

from harness.faults.catalog import late_acceptance_collapse
from harness.faults.catalog.drafts_never_verified import EVERY, FAULT, every_nth


def test_one_request_in_six_is_chosen_and_keeps_its_verdict():
    chosen = every_nth()
    reqs = [types.SimpleNamespace(request_id=f"r{i}") for i in range(3 * EVERY)]
    first = [chosen(r) for r in reqs]
    assert [r.request_id for r, c in zip(reqs, first) if c] == ["r5", "r11", "r17"]
    assert [chosen(r) for r in reqs] == first  # asked again (every step): the same answer
    assert FAULT.targets == late_acceptance_collapse.FAULT.targets
