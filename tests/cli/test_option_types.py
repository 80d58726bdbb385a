"""Every command's options go through harness/config/types.py: a bad value is
refused by argparse with exit 2, naming the option, before any run folder or server
exists. In process, no subprocess: unit tier."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.cli import main
from harness.config.types import BISECT_ID_MAX_LENGTH
from harness.engine.doctor import check_data

CONFIG = Path("configs/tiny-qwen3next-mtp-cpu.yaml").resolve()


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The stderr of ``evalrun argv``, which must exit 2 (argparse's SystemExit or a return)."""
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def no_files(folder: Path) -> None:
    assert not folder.exists() or not any(folder.iterdir()), sorted(folder.rglob("*"))


@pytest.mark.parametrize("argv,option", [
    (["--config", str(CONFIG), "--dry-run", "--stop-grace", "1e308"], "--stop-grace"),
    (["--config", str(CONFIG), "--dry-run", "--stop-grace", "nan"], "--stop-grace"),
    (["--config", str(CONFIG), "--dry-run", "--stop-grace", "-1"], "--stop-grace"),
    (["--config", str(CONFIG), "--dry-run", "--max-servers", "0"], "--max-servers"),
    (["--config", str(CONFIG), "--dry-run", "--run-id", "../../escaped"], "--run-id"),
    (["--config", str(CONFIG), "--dry-run", "--variant", "a/b"], "--variant"),
    (["--config", str(CONFIG), "--build", "abc123", "--build-index-template", "https://w/{commit}/{arch}"],
     "--build-index-template"),
    (["history", "RESULTS", "--alpha", "nan"], "--alpha"),
    (["history", "RESULTS", "--alpha", "1"], "--alpha"),
    (["history", "RESULTS", "--last", "-3"], "--last"),
    (["calibrate", "--config", str(CONFIG), "--repeat", "2", "--sigmas", "nan", "--results-dir", "RESULTS"],
     "--sigmas"),
    (["calibrate", "--config", str(CONFIG), "--repeat", "2", "--run-id", "../../escaped", "--results-dir", "RESULTS"],
     "--run-id"),
    (["diff", "a", "b", "--max-flipped", "-1"], "--max-flipped"),
    (["merge", "a", "--run-id", "..", "--results-dir", "RESULTS"], "--run-id"),
    (["selfcheck", "--repeat", "0", "--results-dir", "RESULTS"], "--repeat"),
    (["bisect", "--config", str(CONFIG), "--build", "a", "--build", "b", "--bisect-id", "x" * 95,
      "--results-dir", "RESULTS"], "--bisect-id"),
    (["bisect", "--config", str(CONFIG), "--build", "a", "--build", "b", "--build-index-template",
      "https://w/{comit}", "--results-dir", "RESULTS"], "--build-index-template"),
])
def test_a_bad_option_value_is_refused_naming_the_option(argv: list[str], option: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "results"
    err = refused([str(results) if a == "RESULTS" else a for a in argv], capsys)
    assert f"argument {option}" in err, err
    no_files(results)


def test_a_bisect_id_too_long_for_its_step_names_is_refused_stating_the_limit(tmp_path: Path, capsys) -> None:
    err = refused(["bisect", "--config", str(CONFIG), "--build", "a", "--build", "b", "--bisect-id",
                   "b" * (BISECT_ID_MAX_LENGTH + 1), "--results-dir", str(tmp_path)], capsys)
    assert f"at most {BISECT_ID_MAX_LENGTH} characters" in err


def test_an_index_template_with_an_unknown_field_names_the_field(tmp_path: Path, capsys) -> None:
    err = refused(["--config", str(CONFIG), "--dry-run", "--build-index-template", "https://w/{commit}/{flavour}"],
                  capsys)
    assert "{flavour}" in err and "the only field is {commit}" in err


def test_calibrate_with_an_unknown_variant_names_the_configs_variants(tmp_path: Path, capsys) -> None:
    err = refused(["calibrate", "--config", str(CONFIG), "--repeat", "2", "--variant", "nosuch",
                   "--results-dir", str(tmp_path / "results")], capsys)
    assert "--variant nosuch: no such variant" in err and "reference" in err and "spec_sync" in err
    no_files(tmp_path / "results")


def test_doctor_data_dir_file_says_it_is_not_a_directory(tmp_path: Path, capsys) -> None:
    f = tmp_path / "test.jsonl"
    f.write_text("{}\n")
    err = refused(["doctor", "--data-dir", str(f)], capsys)
    assert "argument --data-dir" in err and "is not a directory" in err and "does not exist" not in err
    finding = check_data(f)
    assert finding.ok is False and "is not a directory" in finding.detail


def test_a_bad_environment_variable_is_refused_before_any_command(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("EVALRUN_STOP_GRACE_SECONDS", "1e308")
    err = refused(["--config", str(CONFIG), "--dry-run", "--results-dir", str(tmp_path / "results")], capsys)
    assert "EVALRUN_STOP_GRACE_SECONDS='1e308'" in err
    no_files(tmp_path / "results")


@pytest.mark.parametrize("argv,option", [
    (["diff", "a", "b", "--output", "OUT"], "--output"),
    (["--config", str(CONFIG), "--dry-run", "--markdown", "OUT"], "--markdown"),
    (["--config", str(CONFIG), "--dry-run", "--junit", "OUT"], "--junit"),
    (["history", "RESULTS", "--csv", "OUT"], "--csv"),
    (["history", "RESULTS", "--parquet", "OUT"], "--parquet"),
    (["calibrate", "--config", str(CONFIG), "--repeat", "2", "--output", "OUT", "--results-dir", "RESULTS"],
     "--output"),
    (["calibrate", "--config", str(CONFIG), "--repeat", "2", "--json", "OUT", "--results-dir", "RESULTS"], "--json"),
    (["merge", "a", "--markdown", "OUT", "--results-dir", "RESULTS"], "--markdown"),
    (["merge", "a", "--junit", "OUT", "--results-dir", "RESULTS"], "--junit"),
])
@pytest.mark.parametrize("kind", ["symlink", "folder", "fifo"])
def test_an_output_file_is_never_written_through_a_symlink_or_onto_a_non_file(
        argv: list[str], option: str, kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--output``, ``--markdown``, ``--junit``, ``--csv``, ``--parquet``, ``--json FILE``:
    an existing symlink (its target untouched), folder or pipe is refused naming the option."""
    target, out, results = tmp_path / "target.md", tmp_path / "out.md", tmp_path / "results"
    target.write_text("TARGET")
    {"symlink": lambda: out.symlink_to(target), "folder": out.mkdir, "fifo": lambda: os.mkfifo(out)}[kind]()
    err = refused([str(results) if a == "RESULTS" else str(out) if a == "OUT" else a for a in argv], capsys)
    assert f"argument {option}" in err and str(out) in err, err
    assert ("symlink" if kind == "symlink" else "not a regular file") in err
    assert target.read_text() == "TARGET"
    no_files(results)


@pytest.mark.parametrize("gpus", ["a,,b", "-1", "0,0", "0,1 2", "99999999"])
def test_gpus_is_a_count_or_device_ids(gpus: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(["--config", str(CONFIG), "--dry-run", "--gpus", gpus], capsys)
    assert "argument --gpus" in err, err
