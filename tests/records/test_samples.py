"""harness.records.samples: samples written as JSON lines read back equal; a foreign line is
refused naming the file and line."""

from __future__ import annotations

import pytest

from harness.records.samples import read_jsonl, write_jsonl
from tests.sample_factory import constructed_sample as s


def test_samples_jsonl_roundtrip(tmp_path):
    xs = [s("q1", True), s("q2", None, error="e")]
    write_jsonl(tmp_path / "a.jsonl", xs)
    assert read_jsonl(tmp_path / "a.jsonl") == xs
    (tmp_path / "bad.jsonl").write_text('{"nope": 1}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        read_jsonl(tmp_path / "bad.jsonl")
