"""The one reader of the files evalrun reads back (harness/records/files.py): regular
files only (a named pipe never blocks), bounded, every refusal naming the file; names and
relative paths from a record kept inside their folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.records.files import (
    UnreadableFile,
    UnsafeName,
    check_record_name,
    check_relative,
    no_symlink_below,
    read_bytes,
    read_text,
)
from harness.records.run_record import RunRecordError, load_run


def test_a_regular_file_is_read(tmp_path: Path):
    (tmp_path / "f").write_bytes(b"abc")
    assert read_bytes(tmp_path / "f") == b"abc"
    assert read_text(tmp_path / "f") == "abc"


@pytest.mark.parametrize("kind", ["fifo", "dir", "missing", "huge", "binary"])
def test_anything_else_is_refused_naming_the_file(tmp_path: Path, kind: str):
    p = tmp_path / "run.json"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "dir":
        p.mkdir()
    elif kind == "huge":
        with p.open("wb") as f:
            f.truncate(2049)
    elif kind == "binary":
        p.write_bytes(b"\xff\xfe")
    with pytest.raises(UnreadableFile) as e:
        read_text(p, limit=2048, what="run record")
    assert str(p) in str(e.value) and "run record" in str(e.value)
    if kind == "fifo":
        assert "named pipe" in str(e.value)
    with pytest.raises(RunRecordError, match="run.json"):
        load_run(tmp_path if kind != "dir" else p.parent)


def test_a_symlink_to_a_regular_file_is_followed_for_reading(tmp_path: Path):
    (tmp_path / "target").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    assert read_text(tmp_path / "link") == "x"


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".", "", "/abs", "a..b", "-x", "x" * 101, 3, None])
def test_unsafe_names_from_a_record_are_refused(name):
    with pytest.raises(UnsafeName, match="run.json"):
        check_record_name(name, "run.json", "variant")


@pytest.mark.parametrize("rel", ["../x.jsonl", "/etc/passwd", "a/../../b", "", "a\\b"])
def test_relative_paths_that_leave_the_folder_are_refused(rel):
    with pytest.raises(UnsafeName):
        check_relative(rel, "run.json", "samples")
    assert check_relative("samples/c/v/t.jsonl", "run.json", "samples") == "samples/c/v/t.jsonl"


def test_no_symlink_below_names_the_link(tmp_path: Path):
    (tmp_path / "out").mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "attempts").symlink_to(tmp_path / "out")
    no_symlink_below(run, run / "samples" / "x")  # nothing there yet: fine
    with pytest.raises(UnreadableFile, match="attempts"):
        no_symlink_below(run, run / "attempts" / "1" / "run.json")
    with pytest.raises(UnreadableFile, match="not inside"):
        no_symlink_below(run, tmp_path / "out")


def test_a_named_pipe_as_a_pid_file_is_invalid_not_a_hang(tmp_path: Path):
    from harness.engine.leftovers import find_leftover_servers  # noqa: PLC0415 - the pid files' one reader

    (tmp_path / "r" / "logs" / "c").mkdir(parents=True)
    os.mkfifo(tmp_path / "r" / "logs" / "c" / "v.pid.json")
    found = find_leftover_servers(tmp_path)
    assert [f.verdict for f in found] == ["invalid"] and "named pipe" in found[0].reason
