"""``evalrun diff RUN_A RUN_B``: the command. Finds both sides
(:mod:`harness.report.diff_sides`), refuses a run that did not finish
(:func:`harness.report.diff_cli.unfinished_sides`), diffs them
(:func:`harness.report.diff.diff_runs`) and writes Markdown
(:mod:`harness.report.diff_render`) or ``--json`` to the terminal or ``--output FILE``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.config.types import Count, DirPath, OutputFile, cli_type
from harness.records.atomic import write_atomic
from harness.report.diff import diff_runs
from harness.report.diff_cli import unfinished_sides
from harness.report.diff_render import render_diff_markdown
from harness.report.diff_sides import DiffError, SidePeek, load_side, peek, resolve_side

__all__ = ["cli_main"]


def cli_main(argv: list[str]) -> int:
    """``evalrun diff RUN_A RUN_B [--output FILE] [--json] [--max-flipped N]``.

    Returns:
        0 when the diff was produced, 2 when a side cannot be read or is not a
        finished run (``status`` ``interrupted``, ``incomplete``, ``running`` or
        ``error``, whose exception, stage, config, variant and task are named):
        the command says which side and why instead of printing tables that would
        compare what was never measured.
    """
    p = argparse.ArgumentParser(
        prog="evalrun diff",
        description="Explain what changed from run A to run B (run folders, run.json files or baseline JSON files).",
    )
    p.add_argument("run_a", type=Path, help="run id, run folder, run.json, or baseline JSON (the reference side)")
    p.add_argument("run_b", type=Path, help="run id, run folder, run.json, or baseline JSON (the side under test)")
    p.add_argument("--results-dir", type=cli_type(DirPath, "a folder"), default=None,
                   help="where run ids are looked up (default: the project's results/)")
    p.add_argument("--output", "-o", type=cli_type(OutputFile, "a file"), default=None,
                   help="write to this file instead of the terminal")
    p.add_argument("--json", action="store_true", help="JSON instead of Markdown")
    p.add_argument("--max-flipped", type=cli_type(Count, "a count"), default=20,
                   help="flipped questions shown with both completions per task and direction (default 20)")
    args = p.parse_args(argv)
    try:
        pa, pb = resolve_side(args.run_a, args.results_dir), resolve_side(args.run_b, args.results_dir)
    except DiffError as e:
        print(f"evalrun diff: {e}", file=sys.stderr)
        return 2
    unfinished = unfinished_sides(peek(pa), peek(pb))
    if not unfinished:
        try:
            d = diff_runs(load_side(pa), load_side(pb))
        except DiffError as e:
            print(f"evalrun diff: {e}", file=sys.stderr)
            return 2
        unfinished = unfinished_sides(SidePeek(d.a.path, d.a.status), SidePeek(d.b.path, d.b.status))
    if unfinished:
        for msg in unfinished:
            print(f"evalrun diff: {msg}", file=sys.stderr)
        print("evalrun diff: not compared: a diff of a run that did not finish would show what was never "
              "measured as unchanged; rerun it, or diff two completed runs", file=sys.stderr)
        return 2
    text = json.dumps(d.to_json(), indent=2) + "\n" if args.json else render_diff_markdown(d, args.max_flipped)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(args.output, text)
        print(f"evalrun diff: written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
