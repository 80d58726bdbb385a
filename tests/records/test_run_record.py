"""The run record on disk (:mod:`harness.records.run_record`): ``write_run`` /
``load_run`` round trips byte for byte, ``parse_run`` migrates schema 1 and refuses a
foreign, broken or impossible record naming the file and the first bad field, and
``run_folders`` lists each run folder once."""

from __future__ import annotations

import json

import pytest

from harness.records.run_record import RunRecordError, load_run, parse_run, record_json, run_folders, write_run
from tests.record_factory import complete_record, typed

from ..report.test_history import night
from .test_records_on_read import TASK, _edit


def test_record_round_trips_and_v1_migrates(tmp_path):
    rec = typed({"run_id": "r", "configs": [{"name": "c", "gates": [
        {"id": "c/x/g", "kind": "max_error_rate", "variant": "x", "passed": True, "detail": "d", "verdict": "PASS"}]}]})
    write_run(tmp_path, rec)
    back = load_run(tmp_path)
    assert back == rec and back.path == tmp_path and back.gates()[0].verdict == "PASS"
    on_disk = json.loads((tmp_path / "run.json").read_text())
    assert on_disk["schema_version"] == 2 and on_disk["configs"][0]["gates"][0]["verdict"] == "PASS"
    v1 = complete_record({"run_id": "old", "configs": []})
    v1["schema_version"] = 1
    assert parse_run(json.dumps(v1), "old/run.json").run_id == "old"


def test_foreign_or_broken_records_name_file_and_first_bad_field(tmp_path):
    good = complete_record({"run_id": "r", "configs": [{"name": "c"}]})
    bad = json.loads(json.dumps(good))
    bad["configs"][0]["variants"] = {"v": {"argv": [], "log": "l", "tasks": {"t": {"seconds": "soon"}}}}
    with pytest.raises(
        RunRecordError, match=r"x/run.json: not a valid run record: field 'configs.0.variants.v.tasks.t.samples'"
    ):
        parse_run(json.dumps(bad), "x/run.json")
    extra = json.loads(json.dumps(good))
    extra["configs"][0]["colour"] = "red"
    with pytest.raises(RunRecordError, match=r"field 'configs.0.colour': Extra inputs are not permitted"):
        parse_run(json.dumps(extra), "x/run.json")
    with pytest.raises(RunRecordError, match="schema_version 7"):
        parse_run(json.dumps(dict(good, schema_version=7)), "x/run.json")
    with pytest.raises(RunRecordError, match="no schema_version"):
        parse_run(json.dumps({"hello": 1}), "x/run.json")
    with pytest.raises(RunRecordError, match="cannot read run record"):
        load_run(tmp_path / "missing")


BAD = [
    ("accuracy", {"flexible-numeric": float("nan")}, "finite number"),
    ("accuracy", {"flexible-numeric": float("inf")}, "finite number"),
    ("error_rate", float("-inf"), "finite number"),
    ("error_count", 1e32, "tasks.gsm8k.error_count"),
    ("error_count", 101, "error_count 101 is larger than num_requests 100"),
    ("error_count", 10**32, f"error_count {10**32} is larger than num_requests 100"),
    ("error_rate", 1.5, "error_rate 1.5 is not a share in [0, 1]"),
    ("accuracy", {"flexible-numeric": -0.1}, "accuracy -0.1 is not a share"),
    ("scored", {"flexible-numeric": 101}, "scored['flexible-numeric'] 101 is larger than num_requests 100"),
    ("error_count", -1, "error_count -1 is negative"),
]


@pytest.mark.parametrize("field, value, said", BAD)
def test_load_run_refuses_an_impossible_task_naming_file_and_field(tmp_path, field, value, said):
    write_run(tmp_path / "r", night(0))
    _edit(tmp_path / "r" / "run.json", TASK, field, value)
    with pytest.raises(RunRecordError) as e:
        load_run(tmp_path / "r")
    msg = str(e.value)
    assert str(tmp_path / "r" / "run.json") in msg and "configs.0.variants.reference.tasks.gsm8k" in msg
    assert said in msg


def test_a_comparison_with_more_matches_than_compared_is_invalid(tmp_path):
    rec = night(0)
    write_run(tmp_path / "r", rec)
    _edit(tmp_path / "r" / "run.json", ("configs", 0, "comparisons", 0), "matched", 5)
    with pytest.raises(RunRecordError, match="matched 5 is larger than compared 0"):
        load_run(tmp_path / "r")


def test_valid_records_with_missing_values_write_and_read_back_byte_for_byte(tmp_path):
    rec = typed({"run_id": "r", "configs": [{"name": "c", "variants": {"reference": {"tasks": {"t": {
        "num_requests": 3, "error_count": 3, "error_rate": 1.0, "accuracy": {"flexible-numeric": None},
        "accuracy_ci": {"flexible-numeric": None}, "correct": {"flexible-numeric": 0},
        "scored": {"flexible-numeric": 0}, "invalid_rate": {"flexible-numeric": None}, "truncated_rate": None}}}}}]})
    path = write_run(tmp_path / "r", rec)
    first = path.read_bytes()
    again = load_run(tmp_path / "r")
    assert record_json(again) + "\n" == first.decode()
    write_run(tmp_path / "r", again)
    assert path.read_bytes() == first


def test_run_folders_lists_each_run_folder_once_by_its_resolved_path(tmp_path):
    for name in ("b", "a"):
        write_run(tmp_path / name, typed({"run_id": name}))
    (tmp_path / "notes").mkdir()  # no run.json: not a run folder
    (tmp_path / "0-link").symlink_to(tmp_path / "b")  # sorts first, so b is listed first
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "run.json").symlink_to(tmp_path / "a" / "run.json")  # a linked run.json: its target's folder
    (tmp_path / "z-link").symlink_to(tmp_path / "a")  # a link beside its target
    assert run_folders(tmp_path) == [(tmp_path / "b").resolve(), (tmp_path / "a").resolve()]
    assert run_folders(tmp_path / "missing") == []
