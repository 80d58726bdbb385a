"""The runner: executes a plan, config by config and variant by variant, and writes the record.

This is the one module that imports from every stage; it only sequences their steps
(and keeps :data:`PLACE`, where an unexpected exception is recorded). Data flows one way::

    plan -> tasks (prepare) -> session (per variant) -> task.send; server stopped -> task.judge -> samples
         -> scoring / engine counter checks / analysis.acceptance -> analysis.comparison
         -> gates -> records.results (run.json via records.recorder) -> report (summary.md)

Nothing measured is lost: a variant's tasks are judged and their samples written as soon
as its server is stopped (its devices already back in the pool), a stopping signal still
judges what was sent, and a variant whose server fails is recorded with its error while
the other variants still run.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.analysis.acceptance import acceptance_intervals
from harness.analysis.comparison import compare, noise_variants, rerun_needs
from harness.analysis.gates import baseline_notes, evaluate_gates, judged_baseline_gates
from harness.analysis.measurements import Measurements
from harness.analysis.scoring import output_match, score_task
from harness.config.plan import PORT_PLACEHOLDER, ConfigPlan, Plan, VariantPlan, shell_line
from harness.engine.info import EngineInfoError, check_effective, model_runner_fact
from harness.engine.preflight import (
    ASYNC_NOT_SUPPORTED,
    PendingCheck,
    PreflightRefused,
    ServerCommand,
    check_server_commands,
    start_check,
)
from harness.engine.preflight_cache import CACHE_NAME, cache_key, cached_all_clear, store_all_clear
from harness.engine.pool import DevicePool, Job, ServerPlan, new_pool, run_jobs, server_plan
from harness.engine.leftovers import find_leftover_servers
from harness.engine.server import ServerStartError, processes
from harness.engine.session import VariantSession, counter_problem
from harness.faults.plugin import REPORT_ENV
from harness.models.resolve import resolve_model
from harness.records.atomic import ResultsFolderError, check_results_folder, write_atomic
from harness.records.recorder import (
    EXIT_COULD_NOT_RUN, EXIT_GATE_FAILED, EXIT_PASSED, RECORDERS, RunRecorder, checkpoint, interrupt_all, write_final,
)
from harness.records.results import (
    config_result, plugin_dir, plugin_report, reject_counters, rel, requested, rerun_record,
    task_result, unstarted_variant,
)
from harness.records.run_folder import RunFolderTaken, claim_run_folder
from harness.records.provenance import ConfigRef, DatasetRef, LmEvalInfo, new_run_id, provenance, utc_now
from harness.records.run_record import (
    BaselineInfo, ConfigResult, LmEvalTaskRecord, PreflightRecord, RerunRecord, RunErrorRecord, RunRecord,
    ServerRecord, SubsetWarning, VariantResult, outcome_word,
)
from harness.records.samples import Sample, write_jsonl
from harness.report.dry_run import subset_warnings
from harness.report.html import write_html
from harness.report.junit import write_junit
from harness.report.progress import Progress
from harness.report.summary import render_markdown
from harness.tasks import (
    ContaminationError, DataUnavailableError, PreparedTask, SentTask, ShortDataError, TaskContext, available_questions,
    check_enough, prepare_task, task_for,
)

__all__ = [
    "run", "RunOptions", "RunInterrupted", "RunFolderExistsError", "PLACE", "Place", "record_error",
    "write_reports", "mark_not_applicable", "terminate_as_interrupt", "say_interrupted", "run_variant", "VariantRun",
]


class RunFolderExistsError(FileExistsError):
    """The run folder already holds a record; names the folder."""


@dataclass
class Place(threading.local):
    """Where the run is: the stage and the config, variant and task it is in (what an
    unexpected exception is recorded with, :class:`RunErrorRecord`). Stages: ``prepare``,
    ``model``, ``server``, ``client``, ``judging``, ``scoring``, ``statistics``, ``gates``,
    ``baseline``, ``writing``, ``run``. One per thread (variants running side by side
    each have their own, :mod:`harness.engine.pool`)."""

    stage: str = "run"
    config: str | None = None
    variant: str | None = None
    task: str | None = None

    def at(self, stage: str, **where: str | None) -> None:
        """Enter ``stage``; keyword arguments (config, variant, task) replace those parts."""
        self.stage = stage
        for k, v in where.items():
            setattr(self, k, v)


#: The place of the run in progress (one run at a time per process).
PLACE = Place()
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


@dataclass
class RunOptions:
    """How to run a plan.

    Attributes:
        results_dir: parent folder of run folders (default ``results/``).
        data_dir: GSM8K folder (test.jsonl, train.jsonl), or None.
        run_id: the run folder's name (default: a new time-based id).
        argv: the command line, for provenance.
        variants: run only these variant names (None = all).
        progress: progress reporter.
        baseline_dir: folder of stored baselines (``<config>.json``, see
            :mod:`harness.records.baselines`); a config with a baseline there is also gated
            against it. None = no baseline gates.
        allow_contamination: run tasks whose test questions overlap their few-shot
            examples or the train split (recorded: ``provenance.allow_contamination``
            and the overlaps per task in ``provenance.datasets[<task id>].contamination``).
        preflight: check every server command with the installed vLLM's argument
            parser before launching anything (:mod:`harness.engine.preflight`).
        preflight_cache: take the check's all-clear from the results folder's cache when
            the same commands passed it on the same installation before
            (:mod:`harness.engine.preflight_cache`; ``--no-preflight-cache``: False).
        gpus: ``--gpus``: the devices evalrun may use (a count or a comma list; None =
            every device found, :func:`harness.engine.devices.available_devices`).
        max_servers: ``--max-servers``: at most this many servers alive at once.
        estimates: variant id -> estimated server seconds, the order in which variants
            get devices (longest first; :func:`harness.engine.pool.server_plan`).
        launch_gate: the pre-launch check still running beside the first server
            (:class:`harness.engine.preflight.PendingCheck`; set by the runner).
    """

    results_dir: Path
    data_dir: Path | None = None
    run_id: str | None = None
    argv: list[str] = field(default_factory=lambda: list(sys.argv))
    variants: list[str] | None = None
    progress: Progress = field(default_factory=Progress)
    baseline_dir: Path | None = None
    allow_contamination: bool = False
    preflight: bool = True
    preflight_cache: bool = True
    shard: Any = None
    gpus: str | None = None
    max_servers: int | None = None
    estimates: dict[str, float] | None = None
    launch_gate: PendingCheck | None = None


def run(plan: Plan, opts: RunOptions) -> tuple[RunRecord, Path]:
    """Execute the plan and write the run folder.

    Before anything starts: servers left running by an earlier run in
    ``opts.results_dir`` are named with the command to end them
    (``record.leftover_servers``), and every selected variant's server command is
    checked with the installed vLLM's own argument parser; a rejected command or an
    interpreter that cannot run ends the run at once with exit code 2, a record naming
    the variant and why (``record.preflight``), and no server started.

    Returns:
        (the run record, the run folder). ``record.exit_code`` is 0 when every gate
        passed, 1 when a gate failed, 2 when something could not run (a server did not
        start, required data was missing) and no gate failed.

        An exception evalrun did not expect, in any stage, does not propagate: every
        server is stopped (their context managers), the record is written with status
        ``error`` and :class:`RunErrorRecord` (type, message, traceback, stage, config,
        variant, task; the traceback also in ``logs/evalrun-error.log``), everything
        measured before it is kept, and ``exit_code`` is 2.

    The results folder is checked first (writable, some free space), then the run folder
    is claimed (:func:`harness.records.run_folder.claim_run_folder`): a folder another run
    claimed, or one holding an earlier attempt, is refused.

    Raises:
        RunFolderExistsError: the run folder is claimed by another run or holds an
            earlier run (the message names the holder).
        ResultsFolderError: the results folder cannot be created or written or has too
            little free space (checked before any server starts), or the record could
            not be written later (a previous good ``run.json`` is left as it was).
        RunInterrupted: a stopping signal arrived; every server was stopped and the
            partial record (status ``interrupted``) written first.
    """
    run_id = opts.run_id or new_run_id()
    run_dir = Path(opts.results_dir) / run_id
    sp = server_plan(plan, opts.variants, opts.gpus, opts.max_servers, opts.estimates)  # DeviceError: before all
    check_results_folder(opts.results_dir)  # writable, some free space: before any server starts
    try:
        claim = claim_run_folder(run_dir, opts.argv)
    except RunFolderTaken as e:
        raise RunFolderExistsError(str(e)) from None
    except OSError as e:
        raise ResultsFolderError(f"run folder {run_dir}: cannot be created: {e.strerror or e}") from e
    try:
        return _run_claimed(plan, opts, run_id, run_dir, sp)
    finally:
        RECORDERS.clear()
        claim.release()


def _run_claimed(plan: Plan, opts: RunOptions, run_id: str, run_dir: Path,
                 sp: ServerPlan | None = None) -> tuple[RunRecord, Path]:
    """:func:`run` once the run folder is claimed: the record is on disk from here on
    (status ``running``), rewritten after every task and variant (:class:`RunRecorder`)."""
    PLACE.at("run", config=None, variant=None, task=None)
    record, lm_eval_done = _new_record(plan, opts, run_id)
    recorder = RunRecorder(record, run_dir)
    RECORDERS[:] = [recorder]
    try:
        try:
            recorder.save()  # the record exists from the start: status running
            return _run_plan(plan, opts, run_dir, record, recorder, lm_eval_done, sp), run_dir
        except Exception as e:  # noqa: BLE001 - an unexpected error is data: the record keeps it
            recorder.done = True  # the error record is the final word: a signal's handler writes nothing
            lm_eval_done(timeout=5.0)
            return record_error(record, run_dir, e, PLACE, opts.progress), run_dir
    except KeyboardInterrupt as e:  # also one arriving while the verdict or the error is written
        raise _interrupted(e, recorder, lm_eval_done) from None


def _new_record(plan: Plan, opts: RunOptions, run_id: str) -> tuple[RunRecord, Callable[..., None]]:
    """The run's record at its start (status ``running``): provenance, and servers an
    earlier run left in ``opts.results_dir`` (:mod:`harness.engine.leftovers`: only an identified
    one is named with the command to end it).
    lm-eval's version and task version, and the servers' engine build
    (``provenance.build``, :func:`harness.engine.builds.identity_or_none` of ``plan.python``),
    are filled in by threads; the second item joins them
    (``lm_eval_done(timeout=None)``), called before any server starts and before
    every final write of the record."""
    p = opts.progress
    leftovers = find_leftover_servers(Path(opts.results_dir))
    for lo in leftovers:
        p.warn(lo.describe())
    started = utc_now()
    refs = [ConfigRef(name=cp.name, path=str(cp.config.path), sha256=cp.config.sha256) for cp in plan.configs]
    record = RunRecord(run_id=run_id, provenance=provenance(opts.argv, refs, started), shard=opts.shard)
    import threading

    from harness.engine.builds import identity_or_none
    from harness.tasks.lm_eval_gsm8k import lm_eval_info

    def _lm_eval() -> None:  # version and task version of lm-eval's pipelines (never raises)
        record.provenance.lm_eval = LmEvalInfo(**lm_eval_info())

    def _build() -> None:  # the servers' engine build, a subprocess of plan.python (never raises)
        build = identity_or_none(plan.python)
        if build is not None and build.package:
            record.provenance.build = build
            record.provenance.vllm_version = f"{build.package} {build.version}"

    # lm-eval's task takes seconds to build: built beside data preparation and the pre-launch
    # check, joined (lm_eval_done) before any server starts and before every final write of the record
    lm_thread = threading.Thread(target=_lm_eval, name="evalrun-lm-eval-info", daemon=True)
    lm_thread.start()
    build_thread = threading.Thread(target=_build, name="evalrun-engine-build", daemon=True)
    build_thread.start()

    def provenance_done(timeout: float | None = None) -> None:
        lm_thread.join(timeout)
        build_thread.join(timeout)
    record.provenance.allow_contamination = opts.allow_contamination
    record.leftover_servers = leftovers
    return record, provenance_done


def _run_plan(plan: Plan, opts: RunOptions, run_dir: Path, record: RunRecord, recorder: RunRecorder,
              lm_eval_done: Callable[..., None], sp: ServerPlan | None = None) -> RunRecord:
    """The run's steps in order: short data, preflight, every config, the verdict
    (``lm_eval_done`` joins the provenance thread of :func:`_new_record`)."""
    could_not_run = False
    if _short_data(plan, opts, record):
        lm_eval_done()
        return _finish(record, run_dir, could_not_run=True)
    gate = None
    if opts.preflight:
        stop, not_applicable, gate = _preflight(plan, opts, record)
        if stop:
            lm_eval_done()
            return _finish(record, run_dir, could_not_run=True)
        plan = mark_not_applicable(plan, not_applicable)
    lm_eval_done()
    _warm_imports()
    try:
        could_not_run = _configs(plan, dataclasses.replace(opts, launch_gate=gate), run_dir, record, recorder, sp)
        if gate is not None:
            gate.settle()
            _preflight(plan, opts, record, done=gate)  # the all-clear recorded and cached
    except PreflightRefused as e:  # found beside the first server: the decision taken before any server
        record.configs.clear()
        stop, not_applicable, _ = _preflight(plan, opts, record, done=e.check)
        if stop:
            return _finish(record, run_dir, could_not_run=True)
        could_not_run = _configs(mark_not_applicable(plan, not_applicable), opts, run_dir, record, recorder, sp)
    return _finish(record, run_dir, could_not_run)


def _configs(plan: Plan, opts: RunOptions, run_dir: Path, record: RunRecord, recorder: RunRecorder,
             sp: ServerPlan | None) -> bool:
    """Run every config (:func:`_config_results`), saving the record after each; whether
    something required could not run."""
    could_not_run = False
    for crec, cnr in _config_results(plan, opts, run_dir, record, sp):
        crec.list_path = plan.list_path  # the model list file that was read
        could_not_run |= cnr
        PLACE.at("writing", variant=None, task=None)
        recorder.save()  # keep what is measured so far
    PLACE.at("writing", config=None, variant=None, task=None)
    return could_not_run


def _warm_imports() -> None:
    """Import what only statistics and reports need (scipy's distributions, matplotlib)
    in a daemon thread while the first server starts, so their seconds of first import
    overlap the wait instead of following the last request. Never raises: an import that
    fails here fails again, and is reported, where it is used."""

    def warm() -> None:
        for name in ("scipy.stats", "matplotlib", "matplotlib.figure"):
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the real import reports it where it is used
                continue

    threading.Thread(target=warm, name="evalrun-warm-imports", daemon=True).start()


def _interrupted(e: KeyboardInterrupt, recorder: RunRecorder, lm_eval_done: Callable[..., None]) -> RunInterrupted:
    """After a stopping signal: the signal handler wrote the record (interrupted) before
    any server was stopped; every server's context manager has now stopped its process
    group. Check, rewrite the record and its reports; the :class:`RunInterrupted` to raise.

    A record whose final word (verdict or error) was on disk before the signal keeps it:
    only ``summary.md`` and ``junit.xml`` are written again (the signal may have cut them
    short), ``summary.html`` is left, and the exit code is the record's."""
    # (variants side by side: every job thread has ended, :func:`harness.engine.pool.run_jobs`)
    record, run_dir = recorder.record, recorder.run_dir
    leftover = sorted({pid for pids in processes().unstopped().values() for pid in pids})
    sig = str(e.args[0]) if e.args else "KeyboardInterrupt"
    kept = recorder.final_written and record.status != "interrupted"
    if not kept:
        recorder.mark_interrupted(sig)
        recorder.done = True
        lm_eval_done(timeout=5.0)
        recorder.final()
    # CI's test-report step shows the record's outcome, not an absent or stale file
    write_reports(record, run_dir, html=False)
    code = record.exit_code if kept and record.exit_code is not None else EXIT_COULD_NOT_RUN
    return RunInterrupted(run_dir, sig, leftover, exit_code=code, kept=outcome_word(record.outcome) if kept else None,
                          record=record)


def record_error(record: RunRecord, run_dir: Path, exc: BaseException, place: Place,
                 progress: Progress | None = None) -> RunRecord:
    """Turn an exception evalrun did not expect into the run's outcome.

    Checks that no server of evalrun is left (each server's context manager stopped
    its group as the exception passed; any still alive gets SIGKILL to its group),
    sets ``status`` ``error``, ``exit_code`` 2 and ``record.error`` (type, message,
    traceback, stage, config, variant, task from ``place``), writes the traceback to
    ``logs/evalrun-error.log`` and the record to ``run.json`` (everything measured
    before the exception is already in the record and the samples).

    Returns:
        the record.

    Raises:
        ResultsFolderError: the record cannot be written (the previous ``run.json``, if
            any, is left as it was); names the run folder, the write error and the
            original exception.
    """
    import traceback

    if processes().unstopped():
        processes().hurry()  # SIGKILL to every live group; the context managers already waited
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    record.status, record.passed, record.exit_code = "error", None, EXIT_COULD_NOT_RUN
    record.error = RunErrorRecord(
        type=f"{type(exc).__module__}.{type(exc).__qualname__}", message=str(exc), traceback=tb,
        stage=place.stage, config=place.config, variant=place.variant, task=place.task,
    )
    record.provenance.ended_at = utc_now()
    try:
        log = run_dir / ERROR_LOG
        log.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(log, f"{record.error.type}: {record.error.message}\n{record.error.where()}\n\n{tb}")
    except OSError as e:
        if progress is not None:
            progress.warn(f"{run_dir / ERROR_LOG}: traceback not written: {e}")
    try:
        write_final(run_dir, record)  # from here on a signal keeps the error outcome
    except OSError as e:
        raise ResultsFolderError(
            f"run folder {run_dir}: the record cannot be written: {e.strerror or e} "
            f"({getattr(e, 'filename', None) or run_dir}); the run had ended with "
            f"{record.error.type}: {record.error.message} ({record.error.where()})") from e
    write_reports(record, run_dir)  # best effort: a failure here is a warning
    return record


def _finish(record: RunRecord, run_dir: Path, could_not_run: bool) -> RunRecord:
    """Set status, verdict and exit code from the gates; write run.json, summary.md,
    junit.xml and summary.html. A report that cannot be rendered or written is a
    warning on stderr, never the verdict (:func:`write_reports`); ``run.json`` that
    cannot be written raises (OSError, the caller's ``error`` path)."""
    verdicts = [g.passed for g in record.gates()]
    if any(v is False for v in verdicts):
        code, passed = EXIT_GATE_FAILED, False
    elif could_not_run or any(v is None for v in verdicts):
        code, passed = EXIT_COULD_NOT_RUN, None
    else:
        code, passed = EXIT_PASSED, True
    # an optional task that could not run is reported, but does not by itself fail the run
    if code == EXIT_COULD_NOT_RUN and not could_not_run:
        code, passed = EXIT_PASSED, None
    record.status = "completed" if not could_not_run else "incomplete"
    record.passed, record.exit_code = passed, code
    record.provenance.ended_at = utc_now()
    write_final(run_dir, record)  # from here on a signal keeps this verdict
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


def _short_data(plan: Plan, opts: RunOptions, record: RunRecord) -> bool:
    """Before any server starts: every selected task whose data can be counted here
    (a local GSM8K folder, the synthetic set; :func:`harness.tasks.available_questions`)
    must hold the questions it asks (:func:`harness.tasks.check_enough`). On a short
    task, fill ``record.configs`` with every config NOT RUN (``error`` naming the file
    and both counts) and return True; the run then ends with exit code 2. Data that
    cannot be read is left to the task's own preparation (required / optional)."""
    problems: dict[str, list[str]] = {}
    for cp in plan.configs:
        for t in cp.tasks:
            try:
                got = available_questions(t.name, t.spec, opts.data_dir)
                if got is not None:
                    check_enough(t.name, t.spec, *got)
            except DataUnavailableError:
                continue
            except ShortDataError as e:
                problems.setdefault(cp.name, []).append(str(e))
    if not problems:
        return False
    p = opts.progress
    for name, msgs in problems.items():
        for msg in msgs:
            p.error(f"{name}: {msg}")
    for cp in plan.configs:
        m = Measurements()
        said = problems.get(cp.name)
        crec = config_result(cp.config, error=("; ".join(said) if said else
                                               "not started: another config's data holds fewer questions than it asks"))
        for vp in cp.variants:
            m.variant_record(vp.name).not_run = "short data: refused before any server started"
        crec.gates = evaluate_gates(cp.gates, m)
        record.configs.append(crec)
    return True


def mark_not_applicable(plan: Plan, reasons: dict[str, str]) -> Plan:
    """The plan with the variants named in ``reasons`` (variant id -> reason) marked not
    applicable: they start no server and their gates are NOT RUN with the reason."""
    import dataclasses

    if not reasons:
        return plan
    cps = tuple(dataclasses.replace(cp, variants=tuple(
        dataclasses.replace(v, not_applicable=reasons[v.id]) if v.id in reasons else v for v in cp.variants))
        for cp in plan.configs)
    return dataclasses.replace(plan, configs=cps)


def _preflight(plan: Plan, opts: RunOptions, record: RunRecord, done: PendingCheck | None = None
               ) -> tuple[bool, dict[str, str], PendingCheck | None]:
    """Check every selected variant's server command with vLLM's own parser and its
    async-scheduling/drafter rule (:func:`harness.engine.preflight.start_check`),
    recorded in ``record.preflight``; ``done``: the answer of a check started before.

    Returns:
        (stop, not applicable, the check when it still runs after its head start: the
        first server starts beside it, the caller decides with ``done`` later). A variant
        vLLM would refuse only for async scheduling with its drafter is returned in the
        second item (variant id -> vLLM's reason) and runs as not applicable. On any
        other problem, ``record.configs`` is filled with every variant NOT RUN (the
        rejected ones with their reason and ``server.status`` ``args_rejected`` /
        ``launch_failed``, the others ``not_started``) and stop is True.
    """
    import time

    p = opts.progress
    cmds = [
        ServerCommand(vp.id, cp.config.path, tuple(a.replace("{port}", "8000") for a in vp.argv),
                      {k: v for k, v in vp.env.items() if not k.startswith("EVALRUN_")},  # no fault in a check
                      speculates=vp.speculative_config is not None)
        for cp in plan.configs for vp in cp.variants
        if (opts.variants is None or vp.name in opts.variants) and not vp.not_applicable
    ]
    t0 = time.monotonic()
    key = cache_key(cmds) if opts.preflight_cache else None
    if done is None and cached_all_clear(opts.results_dir, key, len(cmds)):
        p.log(f"{len(cmds)} server command(s): the installed vLLM's argument parser accepted these exact "
              f"commands before (cache {Path(opts.results_dir) / CACHE_NAME}; --no-preflight-cache checks again)")
        record.preflight = PreflightRecord(checked=len(cmds), seconds=round(time.monotonic() - t0, 1), cached=True)
        return False, {}, None
    if done is None:
        p.log(f"checking {len(cmds)} server command(s) with the installed vLLM's argument parser")
        done = start_check(cmds, check=check_server_commands)
        if not done.wait(0):
            p.log("  the first server starts beside the check; every later one waits for its answer")
            return False, {}, done
    found = done.result()
    if not found:
        why = store_all_clear(opts.results_dir, key, len(cmds))
        if why:
            p.warn(f"the pre-launch check's cache was not written: {why}")
    not_applicable = {pr.variant: pr.message for pr in found if pr.kind == ASYNC_NOT_SUPPORTED}
    for vid, why in not_applicable.items():
        p.warn(f"{vid}: not applicable on this engine: {why}")
    problems = [pr for pr in found if pr.kind != ASYNC_NOT_SUPPORTED]
    record.preflight = PreflightRecord(
        checked=len(cmds), seconds=round(done.seconds, 1),
        problems=found,
    )
    if not problems:
        return False, not_applicable, None
    for pr in problems:
        p.error(f"server command rejected before launch: {pr.describe()}")
    _refused_before_launch(plan, {pr.variant: pr for pr in problems}, record)
    return True, not_applicable, None


def _refused_before_launch(plan: Plan, bad: dict[str, Any], record: RunRecord) -> None:
    """Fill ``record.configs`` with every variant NOT RUN because server commands were
    rejected before launch (``bad``: variant id -> the preflight problem)."""
    for cp in plan.configs:
        m = Measurements()
        crec = config_result(cp.config)
        for vp in cp.variants:
            pr = bad.get(vp.id)
            if pr is not None:
                vrec = unstarted_variant(vp, pr.kind, f"server command rejected before launch: {pr.message}")
                reason = f"{pr.kind}: {pr.message}"
            else:
                reason = "not started: another variant's server command was rejected before launch"
                vrec = unstarted_variant(vp, "not_started", reason)
            crec.variants[vp.name] = vrec
            m.variant_record(vp.name).not_run = reason
        crec.gates = evaluate_gates(cp.gates, m)
        record.configs.append(crec)


def _config_results(plan: Plan, opts: RunOptions, run_dir: Path, record: RunRecord,
                    sp: ServerPlan | None):
    """``(config result, could not run)`` of every config, in plan order. On a CPU host
    (``sp`` None or without devices) each config runs when asked for, as before. On a
    GPU host every config runs in its own thread at once and its variants lease
    disjoint device sets of one pool (:mod:`harness.engine.pool`), so variants of
    different configs share the node; a config's comparisons and gates run when all
    its variants finished. An unexpected error keeps the place where it happened."""
    if sp is None or not sp.uses_pool:
        for cp in plan.configs:
            yield _run_config(cp, opts, run_dir, record)
        return
    pool = new_pool(sp)
    opts.progress.log(f"devices {','.join(sp.devices)}: variants side by side on disjoint sets, longest first"
                      + (f", at most {sp.max_servers} server(s) at once" if sp.max_servers else ""))

    def one_config(cp: ConfigPlan, _devices: tuple[str, ...]) -> tuple[ConfigResult, bool]:
        try:
            out = _run_config(cp, opts, run_dir, record, pool=pool, sp=sp)
        except Exception as e:
            if not hasattr(e, "evalrun_place"):
                e.evalrun_place = (PLACE.stage, PLACE.config, PLACE.variant, PLACE.task)  # type: ignore[attr-defined]
            raise
        finally:  # variants it did not run (data, model, not selected) hold no place in the order
            pool.withdraw([vp.id for vp in cp.variants])
        checkpoint()  # the config's comparisons and gates are on disk before the others end
        return out

    try:
        results = run_jobs([Job(cp.name, functools.partial(one_config, cp)) for cp in plan.configs], pool)
    except Exception as e:
        where = getattr(e, "evalrun_place", None)
        if where is not None:
            PLACE.at(where[0], config=where[1], variant=where[2], task=where[3])
        raise
    finally:  # the record's configs in plan order, whichever thread appended first
        order = {cp.name: i for i, cp in enumerate(plan.configs)}
        record.configs.sort(key=lambda r: order.get(r.name, len(order)))
    yield from results


def _run_config(cp: ConfigPlan, opts: RunOptions, run_dir: Path, record: RunRecord,
                pool: DevicePool | None = None, sp: ServerPlan | None = None) -> tuple[ConfigResult, bool]:
    """Run one config: its tasks prepared, its model resolved, every selected variant,
    the comparisons (and the baseline reruns they need), its gates. Returns the config's
    record (already in ``record.configs``, filled in place so an interrupt keeps what ran)
    and whether something required could not run."""
    c = cp.config
    crec = config_result(c, tasks={name: spec.model_dump(mode="json", exclude={"gates"})
                                   for name, spec in c.tasks.items()})
    record.configs.append(crec)  # filled in place, so an interrupt keeps what ran
    m = Measurements()
    variants = _select_variants(cp, opts, crec, m)
    # 1. tasks: data first, so a missing data set stops before minutes of server start-up.
    prepared, could_not_run = _prepare_tasks(cp, opts, record, m)
    # 1b. a run smaller than the set its threshold was measured on: say so now
    crec.subset_warnings = [SubsetWarning(**w) for w in subset_warnings(c)]
    for w in crec.subset_warnings:
        opts.progress.warn(f"{c.name}: {w.message}")
    # 2. the model
    model_ref = _prepare_model(cp, crec, m, opts.progress)
    if model_ref is None:
        crec.gates = evaluate_gates(cp.gates, m)
        return crec, True
    # 3. variants
    reruns: dict[tuple[str, str], tuple[Sample, ...]] = {}
    m.runners_collected = True  # every variant's model runner is read (_run_and_report_variant)
    def one_variant(vp: VariantPlan, devices: tuple[str, ...] = ()) -> bool:
        return _run_and_report_variant(cp, vp, model_ref, prepared, opts, run_dir, m, reruns, crec, pool, devices)

    if pool is None or sp is None:  # a CPU host: one at a time, in this thread (the pool comes with its plan)
        oks = [one_variant(vp) for vp in variants]
    else:
        pool.withdraw([vp.id for vp in cp.variants if vp not in variants])  # never asking for devices
        oks = run_jobs([Job(vp.id, functools.partial(one_variant, vp), need=sp.need(vp.id)) for vp in variants],
                       pool)
    could_not_run |= not all(oks)
    # 4. comparisons (the record's paired test reads each task's own pipeline); a
    # baseline rerun for noise only where divergences are left that no distribution judges
    _comparisons(cp, variants, model_ref, prepared, opts, run_dir, m, reruns, crec, pool, sp)
    # 5. gates, 6. gates against the stored baseline (last known good), when there is one
    _judge(cp, opts, m, crec)
    return crec, could_not_run


def _select_variants(cp: ConfigPlan, opts: RunOptions, crec: ConfigResult, m: Measurements) -> list[VariantPlan]:
    """The config's warnings said and recorded; the variants that will run (selected
    with ``--variant`` and applicable). Unselected ones are NOT RUN; not applicable ones
    get a record naming why (never a pass)."""
    p = opts.progress
    crec.config_warnings = list(cp.config.warnings)
    for w in cp.config.warnings:
        p.warn(w.message)
    variants = [v for v in cp.variants if opts.variants is None or v.name in opts.variants]
    for name in [v.name for v in cp.variants if v not in variants]:
        m.variant_record(name).not_run = "variant not selected (--variant)"
    for v in [v for v in variants if v.not_applicable]:  # the engine cannot run it: never a pass
        m.variant_record(v.name).not_run = f"not applicable: {v.not_applicable}"
        crec.variants[v.name] = unstarted_variant(v, "not_started", f"not applicable: {v.not_applicable}")
    return [v for v in variants if not v.not_applicable]


def _prepare_tasks(cp: ConfigPlan, opts: RunOptions, record: RunRecord, m: Measurements
                   ) -> tuple[dict[str, PreparedTask], bool]:
    """Prepare every task of the config (:func:`harness.tasks.prepare_task`), recording
    each dataset in ``record.provenance.datasets``. A task that cannot be prepared is
    NOT RUN on every variant with the reason. Returns the prepared tasks by name and
    whether a required one could not be prepared."""
    p, c = opts.progress, cp.config
    prepared: dict[str, PreparedTask] = {}
    could_not_run = False
    for t in cp.tasks:
        PLACE.at("prepare", config=c.name, variant=None, task=t.name)
        reason = None
        try:
            pt = prepared[t.name] = prepare_task(t.name, t.spec, opts.data_dir, opts.allow_contamination,
                                                 base_dir=Path(c.path).parent)
            record.provenance.datasets[t.id] = DatasetRef(
                sha256=pt.dataset_hash, source=pt.source, num_requests=len(pt.requests), stop=list(pt.stop),
                contamination=pt.contamination,
            )
            kind = task_for(t.spec.kind)
            if not kind.generates_text(pt):
                m.prompt_only[t.name] = kind.not_text_reason(pt)
            if pt.contamination:
                p.warn(f"{c.name}: task {t.name}: contaminated data run anyway (--allow-contamination): "
                       f"{pt.contamination}")
        except ContaminationError as e:
            could_not_run |= t.spec.required
            p.error(f"{c.name}: {e}")
            reason = "contaminated data refused (test questions among the few-shot examples or the train split)"
        except ShortDataError as e:  # counted only now (an lm-eval task, hub data): refused all the same
            could_not_run = True
            p.error(f"{c.name}: {e}")
            reason = "short data: fewer questions than num_questions asks"
        except DataUnavailableError as e:
            msg = f"task {t.name}: data not available: {e}"
            if t.spec.required:
                could_not_run = True
                p.error(f"{c.name}: {msg}")
            else:
                p.warn(f"{c.name}: NOT RUN (optional task): {msg}")
            reason = f"data not available ({'required' if t.spec.required else 'optional'} task)"
        if reason is not None:
            for v in cp.variants:
                m.task_record(v.name, t.name).not_run = reason
    return prepared, could_not_run


def _prepare_model(cp: ConfigPlan, crec: ConfigResult, m: Measurements, p: Progress) -> str | None:
    """The config's model made available (:func:`harness.models.resolve.resolve_model`);
    None when it cannot be (``crec.error`` says why, every variant NOT RUN)."""
    c = cp.config
    PLACE.at("model", variant=None, task=None)
    try:
        model_ref = resolve_model(c.model, p)
        crec.model_path = model_ref
        return model_ref
    except Exception as e:  # noqa: BLE001 - any build failure stops this config, recorded
        crec.error = f"model {c.model}: cannot be prepared: {type(e).__name__}: {e}"
        p.error(f"{c.name}: {crec.error}")
        for v in cp.variants:
            m.variant_record(v.name).not_run = "model not available"
        return None


def _run_and_report_variant(cp: ConfigPlan, vp: VariantPlan, model_ref: str, prepared: dict[str, PreparedTask],
                            opts: RunOptions, run_dir: Path, m: Measurements, reruns: dict,
                            crec: ConfigResult, pool: DevicePool | None = None, devices: tuple[str, ...] = ()) -> bool:
    """Run one variant (:func:`run_variant`; on ``devices`` of ``pool`` when given),
    merge what it measured into ``m`` and ``reruns``, then read its plugin reports and
    model runner. False when its server failed."""
    if devices:  # its own device set, side by side with others (harness.engine.pool)
        vp = dataclasses.replace(vp, env={**vp.env, "CUDA_VISIBLE_DEVICES": ",".join(devices)})
    try:
        out = run_variant(cp, vp, model_ref, prepared, opts, run_dir, into=crec.variants,
                          on_stopped=None if pool is None else functools.partial(pool.release, vp.id))
    except Exception as e:  # the variant's thread knows where it was: keep it for the record
        if pool is not None and not hasattr(e, "evalrun_place"):
            e.evalrun_place = (PLACE.stage, PLACE.config, PLACE.variant, PLACE.task)  # type: ignore[attr-defined]
        raise
    out.merge_into(m, reruns)
    if pool is not None:  # released when its server stopped (before judging); here too if it never started
        pool.release(vp.id)
    if pool is not None and pool.cancelled.is_set() and processes().interrupting():  # stopped by the signal
        vr = crec.variants[vp.name]
        vr.server = ServerRecord(status="interrupted", exit_code=vr.server.exit_code, seconds=vr.server.seconds,
                                 pid=vr.server.pid)
        vr.error = "interrupted by a signal" + (f" ({vr.error})" if vr.error else "")
    c = cp.config
    PLACE.at("server", config=c.name, variant=vp.name, task=None)  # the plugin's per-process reports
    plugin = plugin_report(run_dir, c.name, vp)
    crec.variants[vp.name].plugin = plugin
    fact = model_runner_fact(plugin.model_runners, _read_log(run_dir, c.name, vp.name))
    crec.variants[vp.name].model_runner = fact
    m.variant_record(vp.name).runner = fact
    return out.ok


def _comparisons(cp: ConfigPlan, variants: list[VariantPlan], model_ref: str, prepared: dict[str, PreparedTask],
                 opts: RunOptions, run_dir: Path, m: Measurements, reruns: dict, crec: ConfigResult,
                 pool: DevicePool | None = None, sp: ServerPlan | None = None) -> None:
    """The config's comparisons (:func:`harness.analysis.comparison.compare`); then the
    baseline reruns for noise they need (:func:`rerun_needs`) and, after them, the
    comparisons again."""
    c = cp.config
    crec.comparisons = compare(c, m, reruns, at=PLACE.at)
    needs = rerun_needs(c, m, reruns)
    for vname, tasks in needs.items():
        vp = next((v for v in variants if v.name == vname), None)
        if vp is None:
            continue
        todo = {t: prepared[t] for t in tasks if t in prepared}
        if pool is None or sp is None:
            _rerun_when_needed(cp, vp, model_ref, todo, opts, run_dir, m, reruns, crec.variants[vname])
            continue
        key = vp.id + " (rerun)"
        with pool.lease(key, sp.need(vp.id)) as devices:  # a server again: its own devices
            _rerun_when_needed(cp, dataclasses.replace(vp, env={**vp.env, "CUDA_VISIBLE_DEVICES": ",".join(devices)}),
                               model_ref, todo, opts, run_dir, m, reruns, crec.variants[vname],
                               on_stopped=functools.partial(pool.release, key))
    if needs:
        crec.comparisons = compare(c, m, reruns, needs, at=PLACE.at)


def _judge(cp: ConfigPlan, opts: RunOptions, m: Measurements, crec: ConfigResult) -> None:
    """The config's gates, and its gates against the stored baseline when there is one."""
    c = cp.config
    PLACE.at("gates", config=c.name, variant=None, task=None)
    crec.gates = evaluate_gates(cp.gates, m)
    if opts.baseline_dir is not None:
        PLACE.at("baseline")
        crec.baseline = _load_baseline(opts.baseline_dir, c.name, m)
        crec.gates += judged_baseline_gates(cp.baseline_gates, m)
        if crec.baseline.found and m.baseline is not None:
            crec.baseline.notes = baseline_notes(cp.baseline_gates, m)


def _read_log(run_dir: Path, config: str, variant: str) -> str | None:
    try:
        return (run_dir / "logs" / config / f"{variant}.log").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _load_baseline(baseline_dir: Path, config: str, m: Measurements) -> BaselineInfo:
    """Read ``<baseline_dir>/<config>.json`` into ``m.baseline`` (or ``m.baseline_error``)."""
    from harness.records.baselines import BaselineError, baseline_path, load_baseline

    path = baseline_path(baseline_dir, config)
    info = BaselineInfo(path=str(path), found=path.is_file())
    if not info.found:
        return info
    try:
        m.baseline = load_baseline(path)
    except BaselineError as e:
        m.baseline_error = info.error = str(e)
        return info
    info.source_run_id = m.baseline.source_run.run_id
    info.written_at = m.baseline.written_at
    return info


def _rerun_when_needed(cp: ConfigPlan, vp: VariantPlan, model_ref: str, tasks: dict[str, PreparedTask],
                       opts: RunOptions, run_dir: Path, m: Measurements, reruns: dict, vrec: VariantResult,
                       on_stopped: Callable[[], None] | None = None) -> None:
    """Start ``vp``'s server again and rerun ``tasks`` for noise (``noise_runs_when:
    unexplained``): each task's ``rerun`` entry and ``<task>.rerun.jsonl`` as with an
    inline rerun; the server log is ``<variant>.rerun.log``. A server that does not
    start leaves the reruns missing (the comparisons then say so; their fallback
    questions stay unexplained). The reruns are sent while the server is up and judged
    after it is stopped and ``on_stopped`` called."""
    p = opts.progress
    c = cp.config
    if not tasks or not vrec.tasks:
        return
    log_path = run_dir / "logs" / c.name / f"{vp.name}.rerun.log"
    argv = [model_ref if a == c.model else a for a in vp.argv]
    env = {**vp.env, REPORT_ENV: str(plugin_dir(run_dir, c.name, vp.name + ".rerun"))}
    p.log(f"{vp.id}: rerun for noise, needed by divergences no reference distribution judges "
          f"(tasks {', '.join(tasks)}); starting the server again (log: {log_path})")
    session = VariantSession(
        vp.id + " (rerun)", argv, env, log_path, startup_timeout=c.startup_max_wait_seconds,
        request_timeout=c.request_timeout_seconds, max_concurrency=c.max_concurrency,
        speculative=vp.speculative_config is not None, on_wait=p.waiting(f"{vp.id} (rerun): waiting for /health"),
    )
    tplans = {t.name: t for t in cp.tasks}
    PLACE.at("server", config=c.name, variant=vp.name, task=None)
    sent: dict[str, tuple[TaskContext, SentTask]] = {}  # sent on the server, judged once it is stopped
    try:
        with session:
            for tname, pt in tasks.items():
                first = m.task(vp.name, tname).samples
                if first is None or tname not in vrec.tasks or not task_for(tplans[tname].spec.kind).reruns_for_noise:
                    continue
                PLACE.at("client", task=tname)  # the noise rerun's requests
                sent[tname] = _send_rerun(session, c, vp, tplans[tname], pt, p, argv, model_ref)
    except ServerStartError as e:
        p.error(f"{vp.id}: the rerun for noise could not run: {e}")
        vrec.error = (vrec.error + "\n" if vrec.error else "") + f"rerun for noise could not run: {e}"
        return
    finally:
        if on_stopped is not None:  # its devices are free before judging
            on_stopped()
    for tname, (ctx, st) in sent.items():
        PLACE.at("client", config=c.name, variant=vp.name, task=tname)  # the rerun's judging and samples file
        vrec.tasks[tname].rerun = _judge_rerun(c, vp, tplans[tname], tasks[tname], run_dir,
                                               tuple(m.task(vp.name, tname).samples or ()), reruns, p, ctx, st)
        checkpoint()


@dataclass
class VariantRun:
    """What running one variant produced (:func:`run_variant`); the caller merges it
    into the config's measurements (:meth:`merge_into`), so a variant shares no state
    with the others while it runs.

    Attributes:
        record: the variant's record.
        ok: False when its server failed (start-up, or died mid-task).
        measured: the variant's own records (:class:`Measurements`): per task its score,
            samples, acceptance figures (counters that passed the check), metrics error
            or why it did not run; per variant the effective-config check, why the
            engine facts could not be read or why it did not run.
        reruns: ``(variant, task)`` -> samples of the inline noise rerun.
    """

    record: VariantResult
    ok: bool = True
    measured: Measurements = field(default_factory=Measurements)
    reruns: dict[tuple[str, str], tuple[Sample, ...]] = field(default_factory=dict)

    def merge_into(self, m: Measurements, reruns: dict[tuple[str, str], tuple[Sample, ...]]) -> None:
        """Add what this variant measured to the config's measurements and reruns."""
        m.absorb(self.measured)
        reruns.update(self.reruns)


def run_variant(cp: ConfigPlan, vp: VariantPlan, model_ref: str, prepared: dict[str, PreparedTask],
                opts: RunOptions, run_dir: Path, into: dict[str, VariantResult] | None = None,
                on_stopped: Callable[[], None] | None = None) -> VariantRun:
    """Run one variant: its server, engine facts, tasks. ``into[vp.name]`` receives
    the variant record as soon as it exists (so an interrupt keeps it).

    Every task's requests (and its inline noise rerun) are sent while the server is up
    (:meth:`harness.tasks.base.Task.send`); the server is then stopped, ``on_stopped``
    called (the device pool takes its devices back), and only then is each task judged,
    scored and recorded (:meth:`harness.tasks.base.Task.judge`), so no device waits on
    CPU work. An lm-eval task judges inside lm-eval's own loop, i.e. while sending.
    On a stopping signal the tasks already sent are still judged and recorded.

    The server's fate is ``vrec.server`` (:class:`ServerRecord`: ``ready``,
    ``exited_early``, ``not_ready_timeout``, ``launch_failed``, ``died_mid_task``,
    ``interrupted``, with exit code and seconds); ``vrec.engine_error`` says why the
    effective configuration could not be read (``variant_effective`` then fails).
    A task whose counters are impossible (:func:`harness.engine.session.counter_problem`)
    gets ``spec_decode`` None and ``spec_decode_error`` naming the counters, so its
    acceptance gates fail.

    Raises:
        KeyboardInterrupt: a stopping signal (the record says ``interrupted``).
    """
    c = cp.config
    log_path = run_dir / "logs" / c.name / f"{vp.name}.log"
    argv = [model_ref if a == c.model else a for a in vp.argv]
    vrec = VariantResult(argv=argv, env=dict(vp.env), fault=vp.fault, log=rel(log_path, run_dir),
                         requested=requested(vp))
    out = VariantRun(vrec)
    if into is not None:
        into[vp.name] = vrec
    PLACE.at("server", config=c.name, variant=vp.name, task=None)
    todo = [t for t in cp.tasks if t.name in prepared]
    if not todo:
        vrec.error = "no task of this config can run"
        out.measured.variant_record(vp.name).not_run = vrec.error
        return out
    env = {**vp.env, REPORT_ENV: str(plugin_dir(run_dir, c.name, vp.name))}
    if opts.launch_gate is not None:  # a later server waits for the pre-launch check's answer
        opts.launch_gate.before_launch()
    session = _variant_session(cp, vp, argv, env, log_path, opts.progress)
    srv = session.server
    from harness.engine.devices import given_devices

    vrec.devices = given_devices({**os.environ, **env})
    sent: list[_Sent] = []  # sent while the server is up, judged once it is stopped
    try:
        with session:
            _server_ready(session, cp, vp, out, opts.progress)
            t_eval = time.monotonic()  # evaluation: first request .. last counter snapshot
            for t in todo:
                _send_task(session, cp, vp, t, prepared[t.name], argv, model_ref, opts, run_dir, sent)
            vrec.evaluation_seconds = round(time.monotonic() - t_eval, 2)
            t_stop = time.monotonic()
        vrec.teardown_seconds = round(time.monotonic() - t_stop, 2)
        vrec.server.exit_code = srv.exit_code
    except KeyboardInterrupt:
        vrec.server = ServerRecord(status="interrupted", exit_code=srv.exit_code, seconds=vrec.server.seconds,
                                   pid=srv.pid)
        vrec.error = "interrupted by a signal"
        _judge_all_before_interrupt(cp, vp, sent, opts, run_dir, out)
        raise
    except ServerStartError as e:
        if on_stopped is not None:
            on_stopped()
        if opts.launch_gate is not None:  # the check's refusal of these arguments, not a crash log
            opts.launch_gate.settle()
        _judge_all(cp, vp, sent, opts, run_dir, out)  # the tasks it finished before it died
        _server_failed(e, session, vp, todo, argv, out, opts.progress)
        return out
    if on_stopped is not None:  # its devices are free before judging, statistics and reports
        on_stopped()
    _judge_all(cp, vp, sent, opts, run_dir, out)
    return out


def _variant_session(cp: ConfigPlan, vp: VariantPlan, argv: list[str], env: dict[str, str], log_path: Path,
                     p: Progress) -> VariantSession:
    """The variant's session (not started yet), its command said first."""
    c = cp.config
    p.log(f"{vp.id}: starting the vLLM server (log: {log_path})")
    p.log(f"  $ {shell_line(argv, vp.env)}")
    p.log(f"  ({PORT_PLACEHOLDER} is the free port chosen at start-up; "
          "the server log's first lines hold the exact command)")
    return VariantSession(
        vp.id, argv, env, log_path,
        startup_timeout=c.startup_max_wait_seconds,
        request_timeout=c.request_timeout_seconds,
        max_concurrency=c.max_concurrency,
        speculative=vp.speculative_config is not None,
        on_wait=p.waiting(f"{vp.id}: waiting for /health"),
    )


def _server_ready(session: VariantSession, cp: ConfigPlan, vp: VariantPlan, out: VariantRun, p: Progress) -> None:
    """The server answered: its start-up in the record, then the engine's facts and
    whether the variant is effective as asked (:func:`check_effective`)."""
    c, vrec, srv = cp.config, out.record, session.server
    vrec.startup_seconds = round(srv.startup_seconds or 0, 1)
    vrec.server = ServerRecord(status="ready", seconds=vrec.startup_seconds, pid=srv.pid)
    p.log(f"{vp.id}: server ready in {vrec.startup_seconds}s on {session.base_url}")
    checkpoint()
    try:
        facts = session.engine_facts()
        vrec.engine = facts
        if facts.platform == "rocm" and c.rocm_request_timeout_seconds is not None:
            # vLLM's test reads rocm_request_timeout_seconds on ROCm only; so does evalrun
            session.request_timeout = c.rocm_request_timeout_seconds
            p.log(f"{vp.id}: ROCm engine: request timeout {c.rocm_request_timeout_seconds:g} s "
                  "(rocm_request_timeout_seconds)")
        if facts.vllm_version is None:  # the session reads /version leniently
            raise EngineInfoError(f"{vp.id}: cannot read the engine's version from /version")
        eff = check_effective(facts, vp.speculative_config, vp.async_scheduling, vp.expected_effective)
        vrec.effective = eff
        out.measured.variant_record(vp.name).effectiveness = eff
        if not eff.effective:
            p.warn(f"{vp.id}: not effective as asked: {eff.mismatches}"
                   + (" (declared expected on this platform)" if eff.expected_on_platform else ""))
    except EngineInfoError as e:
        vrec.engine_error = str(e)
        out.measured.variant_record(vp.name).engine_facts_error = str(e)
        p.error(f"{e} (variant_effective cannot pass without it)")


def _task_context(c: Any, vp: VariantPlan, t: Any, argv: list[str], model_ref: str, p: Progress,
                  raw_path: Path | None, label: str, at: Any = None) -> TaskContext:
    """Where task ``t`` runs on variant ``vp`` (:class:`harness.tasks.base.TaskContext`)."""
    extra = {} if at is None else {"at": at}
    return TaskContext(
        config=c.name, variant=vp.name, variant_id=vp.id, task=t.name, spec=t.spec,
        per_request=c.per_request_metrics, max_concurrency=c.max_concurrency,
        request_timeout=c.request_timeout_seconds, logprobs=vp.logprobs, server_argv=tuple(argv),
        model_ref=model_ref, raw_path=raw_path, label=label, log=p.log, warn=p.warn, error=p.error, bar=p.bar,
        **extra,
    )


@dataclass
class _Sent:
    """One task sent on a variant's server, not judged yet: its plan, prepared data,
    context and what :meth:`harness.tasks.base.Task.send` returned; ``rerun`` the
    context and sent result of its inline noise rerun, when one ran."""

    task: Any
    pt: PreparedTask
    ctx: TaskContext
    sent: SentTask
    rerun: tuple[TaskContext, SentTask] | None = None


def _send_task(session: VariantSession, cp: ConfigPlan, vp: VariantPlan, t: Any, pt: PreparedTask, argv: list[str],
               model_ref: str, opts: RunOptions, run_dir: Path, sent: list[_Sent]) -> None:
    """One task's server work on the variant's running server: its requests
    (:meth:`harness.tasks.base.Task.send`) and, when the config asks for it, its inline
    noise rerun; appended to ``sent`` (for :func:`_judge_task`), then a dead server raised.

    Raises:
        ServerStartError: the server died during the task (``died_mid_task``).
    """
    c, p = cp.config, opts.progress
    PLACE.at("client", variant=vp.name, task=t.name)
    kind = task_for(t.spec.kind)
    samples_dir = run_dir / "samples" / c.name / vp.name
    ctx = _task_context(c, vp, t, argv, model_ref, p, samples_dir / f"{t.name}.raw.jsonl", f"{vp.id} {t.name}",
                        at=PLACE.at)
    item = _Sent(t, pt, ctx, kind.send(session, ctx, pt))
    sent.append(item)
    if vp.name in noise_variants(cp) and kind.reruns_for_noise and session.server.alive():
        PLACE.at("client")  # the noise rerun's requests
        rctx = _task_context(c, vp, t, argv, model_ref, p, None, f"{vp.id} {t.name} (rerun for noise)")
        item.rerun = (rctx, kind.send(session, rctx, pt))
    outcome = item.sent.outcome
    failures = bool(item.sent.failed_requests or outcome.metrics_error
                    or counter_problem(outcome, vp.speculative_config, f"{vp.id} {t.name}"))
    # failed requests: a dying server may still be exiting; let it show
    session.raise_if_died(t.name, failures)


def _judge_all(cp: ConfigPlan, vp: VariantPlan, sent: list[_Sent], opts: RunOptions, run_dir: Path,
               out: VariantRun) -> None:
    """:func:`_judge_task` for every sent task, in order (the server is stopped)."""
    for item in sent:
        _judge_task(cp, vp, item, opts, run_dir, out)


def _judge_all_before_interrupt(cp: ConfigPlan, vp: VariantPlan, sent: list[_Sent], opts: RunOptions,
                                run_dir: Path, out: VariantRun) -> None:
    """:func:`_judge_all` on the way out of a stopping signal, so the tasks that were
    sent are recorded; a judging error is said and left (the signal goes on), the raw
    completions kept as when judging raises."""
    try:
        _judge_all(cp, vp, sent, opts, run_dir, out)
    except Exception as e:  # noqa: BLE001 - the interrupt is what the run reports; this is said beside it
        opts.progress.error(f"{vp.id}: judging the tasks sent before the signal failed: {e}")


def _judge_task(cp: ConfigPlan, vp: VariantPlan, item: _Sent, opts: RunOptions, run_dir: Path,
                out: VariantRun) -> None:
    """One sent task once its server is stopped: judged (:meth:`harness.tasks.base.Task.judge`),
    samples written, scored, its result recorded with acceptance intervals and the
    counter check, and its inline noise rerun judged against it."""
    c, p, vrec, t = cp.config, opts.progress, out.record, item.task
    PLACE.at("client", config=c.name, variant=vp.name, task=t.name)
    kind = task_for(t.spec.kind)
    samples_dir = run_dir / "samples" / c.name / vp.name
    tr = kind.judge(item.sent, item.ctx, item.pt)
    outcome, samples = tr.outcome, tr.samples
    PLACE.at("writing")
    spath = samples_dir / f"{t.name}.jsonl"
    write_jsonl(spath, samples)
    PLACE.at("scoring")
    sc = score_task(samples, tr.pipelines)
    tm = out.measured.task_record(vp.name, t.name)
    tm.score, tm.samples = sc, samples
    PLACE.at("statistics")  # acceptance intervals (bootstrap) and counter checks
    trec = task_result(spath, run_dir, outcome, sc, acceptance_intervals(samples, vp.speculative_config is not None))
    if tr.lm_eval is not None:
        trec.lm_eval = LmEvalTaskRecord(**tr.lm_eval)
    metrics_error, spec_metrics = outcome.metrics_error, outcome.spec_metrics
    bad = counter_problem(outcome, vp.speculative_config, f"{vp.id} {t.name}")
    if bad:  # impossible counters: no acceptance gate may read them
        metrics_error, spec_metrics = bad, None
        reject_counters(trec, bad)
    if spec_metrics is not None:
        tm.spec = spec_metrics
    if metrics_error:
        tm.spec_error = metrics_error
        p.error(f"{vp.id} {t.name}: metrics error: {metrics_error}")
    vrec.tasks[t.name] = trec
    checkpoint()  # the task's result is on disk before the next one is judged
    if item.rerun is not None:
        PLACE.at("client")  # the noise rerun: judging and its samples file
        rctx, rsent = item.rerun
        trec.rerun = _judge_rerun(c, vp, t, item.pt, run_dir, samples, out.reruns, p, rctx, rsent)
    sd = spec_metrics
    p.log(
        f"{vp.id} {t.name}: "
        + "".join(f"{k} {_f(v.accuracy)}, " for k, v in sc.accuracy.items())
        + f"errors {sc.error_count}/{sc.num_requests}"
        + (f", mean acceptance length {_f(sd.mean_acceptance_length)}" if sd else "")
        + f" ({outcome.seconds:.1f}s)"
    )


def _server_failed(e: ServerStartError, session: VariantSession, vp: VariantPlan, todo: list, argv: list[str],
                   out: VariantRun, p: Progress) -> None:
    """A server that did not start or died mid-task: the variant's error (with the
    doctor's diagnosis of its log when one applies), its server record, and its tasks
    not run."""
    vrec, srv = out.record, session.server
    out.ok = False
    vrec.error = str(e)
    vrec.server = ServerRecord(status=e.status, exit_code=e.exit_code, seconds=e.seconds, pid=srv.pid)
    try:
        from harness.doctor import diagnose_server_log

        why = diagnose_server_log(srv.log_path.read_text(encoding="utf-8", errors="replace"), argv[0])
    except OSError:
        why = None
    if why:
        vrec.error += f"\ndiagnosis: {why}"
    p.error(vrec.error)
    for t in todo:
        if t.name not in vrec.tasks:
            out.measured.task_record(vp.name, t.name).not_run = "server failed"
    if not vrec.tasks:
        out.measured.variant_record(vp.name).not_run = "server failed to start"


def _send_rerun(session: VariantSession, c: Any, vp: VariantPlan, t: Any, pt: PreparedTask, p: Progress,
                argv: list[str], model_ref: str) -> tuple[TaskContext, SentTask]:
    """Send a task a second time on a server (a noise rerun); judged by :func:`_judge_rerun`
    once the server is stopped."""
    ctx = _task_context(c, vp, t, argv, model_ref, p, None, f"{vp.id} {t.name} (rerun for noise)")
    return ctx, task_for(t.spec.kind).send(session, ctx, pt)


def _judge_rerun(c: Any, vp: VariantPlan, t: Any, pt: PreparedTask, run_dir: Path, first: tuple[Sample, ...],
                 reruns: dict, p: Progress, ctx: TaskContext, sent: SentTask) -> RerunRecord:
    """Judge a task's second pass (``noise_runs: 2``): the samples go to
    ``<task>.rerun.jsonl``; returns the record entry with the output match of the
    rerun against the first pass (the noise)."""
    tr = task_for(t.spec.kind).judge(sent, ctx, pt)
    spath = run_dir / "samples" / c.name / vp.name / f"{t.name}.rerun.jsonl"
    write_jsonl(spath, tr.samples)
    reruns[(vp.name, t.name)] = tr.samples
    om = output_match(first, tr.samples)
    p.log(f"{vp.id} {t.name}: rerun output match against the first pass {_f(om.output_match_rate)} "
          f"({om.matched}/{om.compared}) = the noise")
    return rerun_record(spath, run_dir, tr.outcome, tr.samples, om)


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def terminate_as_interrupt() -> None:
    """Make every stopping signal (:data:`harness.engine.server.STOP_SIGNALS`) stop every server and keep the
    partial record (:meth:`harness.engine.server.EngineProcesses.install_stop_handlers`).

    First signal: the run record is written with ``status: interrupted`` (so a SIGKILL
    after the CI's grace still leaves it), then SIGTERM goes to every live server's
    process group at once (so in-flight requests end), and KeyboardInterrupt is raised
    in the main thread; each server's context manager then waits for its group to exit
    (up to the stop grace, :meth:`harness.engine.server.EngineProcesses.stop_grace`, saying what it
    waits for) and the runner rewrites the record with the servers' fate.
    Any further signal never interrupts that teardown: it speeds it up, sending SIGKILL
    to every live group (:meth:`harness.engine.server.EngineProcesses.hurry`).
    Without this, SIGHUP (terminal closed) would end evalrun and leave the vLLM server
    running with parent 1. A signal that is ignored when evalrun starts (``nohup``)
    stays ignored.
    """
    processes().install_stop_handlers(interrupt_all)  # the record first: a SIGKILL may follow at any moment


def say_interrupted(e: BaseException, prog: str = "evalrun") -> None:
    """Tell what an interrupt left behind, on stderr: claims the servers stopped only
    when the teardown checked that none of their processes remains, else names the
    live processes with the command to end them. Never raises (after SIGHUP the
    terminal may be gone).

    Args:
        e: the :class:`RunInterrupted` (or a bare KeyboardInterrupt raised before the
            run folder existed).
        prog: the command name for the message.
    """
    sig = getattr(e, "signal_name", None) or (str(e.args[0]) if e.args else "KeyboardInterrupt")
    run_dir = getattr(e, "run_dir", None)
    kept = getattr(e, "kept", None)
    left = processes().unstopped()
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
