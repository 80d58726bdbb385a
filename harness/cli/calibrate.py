"""``evalrun calibrate``: run each config N times and recommend tolerances from the spread.

Orchestration only: each repeat is an ordinary run through the front door (:func:`harness.api.run`); the
spread, the recommendation and the realized false-fail rates are :mod:`harness.report.calibration`'s;
``--simulate-nights N`` adds clean nights simulated from the repeats' behaviour
(:mod:`harness.report.calibration_nights`), for this list and, with ``--simulate-list``, another.
The simulation is an option of this command, not a script of its own, because it is fitted on
these repeats and validated against them: the same command that measures a build's noise says
what that noise costs a list.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness.config.types import (
    DirPath,
    Multiplier,
    Name,
    NightCount,
    OutputFile,
    PositiveCount,
    RunId,
    Seed,
    cli_type,
)
from harness.records.atomic import write_atomic
from harness.report.calibration import render_calibration_markdown, summarize

if TYPE_CHECKING:
    from collections.abc import Iterable

    from harness.config.plan import Plan
    from harness.records.run_record import RunRecord
    from harness.report.progress import Progress


def describe_error_runs(records: Iterable[RunRecord]) -> list[str]:
    """One line per run record with status ``error``: its run id, the exception, where it
    happened (stage, config, variant, task) and what the record keeps. Such a run's
    figures are partial; calibration still lists it and exits 2."""
    out = []
    for r in records:
        if r.status != "error":
            continue
        kept = sum(len(v.tasks) for c in r.configs for v in c.variants.values())
        what = r.error.describe() if r.error else "status error (no error details in the record)"
        out.append(f"run {r.run_id}: {what}; {kept} task result(s) measured before it are kept "
                   f"({(r.path or r.run_id)}/run.json holds the traceback)")
    return out


def _parser() -> argparse.ArgumentParser:
    """The ``evalrun calibrate`` argument parser."""
    from harness.config.model_list import PROJECT_ROOT

    p = argparse.ArgumentParser(
        prog="evalrun calibrate",
        description="Run each config N times, report mean and spread of every accuracy and acceptance "
                    "figure, and recommend tolerances (rule in the output).",
    )
    p.add_argument("--config", required=True, metavar="LIST_OR_YAML", help="a model list or one config YAML")
    p.add_argument("--repeat", type=cli_type(PositiveCount, "a count"), required=True, metavar="N",
                   help="runs per config (>= 2)")
    p.add_argument("--data-dir", type=cli_type(DirPath, "a folder"), default=None,
                   help="GSM8K folder (test.jsonl, train.jsonl)")
    p.add_argument("--results-dir", type=cli_type(DirPath, "a folder"), default=PROJECT_ROOT / "results",
                   help="parent folder (default: %(default)s)")
    p.add_argument("--run-id", default=None, type=cli_type(RunId, "a run id"),
                   help="name of the calibration folder (default: calibrate-<time>)")
    p.add_argument("--variant", action="append", default=None, metavar="NAME", type=cli_type(Name, "a variant name"),
                   help="only this variant (repeatable)")
    p.add_argument("--python", default=None, help="interpreter that has vLLM, for the server command")
    p.add_argument("--sigmas", type=cli_type(Multiplier, "a multiplier > 0"), default=3.0,
                   help="k in the recommendation rule (default 3)")
    p.add_argument("--output", type=cli_type(OutputFile, "a file"), default=None,
                   help="also write the Markdown summary here")
    p.add_argument("--json", type=cli_type(OutputFile, "a file"), default=None, metavar="FILE",
                   help="also write the JSON summary here")
    p.add_argument("--quiet", action="store_true", help="print only warnings, errors and the summary")
    p.add_argument("--simulate-nights", type=cli_type(NightCount, "a count of nights"), default=0, metavar="N",
                   help="also simulate N clean nights from the repeats' per-question behaviour, judged by "
                        "evalrun's gates, validated against the repeats (docs/false-alarms.md; default: off)")
    p.add_argument("--simulate-list", default=None, metavar="LIST_OR_YAML",
                   help="with --simulate-nights: also simulate this list (its task sizes and gates; each task's "
                        "accuracy its config's accuracy_threshold), e.g. models-h200.txt")
    p.add_argument("--simulate-seed", type=cli_type(Seed, "a seed"), default=0, metavar="S",
                   help="the simulation's seed (default 0)")
    p.add_argument("--resume", action="store_true",
                   help="continue the calibration folder of --run-id: a finished repeat (run<i>/) that measured "
                        "what this command would is kept, an unfinished one is resumed (evalrun --resume), the "
                        "rest run; anything that differs (configs, build, evalrun revision, server environment such "
                        "as EVALRUN_NUMERICS_NOISE, data) is refused, naming it. Repeats add up across sessions.")
    return p


def _write_summary(args: argparse.Namespace, runs: list, out_dir: Path, configs: list | None = None,
                   other: tuple[str, list] | None = None) -> None:
    """The calibration summary of ``runs`` (:func:`summarize`; with ``--simulate-nights``,
    the simulated nights of ``configs`` and of ``other``, ``(list path, configs)``):
    ``calibration.json`` and ``calibration.md`` in ``out_dir``, ``--output`` / ``--json``
    copies, the Markdown on stdout."""
    summary = summarize(runs, k=args.sigmas)
    if args.simulate_nights and configs is not None and "false_alarms" in summary:
        from harness.report.calibration_nights import simulated_nights

        try:
            summary["simulated_nights"] = simulated_nights(runs, configs, summary["false_alarms"],
                                                           args.simulate_nights, args.simulate_seed, other)
        except ValueError as e:  # nothing to fit (no completions with token ids)
            print(f"evalrun calibrate: --simulate-nights: {e}; no simulated nights", file=sys.stderr)
    md = render_calibration_markdown(summary)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out_dir / "calibration.json", json.dumps(summary, indent=2) + "\n")
    write_atomic(out_dir / "calibration.md", md)
    for path, text in ((args.output, md), (args.json, json.dumps(summary, indent=2) + "\n")):
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, text)
    sys.stdout.write(md)
    print(f"evalrun calibrate: summary in {out_dir / 'calibration.md'} and calibration.json", file=sys.stderr)


def _finished(run_dir: Path) -> bool:
    """Whether the repeat in ``run_dir`` finished (its record says ``completed``); an
    unreadable record is not finished (resuming it then says why)."""
    from harness.records.run_record import RunRecordError, load_run

    try:
        return load_run(run_dir).status == "completed"
    except RunRecordError:
        return False


def _repeats(args: argparse.Namespace, argv: list[str], plan: Plan, out_dir: Path,
             progress: Progress) -> tuple[list | None, int]:
    """Run (or with ``--resume`` keep or resume) the repeats ``out_dir/run<i>``.

    Returns:
        (the ``(record, run folder)`` pairs, 0 or 2 when a repeat could not run); (None, 2)
        when a signal stopped the calibration or a repeat was refused (said on stderr).
    """
    from harness import api

    runs = []
    could_not_run = False
    for i in range(1, args.repeat + 1):
        run_dir = out_dir / f"run{i}"
        earlier = args.resume and (run_dir / "run.json").exists()
        if earlier and _finished(run_dir):
            try:
                record = api.finished_run(plan, run_dir, argv=["evalrun", "calibrate", *argv], data_dir=args.data_dir,
                                          variants=args.variant)
            except api.ResumeRefused as e:
                print(f"evalrun calibrate: --resume: {e}", file=sys.stderr)
                return None, 2
            progress.log(f"calibrate: run {i} of {args.repeat}: kept ({run_dir} finished earlier)")
            runs.append((record, run_dir))
            continue
        progress.log(f"calibrate: run {i} of {args.repeat}{' (resumed)' if earlier else ''}")
        try:
            # SIGHUP/SIGINT/SIGTERM/SIGQUIT stop every server and keep the record (the front door's handlers)
            record, run_dir = api.run(plan, results_dir=out_dir, data_dir=args.data_dir, run_id=f"run{i}",
                                      argv=["evalrun", "calibrate", *argv], variants=args.variant,
                                      resume=run_dir if earlier else None,
                                      context=api.new_context(progress))
        except KeyboardInterrupt as e:  # a stopping signal: servers stopped, partial record kept
            api.say_interrupted(e, "evalrun calibrate")
            if getattr(e, "kept", None):  # that repeat's record kept its verdict; the calibration did not end
                print(f"evalrun calibrate: interrupted ({e}) in run {i} of {args.repeat}; INTERRUPTED (exit 2)",
                      file=sys.stderr, flush=True)
            return None, 2
        except api.ResumeRefused as e:
            print(f"evalrun calibrate: --resume: {e}", file=sys.stderr)
            return None, 2
        except OSError as e:  # RunFolderExistsError (never mix runs), ResultsFolderError (cannot write)
            print(f"evalrun calibrate: {e}", file=sys.stderr)
            return None, 2
        could_not_run |= record.status != "completed"
        for line in describe_error_runs([record]):
            print(f"evalrun calibrate: {line}", file=sys.stderr)
        runs.append((record, run_dir))
    return runs, 2 if could_not_run else 0


def cli_main(argv: list[str]) -> int:
    """``evalrun calibrate --config LIST --repeat N [...]``.

    Returns:
        0 when every repeat ran (gate verdicts do not matter here), 2 when the config
        is invalid or a repeat could not run (the summary is still written from the
        repeats that produced numbers).
    """
    from harness.config.model_list import load_model_list
    from harness.config.plan import build_plan
    from harness.config.schema import ConfigError
    from harness.records.provenance import new_run_id
    from harness.report.progress import Progress

    args = _parser().parse_args(argv)
    if args.repeat < 2:
        print("evalrun calibrate: --repeat must be at least 2 (a spread needs two runs)", file=sys.stderr)
        return 2
    if args.simulate_nights < 0 or (args.simulate_list and not args.simulate_nights):
        print("evalrun calibrate: --simulate-nights must be >= 1 (and is needed by --simulate-list)", file=sys.stderr)
        return 2
    try:
        configs = load_model_list(args.config)
        other = (args.simulate_list, load_model_list(args.simulate_list)) if args.simulate_list else None
    except ConfigError as e:
        print(f"evalrun calibrate: config error:\n{e}", file=sys.stderr)
        return 2
    from harness.config.checks import check_run_id

    bad_id = check_run_id(args.run_id)  # the calibration folder is <results dir>/<run id>: one name, no '..'
    if bad_id:
        print(f"evalrun calibrate: --run-id: {bad_id}", file=sys.stderr)
        return 2
    plan = build_plan(configs, python=args.python)
    known = {v for c in configs for v in c.variants}
    unknown = sorted(set(args.variant or ()) - known)
    if unknown:  # else every repeat would calibrate nothing and exit 0
        print(f"evalrun calibrate: --variant {', '.join(unknown)}: no such variant (the config's variants: "
              f"{', '.join(sorted(known))})", file=sys.stderr)
        return 2
    if args.resume and not args.run_id:
        print("evalrun calibrate: --resume needs --run-id (the calibration folder to continue)", file=sys.stderr)
        return 2
    cal_id = args.run_id or f"calibrate-{new_run_id()}"
    out_dir = args.results_dir / cal_id
    runs, status = _repeats(args, argv, plan, out_dir, Progress(quiet=args.quiet))
    if runs is None:
        return status
    _write_summary(args, runs, out_dir, configs, other)
    return status

