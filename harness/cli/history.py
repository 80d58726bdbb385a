"""``evalrun history RESULTS_DIR``: the command. Reads every run record of a results folder
(:func:`harness.report.history.load_records`), prints the history and drift tables
(:mod:`harness.report.history`) or the GPU-seconds per config, and writes ``--csv`` /
``--parquet`` copies of the table.
"""

from __future__ import annotations

import argparse
import json
import sys

from harness.config.types import Alpha, DirPath, Name, OutputFile, PositiveCount, cli_type
from harness.report.history import (
    DRIFT_METHOD,
    _unreadable_lines,
    cost_frame,
    drift_table,
    history_frame,
    last_runs,
    load_records,
    render_cost_markdown,
    render_history_markdown,
)

__all__ = ["cli_main"]


def cli_main(argv: list[str]) -> int:
    """``evalrun history RESULTS_DIR [--config NAME] [--last N] [--csv F] [--parquet F] [--alpha A]
    [--metric accuracy|gpu_seconds]``.

    Prints the Markdown history and drift tables, and the run records it could not
    read. Exit code 0; 1 when drift is flagged (so a nightly job can alert on it); 2 when
    the folder cannot be read, or when a run record in it cannot be read (a history
    that silently drops nights is not the history), unless ``--skip-unreadable``.
    """
    ap = argparse.ArgumentParser(prog="evalrun history", description=(
        "Every run record of a results folder as one table (pandas), and a one-sided trend "
        "test for drift across nights."))
    ap.add_argument("results_dir", type=cli_type(DirPath, "a folder"), metavar="RESULTS_DIR")
    ap.add_argument("--config", default=None, type=cli_type(Name, "a config name"), help="only this config")
    ap.add_argument("--last", type=cli_type(PositiveCount, "a count >= 1"), default=None, metavar="N",
                    help="only the last N runs of each config")
    ap.add_argument("--alpha", type=cli_type(Alpha, "a level in (0, 1)"), default=0.05,
                    help="significance level of the drift test (default 0.05)")
    ap.add_argument("--csv", type=cli_type(OutputFile, "a file"), default=None, help="write the full table as CSV")
    ap.add_argument("--parquet", type=cli_type(OutputFile, "a file"), default=None,
                    help="write the full table as Parquet")
    ap.add_argument("--json", action="store_true", help="print the drift result as JSON instead of Markdown")
    ap.add_argument("--metric", choices=["accuracy", "gpu_seconds"], default="accuracy",
                    help="gpu_seconds: print GPU-seconds per config over time instead of the accuracy history "
                         "(with --json: as JSON records); the exit code is then 0 unless records are unreadable")
    ap.add_argument("--skip-unreadable", action="store_true",
                    help="list run records that cannot be read but do not exit 2 for them")
    a = ap.parse_args(argv)
    try:
        recs, problems = load_records(a.results_dir, a.config)
    except FileNotFoundError as e:
        print(f"evalrun history: {e}", file=sys.stderr)
        return 2
    for p in problems:
        print(f"evalrun history: unreadable run record: {p}", file=sys.stderr)
    for r in recs:
        if r.status == "error" and r.error is not None:
            print(f"evalrun history: run {r.run_id}: {r.error.describe()}; the tasks it measured before "
                  "are listed with verdict ERROR", file=sys.stderr)
    if a.metric == "gpu_seconds":
        cf = last_runs(cost_frame(recs, a.config), a.last)
        if a.csv:
            cf.to_csv(a.csv, index=False)
        if a.json:
            print(json.dumps({"gpu_seconds": json.loads(cf.to_json(orient="records", date_format="iso")),
                              "unreadable": problems}, indent=2))
        else:
            print(render_cost_markdown(cf) + "\n".join(_unreadable_lines(problems)))
        return 2 if problems and not a.skip_unreadable else 0
    df = last_runs(history_frame(recs, a.config), a.last)
    drift = drift_table(df, a.alpha)
    if a.csv:
        df.to_csv(a.csv, index=False)
    if a.parquet:
        per_position = df["per_position"].map(lambda x: list(x) if isinstance(x, tuple) else None)
        df.assign(per_position=per_position).to_parquet(a.parquet, index=False)
    if a.json:
        print(json.dumps({"method": DRIFT_METHOD, "alpha": a.alpha,
                          "drift": json.loads(drift.to_json(orient="records")),
                          "unreadable": problems}, indent=2))
    else:
        print(render_history_markdown(df, drift, a.alpha, problems))
    if problems and not a.skip_unreadable:
        print(f"evalrun history: {len(problems)} run record(s) could not be read (listed above); exit 2 "
              "(--skip-unreadable to list them without failing)", file=sys.stderr)
        return 2
    return 1 if bool((drift["drift"] == True).any()) else 0  # noqa: E712
