"""harness.report.diff_cli: ``evalrun diff`` refuses a side whose run did not finish and
names why; sides that finished are compared. Run records built by hand."""

from __future__ import annotations

import json

import pytest

from harness.cli.diff import cli_main
from harness.records.run_record import RunErrorRecord, write_run
from harness.report.diff_cli import UNFINISHED_STATUSES, unfinished_sides
from harness.report.diff_sides import SidePeek
from tests.record_factory import typed


def test_unfinished_sides_name_the_side_and_why():
    done, base = SidePeek("a", "completed"), SidePeek("base.json", None)
    assert unfinished_sides(done, base) == []
    [msg] = unfinished_sides(done, SidePeek("b", "interrupted"))
    assert msg == "run B (b) is interrupted: it did not run everything it planned"
    err = RunErrorRecord(type="KeyError", message="'acc'\nsecond line", stage="scoring", config="c", task="gsm8k")
    [msg] = unfinished_sides(SidePeek("a", "error", err), done)
    assert msg == ("run A (a) has status error: an unexpected KeyError ended it (stage scoring, config c, "
                   "task gsm8k): 'acc'; the traceback is in its run.json")
    assert set(UNFINISHED_STATUSES) == {"interrupted", "incomplete", "running", "error"}


def _run(tmp_path, name, status, passed):
    folder = tmp_path / name
    write_run(folder, typed({"run_id": name, "status": status, "passed": passed, "exit_code": 0 if passed else 2,
                             "configs": [{"name": "c", "gates": []}]}))
    return folder


@pytest.mark.parametrize("status", ["incomplete", "interrupted"])
def test_a_side_that_did_not_finish_is_refused(tmp_path, capsys, status):
    a, b = _run(tmp_path, "a", "completed", True), _run(tmp_path, "b", status, None)
    assert cli_main([str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert f"run B ({b}) is {status}" in err and "not compared" in err


def test_finished_sides_are_compared_to_the_output_file(tmp_path, capsys):
    a, b = _run(tmp_path, "a", "completed", True), _run(tmp_path, "b", "completed", True)
    out = tmp_path / "d" / "diff.json"
    assert cli_main([str(a), str(b), "--json", "--output", str(out)]) == 0
    assert f"written to {out}" in capsys.readouterr().err
    d = json.loads(out.read_text())
    assert (d["a"]["id"], d["b"]["id"], d["a"]["outcome"]) == ("a", "b", "passed")
    assert cli_main([str(a), str(tmp_path / "nowhere")]) == 2
    assert "no such run folder" in capsys.readouterr().err
