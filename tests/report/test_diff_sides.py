"""harness.report.diff_sides: a side of ``evalrun diff`` named by run id or path."""

from __future__ import annotations

import pytest

from harness.report.diff_sides import DiffError, resolve_side


def test_diff_accepts_run_ids(tmp_path):
    res = tmp_path / "results"
    (res / "20261130-1200-a").mkdir(parents=True)
    (res / "20261130-1200-a" / "run.json").write_text("{}")
    assert resolve_side("20261130-1200-a", res) == res / "20261130-1200-a"
    assert resolve_side(res / "20261130-1200-a") == res / "20261130-1200-a"
    with pytest.raises(DiffError, match="nearest run ids: 20261130-1200-a"):
        resolve_side("20261130-1200-b", res)

