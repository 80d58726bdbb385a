"""A run's outcome: its verdict or error written with the reports, and what a stopping
signal leaves (:class:`RunInterrupted`).

The runner (:mod:`harness.run.runner`) sequences a run; this module owns how the run ends:
the final record (:func:`finish`, :func:`record_error`, :func:`write_final`), the reports
beside it (:func:`write_reports`) and the record after a signal (:func:`interrupted`,
:func:`say_interrupted`; the signal handlers are
:meth:`harness.run.context.RunContext.install_stop_handlers`).
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from harness.engine.server import EngineProcesses
from harness.records.atomic import ResultsFolderError, write_atomic
from harness.records.provenance import utc_now
from harness.records.recorder import EXIT_COULD_NOT_RUN, EXIT_GATE_FAILED, EXIT_PASSED
from harness.records.run_folder import RunFolder
from harness.records.run_record import RunErrorRecord, RunRecord, gates_passed, outcome_word, write_run
from harness.report.html import write_html
from harness.report.junit import write_junit
from harness.report.summary import render_markdown
from harness.run.context import RunContext

__all__ = [
    "ERROR_LOG", "RunInterrupted", "record_error", "finish", "write_final", "write_reports", "interrupted",
    "say_interrupted",
]


#: The run folder's log of an unexpected exception's traceback.
ERROR_LOG = "logs/evalrun-error.log"


class RunInterrupted(KeyboardInterrupt):
    """A stopping signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT) ended the run; every server
    was torn down first and the record written.

    Attributes:
        run_dir: the run folder holding ``run.json``.
        signal_name: e.g. ``SIGHUP`` (or ``KeyboardInterrupt``).
        leftover_pids: processes of evalrun's servers still alive after teardown
            (empty when the check found none).
        exit_code: the exit code the record says: 2 (``interrupted``), or the final
            verdict's when the signal came after it was on disk.
        kept: the outcome word (``PASSED``, ``FAILED``, ...) when the record was final
            before the signal and keeps its outcome, else None (``INTERRUPTED``).
        record: the record as written (None when none was).
    """

    def __init__(self, run_dir: Path, signal_name: str, leftover_pids: list[int],
                 exit_code: int = EXIT_COULD_NOT_RUN, kept: str | None = None,
                 record: RunRecord | None = None) -> None:
        super().__init__(signal_name)
        self.record = record
        self.run_dir = run_dir
        self.signal_name = signal_name
        self.leftover_pids = leftover_pids
        self.exit_code = exit_code
        self.kept = kept


def interrupted(e: KeyboardInterrupt, ctx: RunContext, lm_eval_done: Callable[..., None]) -> RunInterrupted:
    """After a stopping signal: the signal handler wrote the record (interrupted) before
    any server was stopped; every server's context manager has now stopped its process
    group. Check, rewrite the record and its reports; the :class:`RunInterrupted` to raise.

    A record whose final word (verdict or error) was on disk before the signal keeps it:
    only ``summary.md`` and ``junit.xml`` are written again (the signal may have cut them
    short), ``summary.html`` is left, and the exit code is the record's. ``ctx.recorder``
    is the run's recorder."""
    # (variants side by side: every job thread has ended, :func:`harness.engine.pool.run_jobs`)
    recorder = ctx.recorder
    assert recorder is not None, "interrupted() is called inside a run"
    record, run_dir = recorder.record, recorder.run_dir
    leftover = ctx.leftover_pids()
    sig = str(e.args[0]) if e.args else "KeyboardInterrupt"
    kept = recorder.final_written and record.status != "interrupted"
    if not kept:
        recorder.mark_interrupted(sig)
        recorder.done = True
        lm_eval_done(timeout=5.0)
        recorder.final()
        ctx.last_final = recorder
    # CI's test-report step shows the record's outcome, not an absent or stale file
    write_reports(record, run_dir, html=False)
    code = record.exit_code if kept and record.exit_code is not None else EXIT_COULD_NOT_RUN
    return RunInterrupted(run_dir, sig, leftover, exit_code=code, kept=outcome_word(record.outcome) if kept else None,
                          record=record)


def record_error(record: RunRecord, run_dir: Path, exc: BaseException, ctx: RunContext) -> RunRecord:
    """Turn an exception evalrun did not expect into the run's outcome.

    Checks that no server of evalrun is left (each server's context manager stopped
    its group as the exception passed; any still alive gets SIGKILL to its group),
    sets ``status`` ``error``, ``exit_code`` 2 and ``record.error`` (type, message,
    traceback, stage, config, variant, task from ``ctx.place``), writes the traceback to
    ``logs/evalrun-error.log`` and the record to ``run.json`` (everything measured
    before the exception is already in the record and the samples).

    Returns:
        the record.

    Raises:
        ResultsFolderError: the record cannot be written (the previous ``run.json``, if
            any, is left as it was); names the run folder, the write error and the
            original exception.
    """
    place, progress = ctx.place, ctx.progress
    if ctx.processes.unstopped():
        ctx.processes.hurry()  # SIGKILL to every live group; the context managers already waited
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    record.status, record.passed, record.exit_code = "error", None, EXIT_COULD_NOT_RUN
    record.error = RunErrorRecord(
        type=f"{type(exc).__module__}.{type(exc).__qualname__}", message=str(exc), traceback=tb,
        stage=place.stage, config=place.config, variant=place.variant, task=place.task,
    )
    record.provenance.ended_at = utc_now()
    try:
        log = RunFolder(run_dir).error_log
        log.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(log, f"{record.error.type}: {record.error.message}\n{record.error.where()}\n\n{tb}")
    except OSError as e:
        progress.warn(f"{run_dir / ERROR_LOG}: traceback not written: {e}")
    try:
        write_final(run_dir, record, ctx)  # from here on a signal keeps the error outcome
    except OSError as e:
        raise ResultsFolderError(
            f"run folder {run_dir}: the record cannot be written: {e.strerror or e} "
            f"({getattr(e, 'filename', None) or run_dir}); the run had ended with "
            f"{record.error.type}: {record.error.message} ({record.error.where()})") from e
    write_reports(record, run_dir)  # best effort: a failure here is a warning
    return record


def finish(record: RunRecord, run_dir: Path, could_not_run: bool, ctx: RunContext | None = None) -> RunRecord:
    """Set status, verdict and exit code from the gates; write run.json (through
    :func:`write_final` with ``ctx``), summary.md, junit.xml and summary.html. A report that
    cannot be rendered or written is a warning on stderr, never the verdict (:func:`write_reports`); ``run.json`` that
    cannot be written raises (OSError, the caller's ``error`` path)."""
    joint = gates_passed(record.gates())  # pytest's rules: XFAIL and non-strict XPASS do not fail
    if joint is False:
        code, passed = EXIT_GATE_FAILED, False
    elif could_not_run or joint is None:
        code, passed = EXIT_COULD_NOT_RUN, None
    else:
        code, passed = EXIT_PASSED, True
    # an optional task that could not run is reported, but does not by itself fail the run
    if code == EXIT_COULD_NOT_RUN and not could_not_run:
        code, passed = EXIT_PASSED, None
    record.status = "completed" if not could_not_run else "incomplete"
    record.passed, record.exit_code = passed, code
    record.provenance.ended_at = utc_now()
    write_final(run_dir, record, ctx)  # from here on a signal keeps this verdict
    write_reports(record, run_dir)
    return record


def write_reports(record: RunRecord, run_dir: Path, html: bool = True) -> list[str]:
    """Write ``summary.md``, ``junit.xml`` and (``html``) ``summary.html`` into
    ``run_dir`` (each atomically). A report that fails to render or write is a warning
    on stderr naming the file and the error, never the run's verdict.

    Returns:
        the warnings (empty when every report was written).
    """
    warnings: list[str] = []
    writers = [
        ("summary.md", lambda: write_atomic(run_dir / "summary.md", render_markdown(record, run_dir))),
        ("junit.xml", lambda: write_junit(record, run_dir / "junit.xml")),
    ]
    if html:
        writers.append(("summary.html", lambda: write_html(record, run_dir)))
    for name, write in writers:
        try:
            write()
        except Exception as e:  # noqa: BLE001 - a report failure must not hide the verdict
            warnings.append(f"{run_dir / name} not written: {type(e).__name__}: {e}")
            print(f"evalrun: warning: {warnings[-1]}", file=sys.stderr)
    return warnings



def write_final(run_dir: Path, record: RunRecord, ctx: RunContext | None = None) -> None:
    """Write a run's final word (verdict or error) to ``run_dir/run.json``. With the run's
    recorder (``ctx.recorder``, recording ``record`` in ``run_dir``) it is marked done
    first (a signal during the write writes nothing itself; the runner's interrupt path
    then decides, :attr:`harness.records.recorder.RunRecorder.final_written` still
    False), and ``final_written`` once the record is on disk, so a later signal keeps its
    outcome (``ctx.last_final``). Without one (no run in progress) the record is written.

    Raises:
        OSError: the record cannot be written (the previous ``run.json`` stays).
    """
    rec = ctx.recorder if ctx is not None else None
    if ctx is None or rec is None or rec.record is not record or rec.run_dir != Path(run_dir):
        write_run(run_dir, record)
        return
    rec.final()
    ctx.last_final = rec


def say_interrupted(e: BaseException, processes: EngineProcesses, prog: str = "evalrun") -> None:
    """Tell what an interrupt left behind, on stderr: claims the servers stopped only
    when the teardown checked that none of their processes remains, else names the
    live processes with the command to end them. Never raises (after SIGHUP the
    terminal may be gone).

    Args:
        e: the :class:`RunInterrupted` (or a bare KeyboardInterrupt raised before the
            run folder existed).
        processes: the process registry whose servers are checked.
        prog: the command name for the message.
    """
    sig = getattr(e, "signal_name", None) or (str(e.args[0]) if e.args else "KeyboardInterrupt")
    run_dir = getattr(e, "run_dir", None)
    kept = getattr(e, "kept", None)
    left = processes.unstopped()
    pids = sorted(set(getattr(e, "leftover_pids", None) or []) | {p for v in left.values() for p in v})
    if kept:
        what = (f"{prog}: {sig} after the run's outcome was recorded: {kept} kept (exit "
                f"{getattr(e, 'exit_code', 2)}); summary.md and junit.xml say it, what was left of the reports "
                "(terminal tables, summary.html, baseline update) skipped")
        where = f"; record: {Path(run_dir) / 'run.json'}" if run_dir else ""
    else:
        what = f"{prog}: interrupted ({sig}); INTERRUPTED (exit 2)"
        where = f"; partial record: {Path(run_dir) / 'run.json'}" if run_dir else "; no run record was written"
    if pids:
        msg = (f"{what}; WARNING: server processes are still alive: {pids} "
               f"({', '.join(left) or 'evalrun servers'}); end them with: kill -KILL {' '.join(map(str, pids))}{where}")
    else:
        msg = f"{what}; every server evalrun started was stopped (checked: none of their processes remains){where}"
    try:
        print(msg, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
