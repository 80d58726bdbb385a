"""Stored records are validated on read: non-finite numbers, counts above their totals, shares
outside [0, 1] and duplicated sample lines make a record invalid, naming the file and field,
in every reader (merge, diff, history, baselines); a symlinked run is counted once.

Every bad value below is written into the JSON by hand; the expected verdicts follow from
the definitions (a share lies in [0, 1], a count is at most its total).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.cli import main
from harness.records.baselines import BaselineError, load_baseline
from harness.records.run_record import write_run
from harness.records.samples import Sample, read_jsonl, write_jsonl
from harness.report.diff_sides import DiffError, load_side
from harness.report.history import history_frame, load_records
from tests.sample_factory import gsm8k_sample as s

from ..orchestration.test_merge import _shard_with_task
from ..report.test_history import NIGHTS, night
from .test_baselines import _complete, baseline_doc

TASK = ("configs", 0, "variants", "reference", "tasks", "gsm8k")


def _edit(path: Path, keys: tuple, field: str, value) -> None:
    """Set ``field`` of the object at ``keys`` in the JSON file (Python's json writes NaN / Infinity)."""
    doc = json.loads(path.read_text())
    obj = doc
    for k in keys:
        obj = obj[k]
    obj[field] = value
    path.write_text(json.dumps(doc))


def test_history_never_lists_a_non_finite_accuracy_and_counts_a_symlinked_run_once(tmp_path, capsys):
    for i in range(NIGHTS):
        write_run(tmp_path / f"night{i:02d}", night(i))
    _edit(tmp_path / "night03" / "run.json", TASK, "accuracy", {"flexible-numeric": float("nan")})
    _edit(tmp_path / "night04" / "run.json", TASK, "accuracy", {"flexible-numeric": float("inf")})
    os.symlink(tmp_path / "night05", tmp_path / "zz-link-to-night05")
    (tmp_path / "zz-run-json-link").mkdir()
    os.symlink(tmp_path / "night06" / "run.json", tmp_path / "zz-run-json-link" / "run.json")
    recs, problems = load_records(tmp_path)
    assert sorted(r.run_id for r in recs) == [f"night{i:02d}" for i in range(NIGHTS) if i not in (3, 4)]
    assert len(problems) == 2 and all("finite number" in p for p in problems)
    assert any("night03" in p for p in problems) and any("night04" in p for p in problems)
    df = history_frame(recs)
    assert len(df) == 2 * (NIGHTS - 2) and df.accuracy.notna().all()
    assert main(["history", str(tmp_path)]) == 2  # unreadable records fail the command
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| 2026-")]
    assert len(rows) == 2 * (NIGHTS - 2) and not any(" night03 " in r or " night04 " in r for r in rows)


def test_merge_refuses_a_shard_with_a_nan_accuracy(tmp_path, capsys):
    a = _shard_with_task(tmp_path / "a", 1)
    b = _shard_with_task(tmp_path / "b", 2)
    _edit(b / "run.json", ("configs", 0, "variants", "reference", "tasks", "t"), "accuracy",
          {"flexible-numeric": float("nan")})
    assert main(["merge", str(a), str(b), "--results-dir", str(tmp_path / "out"), "--run-id", "m"]) == 2
    err = capsys.readouterr().err
    assert str(b / "run.json") in err and "accuracy" in err and "finite number" in err
    assert not (tmp_path / "out" / "m").exists()


def test_merge_counts_a_symlinked_shard_once(tmp_path, capsys):
    a = _shard_with_task(tmp_path / "a", 1)
    os.symlink(a, tmp_path / "link")
    assert main(["merge", str(a), str(tmp_path / "link"), "--results-dir", str(tmp_path / "out")]) == 2
    assert "given twice" in capsys.readouterr().err


def test_diff_refuses_an_invalid_side(tmp_path):
    write_run(tmp_path / "r", night(0))
    _edit(tmp_path / "r" / "run.json", TASK, "error_count", 1000)
    with pytest.raises(DiffError, match="error_count 1000 is larger than num_requests 100"):
        load_side(tmp_path / "r")


def test_a_baseline_with_impossible_numbers_is_refused(tmp_path):
    doc = _complete(baseline_doc({"spec": [s("q/1", True), s("q/2", False)]}))
    p = tmp_path / "c.json"
    p.write_text(json.dumps(doc))
    assert load_baseline(p).variants["spec"].tasks["gsm8k"].scored == {"flexible-numeric": 2}
    for field, value, said in (("accuracy", {"flexible-numeric": float("nan")}, "finite number"),
                               ("correct", {"flexible-numeric": 3}, "correct['flexible-numeric'] 3 is larger"),
                               ("error_count", 7, "error_count 7 is larger than num_requests 2")):
        bad = json.loads(json.dumps(doc))
        bad["variants"]["spec"]["tasks"]["gsm8k"][field] = value
        p.write_text(json.dumps(bad))
        with pytest.raises(BaselineError) as e:
            load_baseline(p)
        assert str(p) in str(e.value) and said in str(e.value)


def _sample(qid: str, **kw) -> Sample:
    return Sample("c", "v", "t", qid, "0" * 16, "4", **kw)


def test_duplicated_sample_lines_and_non_finite_numbers_make_a_samples_file_invalid(tmp_path):
    p = tmp_path / "t.jsonl"
    write_jsonl(p, [_sample("t/0"), _sample("t/1")])
    lines = p.read_text().splitlines(keepends=True)
    assert len(read_jsonl(p)) == 2
    p.write_text(lines[0] + lines[1] + lines[0])
    with pytest.raises(ValueError, match=r"t\.jsonl:3: field 'question_id': 't/0' is also the sample of line 1"):
        read_jsonl(p)
    p.write_text(lines[0] + lines[1].replace('"latency_s": 0.0', '"latency_s": NaN'))
    with pytest.raises(ValueError, match=r"t\.jsonl:2: .*non-finite number NaN"):
        read_jsonl(p)
    p.write_text(lines[0].replace('"latency_s": 0.0', '"latency_s": 1e999'))
    with pytest.raises(ValueError, match="non-finite number 1e999"):
        read_jsonl(p)
