"""``evalrun merge RUN...``: the command. Reads the shard run folders, joins their records
(:func:`harness.run.merge.merge_records`), claims the merged run folder, copies the shards'
``samples/`` and ``logs/`` beside it and writes the record and its reports.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from harness.config.types import DirPath, OutputFile, RunId, cli_type
from harness.records.run_record import RunRecord, outcome_word
from harness.run.merge import MergeError, merge_records, shard_of

__all__ = ["cli_main"]


def cli_main(argv: list[str]) -> int:
    """``evalrun merge RUN... [--results-dir DIR] [--run-id ID] [--junit FILE] [--markdown FILE]``.

    Writes ``<results dir>/<run id>/`` with ``run.json``, ``summary.md``, ``junit.xml``,
    ``summary.html`` and the shards' ``samples/`` and ``logs/`` copied beside it (so diffs and baselines read the merged
    folder). Returns the merged exit code (0 / 1 / 2), or 2 when the shards do not merge.
    """
    # long: the command's steps in order (parse, merge, refuse, claim, copy, write, report), each a few lines
    from harness.config.model_list import PROJECT_ROOT
    from harness.records.provenance import new_run_id
    from harness.records.run_record import RunRecordError, load_run, write_run
    from harness.report.summary import render_terminal

    p = argparse.ArgumentParser(prog="evalrun merge", description=(
        "Combine the run folders of the shards of one list (evalrun --shard i/n) into one run: "
        "record, summary, JUnit and exit code."))
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="shard run folders (or their run.json)")
    p.add_argument("--results-dir", type=cli_type(DirPath, "a folder"), default=PROJECT_ROOT / "results")
    p.add_argument("--run-id", default=None, type=cli_type(RunId, "a run id"),
                   help="merged run folder name (default: a new time-based id)")
    p.add_argument("--markdown", type=cli_type(OutputFile, "a file"), default=None, help="also write summary.md here")
    p.add_argument("--junit", type=cli_type(OutputFile, "a file"), default=None, help="also write the JUnit XML here")
    p.add_argument("--allow-mixed", action="store_true",
                   help="merge shards of different builds (evalrun version or git revision, engine or lm-eval "
                        "version) or lists anyway; the merged record and summary say what differed")
    a = p.parse_args(argv)
    from harness.config.checks import check_run_id

    bad_id = check_run_id(a.run_id)
    if bad_id:
        print(f"evalrun merge: --run-id: {bad_id}", file=sys.stderr)
        return 2
    try:
        records = [load_run(r) for r in a.runs]
        rec = merge_records(records, a.run_id or new_run_id(), allow_mixed=a.allow_mixed)
    except (RunRecordError, MergeError) as e:
        print(f"evalrun merge: {e}", file=sys.stderr)
        return 2
    for r in records:
        if r.status == "error":
            print(f"evalrun merge: shard {shard_of(r).index}/{shard_of(r).count} ({r.path}): "
                  f"{r.error.describe() if r.error else 'status error'}; the merged run is an error (exit 2)",
                  file=sys.stderr)
    for w in rec.merge_warnings:
        print(f"evalrun merge: warning: {w}", file=sys.stderr)
    out = a.results_dir / rec.run_id
    from harness.records.run_folder import RunFolderTaken, claim_run_folder

    try:
        _no_links(records)
    except RunFolderTaken as e:
        print(f"evalrun merge: {e}", file=sys.stderr)
        return 2
    try:
        claim = claim_run_folder(out, ["evalrun", "merge", *argv])
    except RunFolderTaken as e:
        print(f"evalrun merge: {e}", file=sys.stderr)
        return 2
    claim.release()  # the merged folder stays this merge's (the claim file is kept)
    for r in records:
        for sub in ("samples", "logs"):
            src = Path(r.path) / sub if r.path else None
            if src is not None and src.is_dir():
                shutil.copytree(src, out / sub, dirs_exist_ok=True)
    write_run(out, rec)
    code = rec.exit_code if rec.exit_code is not None else 2
    try:
        _write_reports(rec, out, a.markdown, a.junit)
        from harness.report.html import write_html

        write_html(rec, out)
        render_terminal(rec)
    except KeyboardInterrupt as e:  # the merged record is final: its outcome is kept
        return _kept_after_signal(rec, out, a.markdown, a.junit, e, code)
    return code


def _no_links(records: list[RunRecord]) -> None:
    """Nothing is copied into the merged folder through a link: a shard's ``samples/`` or
    ``logs/`` holding a symlink (which may name any file) is refused.

    Raises:
        RunFolderTaken: naming the link.
    """
    from harness.records.run_folder import refuse_symlinks

    for r in records:
        for sub in ("samples", "logs"):
            if r.path and (Path(r.path) / sub).is_dir():
                refuse_symlinks(Path(r.path) / sub)


def _write_reports(rec: RunRecord, out: Path, markdown: Path | None, junit: Path | None) -> None:
    """``summary.md`` and ``junit.xml`` of the merged run (and their copies), atomically."""
    from harness.records.atomic import write_atomic
    from harness.report.summary import render_markdown

    md = render_markdown(rec)
    write_atomic(out / "summary.md", md)
    if markdown:
        write_atomic(markdown, md)
    _write_junit(rec, out, junit)


def _kept_after_signal(rec: RunRecord, out: Path, markdown: Path | None, junit: Path | None,
                       e: KeyboardInterrupt, code: int) -> int:
    """A stopping signal after the merged ``run.json`` was written: the record's outcome
    is kept (the same rule as a run's), ``summary.md`` and JUnit are rewritten from it so
    the files agree, HTML and tables are skipped. Returns the record's exit code."""
    sig = str(e.args[0]) if e.args else "KeyboardInterrupt"
    try:
        _write_reports(rec, out, markdown, junit)
    except KeyboardInterrupt:
        pass
    kept = outcome_word(rec.outcome)
    print(f"evalrun merge: {sig} after the merged outcome was recorded: {kept} kept (exit {code}); "
          f"record: {out / 'run.json'}", file=sys.stderr)
    return code


def _write_junit(rec: RunRecord, out: Path, extra: Path | None) -> None:
    """``junit.xml`` in the run folder (and at ``extra``)."""
    from harness.report.junit import write_junit

    write_junit(rec, out / "junit.xml")
    if extra:
        write_junit(rec, extra)
