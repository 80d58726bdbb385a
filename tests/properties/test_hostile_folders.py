"""Hostile run folders: symlinks for ``run.json``, the claim, ``attempts``,
``samples`` and a samples file; named pipes; names and paths with ``..``; huge files,
fed, in process, to ``evalrun diff``, ``history``, ``merge`` and ``--resume``: each must
end in a clear refusal or a valid answer (an exit code, no traceback), quickly (an
interval timer fails a hang), and must write nothing outside the temporary results
folder (the folder "outside" is compared byte for byte before and after).

No server starts: ``--resume`` is refused before one would (the earlier record names a
config SHA-256 that is not the config's), and the build identity it compares is taken as
unreadable here (it would start the interpreter once per example).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cli import main
from harness.records.run_record import write_run
from harness.records.samples import write_jsonl
from harness.run import resume as resume_mod
from tests.conftest import write_fake_spec_config
from tests.record_factory import typed
from tests.sample_factory import gsm8k_sample

pytestmark = pytest.mark.integration  # whole commands in process (config load, reports): seconds per example

#: seconds one command may take on a hostile folder before it counts as a hang
HANG_SECONDS = 20


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    def fire(signum, frame):
        raise TimeoutError(f"a command took more than {seconds} s on a hostile folder (blocked?)")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry under ``folder`` (not following links): file bytes, link targets, folders."""
    out: dict[str, bytes | str] = {}
    for top, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            p = Path(top) / name
            rel = str(p.relative_to(folder))
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            elif p.is_file():
                out[rel] = p.read_bytes()
            else:
                out[rel] = "special"
    return out


def _record(run_id: str, cfg: Path, status: str, variant: str = "reference", config: str = "fake",
            samples: str = "samples/fake/reference/gsm8k.jsonl") -> dict:
    argv = ["--config", str(cfg), "--quiet", "--no-baseline"]
    return {
        "run_id": run_id, "status": status, "passed": True if status == "completed" else None,
        "exit_code": 0 if status == "completed" else None,
        "provenance": {"command_line": ["evalrun", *argv],
                       "configs": [{"name": config, "path": str(cfg), "sha256": "0" * 64}]},
        "configs": [{"name": config, "variants": {variant: {"tasks": {"gsm8k": {
            "samples": samples, "scored": {"flexible-numeric": 2}, "correct": {"flexible-numeric": 1},
            "accuracy": {"flexible-numeric": 0.5}}}}},
            "gates": [{"id": f"{config}/{variant}/gsm8k/error_rate", "variant": variant, "passed": True}]}],
    }


def _good_run(results: Path, run_id: str, cfg: Path, status: str = "completed") -> Path:
    d = results / run_id
    write_run(d, typed(_record(run_id, cfg, status)))
    write_jsonl(d / "samples" / "fake" / "reference" / "gsm8k.jsonl",
                [gsm8k_sample("q1", True, variant="reference"), gsm8k_sample("q2", False, variant="reference")])
    (d / ".evalrun-claim.json").write_text(json.dumps({"pid": 1, "command_line": ["evalrun"]}))
    return d


#: A hostile change to a run folder ``d``: (name, apply(d, outside)).
def _link_run_json(d: Path, out: Path) -> None:
    (d / "run.json").unlink()
    (d / "run.json").symlink_to(out / "victim.json")


def _fifo_run_json(d: Path, out: Path) -> None:
    (d / "run.json").unlink()
    os.mkfifo(d / "run.json")


def _link_to_fifo(d: Path, out: Path) -> None:
    (d / "run.json").unlink()
    os.mkfifo(out / "pipe")
    (d / "run.json").symlink_to(out / "pipe")


def _huge_run_json(d: Path, out: Path) -> None:
    with (d / "run.json").open("r+b") as f:
        f.truncate(300 * 2**20)  # sparse: 300 MiB read as size, not written


def _dir_run_json(d: Path, out: Path) -> None:
    (d / "run.json").unlink()
    (d / "run.json").mkdir()


def _link_claim(d: Path, out: Path) -> None:
    (d / ".evalrun-claim.json").unlink()
    (d / ".evalrun-claim.json").symlink_to(out / "victim.json")


def _link_attempts(d: Path, out: Path) -> None:
    (d / "attempts").symlink_to(out / "victimdir", target_is_directory=True)


def _link_samples_dir(d: Path, out: Path) -> None:
    shutil.rmtree(d / "samples")
    (d / "samples").symlink_to(out / "victimdir", target_is_directory=True)


def _link_samples_file(d: Path, out: Path) -> None:
    f = d / "samples" / "fake" / "reference" / "gsm8k.jsonl"
    f.unlink()
    f.symlink_to(out / "victim.json")


def _fifo_samples(d: Path, out: Path) -> None:
    f = d / "samples" / "fake" / "reference" / "gsm8k.jsonl"
    f.unlink()
    os.mkfifo(f)


def _garbage_samples(d: Path, out: Path) -> None:
    (d / "samples" / "fake" / "reference" / "gsm8k.jsonl").write_bytes(b"\xff\x00{not json\n")


def _rewrite(d: Path, **kw: str) -> None:
    if not stat.S_ISREG(os.lstat(d / "run.json").st_mode):  # another change took run.json already
        return
    rec = json.loads((d / "run.json").read_text())
    cfg = Path(rec["provenance"]["configs"][0]["path"])
    write_run(d, typed(_record(rec["run_id"], cfg, rec["status"], **kw)))


def _dotdot_variant(d: Path, out: Path) -> None:
    _rewrite(d, variant="../../../../victimdir")


def _dotdot_config(d: Path, out: Path) -> None:
    _rewrite(d, config="../victimdir")


def _dotdot_samples(d: Path, out: Path) -> None:
    _rewrite(d, samples="../../outside/victim.json")


def _absolute_samples(d: Path, out: Path) -> None:
    _rewrite(d, samples=str(out / "victim.json"))


def _link_outputs(d: Path, out: Path) -> None:
    """The files a command is told to write (``diff --output``, ``merge --markdown``) are
    symlinks to a file outside."""
    for name in ("d.md", "m.md"):
        (d.parent / name).symlink_to(out / "victim.json")


HOSTILE: dict[str, Callable[[Path, Path], None]] = {f.__name__.lstrip("_"): f for f in (
    _link_run_json, _fifo_run_json, _link_to_fifo, _huge_run_json, _dir_run_json, _link_claim, _link_attempts,
    _link_samples_dir, _link_samples_file, _fifo_samples, _garbage_samples, _dotdot_variant, _dotdot_config,
    _dotdot_samples, _absolute_samples, _link_outputs)}


#: the changes that rewrite run.json (applied before those that replace it)
REWRITES = {_dotdot_variant, _dotdot_config, _dotdot_samples, _absolute_samples}


def _commands(results: Path, hostile: Path, good: Path, cfg: Path) -> dict[str, list[str]]:
    return {
        "diff": ["diff", str(good), str(hostile), "--output", str(results / "d.md")],
        "diff-reversed": ["diff", str(hostile), str(good), "--json"],
        "history": ["history", str(results)],
        "merge": ["merge", str(hostile), str(good), "--results-dir", str(results), "--run-id", "merged",
                  "--markdown", str(results / "m.md")],
        "resume": ["--config", str(cfg), "--quiet", "--no-baseline", "--resume", str(hostile)],
    }


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    write_fake_spec_config(root, num_questions=2)
    return root


@settings(max_examples=45, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(hostile=st.lists(st.sampled_from(sorted(HOSTILE)), min_size=1, max_size=2, unique=True),
       command=st.sampled_from(["diff", "diff-reversed", "history", "merge", "resume"]))
def test_a_hostile_run_folder_is_refused_clearly_and_nothing_outside_changes(
        base, tmp_path_factory, capsys, monkeypatch, hostile, command):
    monkeypatch.setattr(resume_mod, "identity_or_none", lambda python: None)  # no interpreter started
    tmp = tmp_path_factory.mktemp("case")
    cfg = base / "fake.yaml"
    results, outside = tmp / "results", tmp / "outside"
    (outside / "victimdir").mkdir(parents=True)
    (outside / "victimdir" / "keep.txt").write_text("victim folder\n")
    (outside / "victim.json").write_text('{"victim": true}\n')
    good = _good_run(results, "good", cfg)
    run = _good_run(results, "hostile", cfg, status="interrupted" if command == "resume" else "completed")
    for h in sorted(hostile, key=lambda h: HOSTILE[h] not in REWRITES):  # record rewrites first
        try:
            HOSTILE[h](run, outside)
        except FileNotFoundError:  # an earlier change removed what this one replaces: still hostile
            pass
    before = _snapshot(outside)
    capsys.readouterr()
    with _deadline(HANG_SECONDS):
        code = main(_commands(results, run, good, cfg)[command])
    out, err = capsys.readouterr()
    assert isinstance(code, int) and code in (0, 1, 2), (hostile, command, code)
    assert "Traceback" not in err and "unexpected error" not in err, (hostile, command, err[-2000:])
    assert _snapshot(outside) == before, (hostile, command, "something outside the results folder changed")
    bad_record = {"link_run_json", "fifo_run_json", "link_to_fifo", "huge_run_json", "dir_run_json"} & set(hostile)
    if command in ("diff", "diff-reversed", "merge") and bad_record:
        assert code == 2 and "run.json" in err, (hostile, command, err[-2000:])  # named, refused
    if command == "resume":
        assert code == 2, (hostile, err[-2000:])  # never resumed (the config SHA differs at least)
    if "link_outputs" in hostile and command in ("diff", "merge"):
        assert code == 2 and "symlink" in err, (hostile, command, err[-2000:])  # refused, naming the link


def test_a_named_pipe_as_run_json_is_refused_at_once_naming_it(tmp_path, capsys):
    cfg = write_fake_spec_config(tmp_path, num_questions=2)
    good = _good_run(tmp_path / "results", "good", cfg)
    bad = _good_run(tmp_path / "results", "bad", cfg)
    _fifo_run_json(bad, tmp_path)
    with _deadline(HANG_SECONDS):
        assert main(["diff", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad / "run.json") in err and "named pipe" in err


def test_a_resume_through_a_symlinked_claim_never_writes_its_target(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(resume_mod, "identity_or_none", lambda python: None)
    cfg = write_fake_spec_config(tmp_path, num_questions=2)
    run = _good_run(tmp_path / "results", "r", cfg, status="interrupted")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (run / ".evalrun-claim.json").unlink()
    (run / ".evalrun-claim.json").symlink_to(victim)
    assert main(["--config", str(cfg), "--quiet", "--no-baseline", "--resume", str(run)]) == 2
    assert victim.read_text() == "precious\n"
    assert "symlink" in capsys.readouterr().err


def test_a_refused_resume_leaves_the_earlier_claim_as_it_was(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(resume_mod, "identity_or_none", lambda python: None)
    cfg = write_fake_spec_config(tmp_path, num_questions=2)
    run = _good_run(tmp_path / "results", "r", cfg, status="interrupted")
    claim = (run / ".evalrun-claim.json").read_bytes()
    assert main(["--config", str(cfg), "--quiet", "--no-baseline", "--resume", str(run)]) == 2
    assert "differs" in capsys.readouterr().err
    assert (run / ".evalrun-claim.json").read_bytes() == claim


def test_calibrate_refuses_a_run_id_that_leaves_the_results_folder(tmp_path, capsys):
    cfg = write_fake_spec_config(tmp_path, num_questions=2)
    results = tmp_path / "a" / "b" / "results"
    code = main(["calibrate", "--config", str(cfg), "--repeat", "2", "--results-dir", str(results),
                 "--run-id", "../../escaped"])
    assert code == 2 and "--run-id" in capsys.readouterr().err
    assert not (tmp_path / "a" / "escaped").exists() and not (tmp_path / "escaped").exists()

