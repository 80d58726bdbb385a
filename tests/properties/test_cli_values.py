"""Generated values for every typed option of every command, every environment variable
evalrun reads and every type of harness/config/types.py.

A value is either refused clearly (exit 2, argparse naming the option) or accepted and the
command goes on to a clean end (exit 0, 1 or 2, no traceback, no "unexpected error"),
with nothing written outside the example's own folder. What would start a server or
train a model is stubbed (the run's dry-run printer, calibrate's runs, doctor's checks);
every command runs in process: unit tier."""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from harness import api
from harness.cli import app, main
from harness.config import types as T
from harness.engine import doctor

CONFIG = str(Path("configs/tiny-qwen3next-mtp-cpu.yaml").resolve())

#: Texts of every documented shape and hostile ones.
HOSTILE = ["nan", "NaN", "inf", "-inf", "1e308", "-1e308", "-1", "0", "1", "2", "0.5", "1.0", "3", "100", "5e-324",
           "1_000", " 7", "0x10", "", " ", "..", ".", "/", "a/b", "../../escaped", "x" * 120, "x" * 39, "x" * 40,
           "é", "\u202e", "a..b", "reference", "spec_sync", "nosuch", "{commit}", "https://w/{commit}",
           "https://w/{commit}/{arch}", "https://w/{0}", "https://w/{commit!r}", "{", "1/2", "2/1", "0,1", "-k"]
TEXT = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=40), st.integers().map(str),
                 st.floats(allow_nan=True, allow_infinity=True).map(str))

#: (command argv before the option, the option): every typed option a command has.
#: RESULTS is the example's results folder, CWD its working folder.
OPTIONS: list[tuple[tuple[str, ...], str]] = [
    *[(("--config", CONFIG, "--dry-run", "--results-dir", "RESULTS"), o) for o in (
        "--stop-grace", "--max-servers", "--run-id", "--variant", "--select", "--build-index-template", "--data-dir",
        "--results-dir", "--baseline", "--markdown", "--junit", "--shard", "--gpus", "-k", "--resume",
        "--calibration")],
    *[(("history", "RESULTS"), o) for o in ("--alpha", "--last", "--config", "--csv", "--parquet")],
    (("history",), "results_dir"),  # a positional: the value alone
    *[(("diff", "a", "b", "--results-dir", "RESULTS"), o) for o in ("--max-flipped", "--results-dir", "--output")],
    *[(("merge", "RESULTS/nosuch", "--results-dir", "RESULTS"), o) for o in (
        "--run-id", "--markdown", "--junit", "--results-dir")],
    *[(("calibrate", "--config", CONFIG, "--repeat", "2", "--results-dir", "RESULTS"), o) for o in (
        "--sigmas", "--run-id", "--variant", "--repeat", "--data-dir", "--results-dir", "--output", "--json",
        "--simulate-nights", "--simulate-seed")],
    *[(("selfcheck", "--config", "CWD/missing.yaml", "--results-dir", "RESULTS"), o) for o in (
        "--run-id", "--variant", "--repeat", "--results-dir")],
    *[(("bisect", "--config", CONFIG, "--build", "a", "--results-dir", "RESULTS"), o) for o in (
        "--bisect-id", "--build-index-template", "--build-package")],
    (("doctor",), "--data-dir"),
]

#: Options that take a value but no type of harness/config/types.py, and why: free text
#: checked where it is used (an interpreter, a build, a config or list, all named when
#: refused), fixed choices, or a shape parsed by its owner. Every other option must be in
#: OPTIONS (generated values) with a type of types.py.
UNTYPED = {
    "--python": "an interpreter: checked by the pre-launch check and the build probe, named",
    "--build": "a build (interpreter, requirement, wheel, commit): parse_build, named",
    "--config": "a config or model list: resolve_list_path and the one reader, named",
    "--simulate-list": "a model list: as --config",
    "--metric": "argparse choices",
    "--name": "argparse choices",
    "run_a": "a run id, folder, run.json or baseline: resolve_side and the one reader",
    "run_b": "as run_a",
    "runs": "shard run folders: the one reader",
    "-k": "an expression over config stems (generated values in OPTIONS)",
}
#: Typed options left out of the generated runs, and why.
NOT_GENERATED = {("evalrun train-tiny", "--output"): "trains the tiny model for minutes (OptionalPath, "
                 "refusals in tests/cli/test_option_types.py)"}


def _value_options() -> set[tuple[str, str]]:
    """(command, option) for every option of every command that takes a value, read from
    the parsers themselves (each command's ``--help``), not from a list kept by hand."""
    seen: list[tuple[str, tuple[str, ...], dict]] = []
    orig = argparse.ArgumentParser.add_argument

    def record(self: argparse.ArgumentParser, *names: str, **kw: object) -> argparse.Action:
        seen.append((self.prog, names, kw))
        return orig(self, *names, **kw)

    argparse.ArgumentParser.add_argument = record  # type: ignore[method-assign]
    try:
        for sub in [None, *app.SUBCOMMANDS]:
            main(([sub] if sub else []) + ["--help"])
    finally:
        argparse.ArgumentParser.add_argument = orig  # type: ignore[method-assign]
    flags = ("store_true", "store_false", "help", "count", "version")
    return {(prog, names[0]) for prog, names, kw in seen if kw.get("action") not in flags}


def test_every_option_that_takes_a_value_is_typed_and_generated(capsys: pytest.CaptureFixture[str]) -> None:
    generated = {("evalrun" + (f" {p[0]}" if p[0] in app.SUBCOMMANDS else ""), o) for p, o in OPTIONS}
    missing = sorted(f"{prog} {opt}" for prog, opt in _value_options() - generated - set(NOT_GENERATED)
                     if opt not in UNTYPED)
    capsys.readouterr()
    assert not missing, f"options without generated values (add them to OPTIONS, typed in types.py): {missing}"


class _Stubbed(OSError):
    """What a stubbed step raises instead of starting a server."""


@pytest.fixture()
def stubs(monkeypatch: pytest.MonkeyPatch) -> dict[str, argparse.Namespace]:
    """Stop every command where it would start a server: the run's dry-run printer checks
    the options it got; calibrate's runs raise (its OSError path, exit 2); doctor's
    checks record the folder they got."""
    seen: dict[str, argparse.Namespace] = {}

    def dry_run(args: argparse.Namespace, plan: object) -> int:
        seen["run"] = args
        return 0

    def run(*_a: object, **_k: object) -> None:
        raise _Stubbed("stub: no server in a property test")

    def checks(python: str, data_dir: Path | None = None) -> list:
        seen["doctor"] = argparse.Namespace(data_dir=data_dir)
        return []

    monkeypatch.setattr(app, "_dry_run", dry_run)
    monkeypatch.setattr(api, "run", run)
    monkeypatch.setattr(doctor, "run_checks", checks)
    return seen


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def _valid_run_args(args: argparse.Namespace) -> None:
    """The options a run got satisfy their types."""
    if args.stop_grace is not None:
        assert math.isfinite(args.stop_grace) and 0 <= args.stop_grace <= T.MAX_STOP_GRACE_SECONDS
    if args.max_servers is not None:
        assert args.max_servers >= 1
    if args.run_id is not None:
        T.check_name_text(args.run_id)
    for name in [*(args.variant or []), *(args.select or [])]:
        T.check_name_text(name)
    for folder in (args.data_dir, args.baseline):
        assert folder is None or not folder.exists() or folder.is_dir()


@settings(max_examples=200, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.sampled_from(OPTIONS), value=TEXT)
def test_every_option_refuses_clearly_or_runs_cleanly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str], stubs: dict,
                                                      where: tuple, value: str) -> None:
    prefix, option = where
    ex = Path(tempfile.mkdtemp(dir=tmp_path))
    (ex / "cwd").mkdir()
    (ex / "results").mkdir()
    monkeypatch.chdir(ex / "cwd")
    before = _files(tmp_path.parent)
    argv = [a.replace("RESULTS", str(ex / "results")).replace("CWD", str(ex / "cwd")) for a in prefix]
    stubs.clear()
    try:
        code = main([*argv, f"{option}={value}" if option.startswith("-") else value])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err and "unexpected error" not in err, err
    assert code in (0, 1, 2), (code, err)
    if "error: argument" in err:  # argparse's refusal names the option
        assert code == 2 and f"argument {option}" in err, err
    if "run" in stubs:
        _valid_run_args(stubs["run"])
    if "doctor" in stubs:
        d = stubs["doctor"].data_dir
        assert d is None or not d.exists() or d.is_dir()
    new = {p for p in _files(tmp_path.parent) - before if ex not in p.parents and p != ex}
    assert not new, sorted(new)


#: Each type of harness/config/types.py and what every value it accepts must satisfy.
TYPES = [T.Seconds, T.PositiveSeconds, T.StopGraceSeconds, T.Probability, T.Alpha, T.Count, T.PositiveCount,
         T.Multiplier, T.Nats, T.Temperature, T.TokenCount, T.TokenOffset, T.DraftCount, T.Seed, T.SeedOffset,
         T.Name, T.RunId, T.BisectId, T.IndexTemplate, T.OptionalPath, T.DirPath, T.OutputFile, T.DeviceList,
         T.ShellArgs, T.ParserChoice, T.Shard, T.NightCount]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(tp=st.sampled_from(TYPES), value=TEXT)
def test_every_type_accepts_only_what_it_states(tp: object, value: str) -> None:
    parse = T.cli_type(tp, "x")
    try:
        got = parse(value)
    except argparse.ArgumentTypeError as e:
        assert str(e), value
        return
    TypeAdapter(tp).validate_python(got)  # what was accepted passes the type again, unconverted
    if isinstance(got, float):
        assert math.isfinite(got)
    if isinstance(got, str) and tp in (T.Name, T.RunId, T.BisectId):
        assert "/" not in got and ".." not in got and 0 < len(got) <= T.MAX_NAME_LENGTH


@settings(max_examples=150, deadline=None, derandomize=True)
@given(name=st.sampled_from([*T.ENVIRONMENT, "EVALRUN_NUMERICS_NOISE"]), value=TEXT)
def test_every_environment_variable_is_refused_naming_it_or_accepted(name: str, value: str) -> None:
    bad = T.check_environment({name: value})
    assert all(b.startswith(f"{name}=") for b in bad), bad
    if not bad and name in T.ENVIRONMENT:
        T.env_value({name: value}, name, T.ENVIRONMENT[name], None)
