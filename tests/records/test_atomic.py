"""The atomic writer and the results folder's check (harness/records/atomic.py): a failed write
leaves the old file and no temporary one, a full disk mid-run keeps the last good record,
and a folder that cannot be created or has too little free space stops the run before any
server. The runs use the FAKE server (tests/fake_vllm.py): only the disk is under test."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.records import atomic
from harness.records.run_record import load_run
from tests.fake_run import FAKE, config, run_cli

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)


def test_full_disk_mid_run_keeps_the_good_record_and_no_partial_file(tmp_path, monkeypatch, capsys):
    real = atomic.write_atomic
    runs = {"n": 0, "measured": False}

    def full_disk_after_first_record(path, data, encoding="utf-8"):
        # the disk fills right after the first record that holds the task's measurement
        # (the record is also written at the start, status running, with no config yet)
        if Path(path).name != "run.json":
            return real(path, data, encoding)
        runs["n"] += 1
        if not runs["measured"]:
            doc = json.loads(data)
            runs["measured"] = any("gsm8k" in v.get("tasks", {})
                                   for c in doc["configs"] for v in c["variants"].values())
            return real(path, data, encoding)

        def no_space(fd):
            raise OSError(errno.ENOSPC, "No space left on device")

        with monkeypatch.context() as m:
            m.setattr(os, "fsync", no_space)
            return real(path, data, encoding)

    monkeypatch.setattr(atomic, "write_atomic", full_disk_after_first_record)
    code = run_cli(tmp_path, config(tmp_path))
    run_dir = tmp_path / "results" / "r"
    assert code == 2 and runs["n"] >= 4                   # start, the task, then failing: _finish, the error record
    err = capsys.readouterr().err
    assert str(run_dir) in err and "No space left on device" in err and "Traceback" not in err
    rec = load_run(run_dir)                               # the first, good record is untouched
    measured = [v for v in rec.configs[0].variants.values() if "gsm8k" in v.tasks]
    assert rec.status == "running" and measured and measured[0].tasks["gsm8k"].num_requests == 6
    assert not [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")]


def test_write_atomic_failure_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "run.json"
    atomic.write_atomic(target, '{"good": true}\n')
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~atomic._umask())

    def refuse(src, dst):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(atomic.os, "replace", refuse)
    with pytest.raises(OSError) as e:
        atomic.write_atomic(target, '{"partial": ')
    assert e.value.errno == errno.EROFS and e.value.filename == str(target)
    monkeypatch.undo()
    assert target.read_text() == '{"good": true}\n' and sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_results_folder_that_cannot_be_created_stops_before_any_server(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code = main(["--config", str(config(tmp_path)), "--python", str(FAKE), "--results-dir", str(blocker / "results"),
                 "--run-id", "r", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and f"results folder {blocker / 'results'}: cannot be created" in err
    assert "starting the vLLM server" not in err and "Traceback" not in err


def test_results_folder_without_free_space_stops_before_any_server(tmp_path, monkeypatch, capsys):
    real = shutil.disk_usage
    monkeypatch.setattr(atomic.shutil, "disk_usage", lambda p: real(p)._replace(free=5 * 2**20))
    code = run_cli(tmp_path, config(tmp_path))
    err = capsys.readouterr().err
    assert code == 2 and f"results folder {tmp_path / 'results'}: only 5.0 MiB free" in err
    assert not (tmp_path / "results" / "r").exists()     # no run folder, no server
