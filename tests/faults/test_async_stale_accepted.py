"""The ``async-stale-accepted`` fault: stale counts by row index, its wrapper on vLLM's own function."""

from __future__ import annotations

import pytest

import harness.faults.plugin as faults
from harness.faults.catalog.async_stale_accepted import stale_accepted_counts, stale_accepted_wrapper
from tests.faults.fakes import needs_torch, needs_vllm

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)


@needs_torch
def test_stale_accepted_counts_follow_row_index_not_reorder():
    import torch

    # previous batch rows: 0 -> req A (valid 3), 1 -> req B (valid 1), 2 -> req C (valid 2)
    valid = torch.tensor([3, 1, 2, 0], dtype=torch.int32)
    prev_drafts = torch.tensor([2, 2, 2, 0], dtype=torch.int32)
    # current batch: row 0 = C (was row 2), row 1 = B (stayed), row 2 = new request
    prev_pos = torch.tensor([2, 1, -1], dtype=torch.int32)
    correct = torch.tensor([2, 1, 1], dtype=torch.int32)   # vLLM's gather through prev_positions
    wrong, reordered = stale_accepted_counts(correct, prev_pos, valid, prev_drafts)
    # row 0 moved and verified drafts: takes previous row 0's count (A's 3);
    # row 1 did not move; row 2 is new (no drafts verified): both keep theirs
    assert wrong.tolist() == [3, 1, 1] and reordered.tolist() == [True, False, False]
    # a stale count of 0 (a discarded row) is raised to 1, a valid state slot
    wrong, _ = stale_accepted_counts(correct, torch.tensor([1, 3, -1], dtype=torch.int32),
                                           torch.tensor([3, 1, 2, 0], dtype=torch.int32), prev_drafts + 1)
    assert wrong.tolist() == [3, 1, 1]


@needs_vllm
def test_stale_accepted_wrapper_on_vllms_own_function():
    import torch
    from vllm.v1.spec_decode.utils import update_num_computed_tokens_for_batch_change as orig

    wrapped = stale_accepted_wrapper("async-stale-accepted")(orig)
    def run(fn):
        nct = torch.tensor([10, 20, 30], dtype=torch.int32)
        acc = torch.ones(3, dtype=torch.int32)
        fn(nct, acc, torch.tensor([2, 1, -1], dtype=torch.int32), torch.tensor([3, 1, 2, 0], dtype=torch.int32),
           torch.tensor([2, 2, 2, 0], dtype=torch.int32), torch.tensor([7, 8, 9], dtype=torch.int32))
        return nct.tolist(), acc.tolist()
    (nct0, acc0), (nct1, acc1) = run(orig), run(wrapped)
    # vLLM: row 0 (was row 2): computed 30 + 2 valid, accepted 2; row 1: 20 + 1; row 2 new: CPU value 9
    assert (nct0, acc0) == ([32, 21, 9], [2, 1, 1])
    assert nct1 == nct0 and acc1 == [3, 1, 1]   # positions stay right, only the moved row's count is stale
    c = faults.counts()
    assert c["async-stale-accepted.executions"] == 1 and c["async-stale-accepted.changed"] == 1
    assert c["async-stale-accepted.reordered_rows"] == 1



@needs_torch
def test_stale_accepted_counts_when_the_batch_grew():
    import torch

    # previous batch had 2 rows; now 3 rows, row 2 moved in from previous row 0
    valid = torch.tensor([3, 2], dtype=torch.int32)
    prev_pos = torch.tensor([1, -1, 0], dtype=torch.int32)
    correct = torch.tensor([2, 1, 3], dtype=torch.int32)
    wrong, reordered = stale_accepted_counts(correct, prev_pos, valid, torch.tensor([2, 2], dtype=torch.int32))
    # row 0 (was row 1) takes previous row 0's 3; row 2 lies beyond the old batch: no stale value
    assert wrong.tolist() == [3, 1, 3] and reordered.tolist() == [True, False, False]
