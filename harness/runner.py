"""The runner: executes a plan, config by config and variant by variant, and writes the record.

This is the one module that imports from every stage. Data flows one way::

    plan -> session (per variant) -> samples -> scoring / engine metrics / stats
         -> gates -> results (run.json, samples, logs) -> report (summary.md)

Nothing measured is lost: samples are written as soon as a task ends, and a variant
whose server fails is recorded with its error while the other variants still run.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from harness.engine.info import EngineInfoError, check_effective, model_runner_fact
from harness.analysis.divergence import UNEXPLAINED, carries_logprobs, classify_divergences
from harness.faults.plugin import REPORT_ENV, exercised, read_reports
from harness.analysis.gates import (
    Measurements, baseline_notes, evaluate_gates, judged_baseline_gates, output_noise_rerun, output_noise_stored,
)
from harness.config.plan import PORT_PLACEHOLDER, ConfigPlan, Plan, VariantPlan, shell_line
from harness.report.progress import Progress
from harness.report.html import write_html
from harness.report.junit import write_junit
from harness.report.summary import render_markdown
from harness.records.run_record import (
    BaselineInfo, ComparisonResult, ConfigRef, ConfigResult, DatasetRef,
    LeftoverServerRecord, LmEvalInfo, LmEvalTaskRecord, PluginReport,
    PreflightProblemRecord, PreflightRecord, ConfigWarningRecord,
    RerunRecord, Requested, RunErrorRecord, RunRecord, ServerRecord, SubsetWarning,
    TaskResult, TruncatedIds, VariantResult, new_run_id, provenance, utc_now, write_run,
)
from harness.records.atomic import ResultsFolderError, check_results_folder, write_atomic
from harness.records.samples import Sample, write_jsonl
from harness.records.run_folder import RunFolderTaken, claim_run_folder
from harness.records.samples import Sample, sha256_file, write_jsonl
from harness.analysis.scoring import answer_agreement, is_truncated, output_match, score_task
from harness.engine.metrics import counter_violations
from harness.engine.preflight import ASYNC_NOT_SUPPORTED, ServerCommand, check_server_commands
from harness.engine.server import ServerStartError, find_leftover_servers, interrupting, unstopped
from harness.engine.session import TaskOutcome, VariantSession
from harness.engine.pool import DevicePool, Job, ServerPlan, new_pool, run_jobs, server_plan
from harness.analysis.stats import ratio_bootstrap_ci
from harness.report.dry_run import subset_warnings
from harness.tasks import (
    ContaminationError, DataUnavailableError, PreparedTask, ShortDataError, available_questions, check_enough,
    prepare_task,
)
from harness.tasks.judging import judge_completions
from harness.tasks.gsm8k import PIPELINES

EXIT_PASSED, EXIT_GATE_FAILED, EXIT_COULD_NOT_RUN = 0, 1, 2


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
    was torn down first and the partial record written.

    Attributes:
        run_dir: the run folder holding the partial ``run.json``.
        signal_name: e.g. ``SIGHUP`` (or ``KeyboardInterrupt``).
        leftover_pids: processes of evalrun's servers still alive after teardown
            (empty when the check found none).
    """

    def __init__(self, run_dir: Path, signal_name: str, leftover_pids: list[int]) -> None:
        super().__init__(signal_name)
        self.run_dir = run_dir
        self.signal_name = signal_name
        self.leftover_pids = leftover_pids


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
        gpus: ``--gpus``: the devices evalrun may use (a count or a comma list; None =
            every device found, :func:`harness.engine.devices.available_devices`).
        max_servers: ``--max-servers``: at most this many servers alive at once.
        estimates: variant id -> estimated server seconds, the order in which variants
            get devices (longest first; :func:`harness.engine.pool.server_plan`).
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
    shard: Any = None
    gpus: str | None = None
    max_servers: int | None = None
    estimates: dict[str, float] | None = None


#: Why acceptance intervals are missing when requests ran concurrently.
ACCEPTANCE_CI_CONCURRENT = (
    "not available: concurrent requests share cumulative counters (per_request_metrics is "
    "off; set it to true to send requests one at a time and read /metrics around each)"
)
#: How acceptance intervals are computed (stored with them in the record).
ACCEPTANCE_CI_METHOD = (
    "95% percentile bootstrap over requests of a ratio of sums (requests resampled with "
    "their numerator and denominator together; 2000 resamples, seed 0)"
)


def acceptance_intervals(samples: Sequence[Sample], speculative: bool, confidence: float = 0.95) -> dict[str, Any]:
    """Confidence intervals of the acceptance figures from per-request counts.

    Args:
        samples: one task's samples; those with ``spec_drafts`` set (sequential
            requests, ``per_request_metrics``) are used, errors included (a failed
            request may still have drafted).
        speculative: whether the variant speculates (for the reason when there are
            no intervals).
        confidence: two-sided level.

    Returns:
        ``{"mean_acceptance_length_ci": [lo, hi] | None, "acceptance_rate_ci": ... ,
        "per_position_acceptance_ci": [[lo, hi] | None, ...] | None,
        "acceptance_ci_method": str | None, "acceptance_ci_reason": str | None,
        "acceptance_ci_requests": int, "per_request_totals": {...} | None}``.
        Intervals come from :func:`harness.analysis.stats.ratio_bootstrap_ci` (percentile
        bootstrap of a ratio of sums, Efron & Tibshirani 1993 ch. 13): mean acceptance
        length = 1 + sum(accepted) / sum(drafts), acceptance rate = sum(accepted) /
        sum(draft tokens), per position i = sum(accepted at i) / sum(drafts).
        Without per-request counts every interval is None and the reason says why.
    """
    out: dict[str, Any] = {
        "mean_acceptance_length_ci": None, "acceptance_rate_ci": None,
        "per_position_acceptance_ci": None, "acceptance_ci_method": None,
        "acceptance_ci_reason": None, "acceptance_ci_requests": 0, "per_request_totals": None,
    }
    if not speculative:
        out["acceptance_ci_reason"] = "not applicable: the variant does not speculate"
        return out
    rows = [x for x in samples if x.spec_drafts is not None]
    if not rows:
        out["acceptance_ci_reason"] = ACCEPTANCE_CI_CONCURRENT
        return out
    drafts = [x.spec_drafts for x in rows]
    acc = [x.spec_accepted_tokens or 0.0 for x in rows]
    dtok = [x.spec_draft_tokens or 0.0 for x in rows]
    width = max(len(x.spec_accepted_per_pos or ()) for x in rows)
    pos = [[(x.spec_accepted_per_pos or ())[i] if i < len(x.spec_accepted_per_pos or ()) else 0.0 for x in rows]
           for i in range(width)]
    out["acceptance_ci_requests"] = len(rows)
    out["per_request_totals"] = {
        "drafts": sum(drafts), "draft_tokens": sum(dtok), "accepted_tokens": sum(acc),
        "accepted_per_pos": [sum(p) for p in pos],
    }
    if sum(drafts) <= 0:
        out["acceptance_ci_reason"] = "not available: no drafts observed"
        return out
    lo, hi = ratio_bootstrap_ci(acc, drafts, confidence)
    out["mean_acceptance_length_ci"] = [1.0 + lo, 1.0 + hi]
    if sum(dtok) > 0:
        out["acceptance_rate_ci"] = list(ratio_bootstrap_ci(acc, dtok, confidence))
    out["per_position_acceptance_ci"] = [list(ratio_bootstrap_ci(p, drafts, confidence)) for p in pos]
    out["acceptance_ci_method"] = ACCEPTANCE_CI_METHOD
    return out


def noise_variants(cp: ConfigPlan) -> set[str]:
    """Variants run twice in their own server session because a comparison judges
    output match against their rerun in any case (``noise_runs: 2`` with
    ``noise_runs_when: always`` on a comparison whose baseline they are); a comparison
    with ``noise_runs_when: unexplained`` reruns its baseline later, only when needed
    (:func:`rerun_needs`)."""
    return {comp.baseline for comp in cp.config.comparisons
            if comp.noise_runs > 1 and comp.noise_runs_when == "always"}


def resolve_model(model: str, progress: Progress) -> str:
    """Make the model available before any server's start-up clock runs.

    * ``builtin:<name>`` -> the folder of evalrun's built model (built on first use).
    * a local folder or file -> unchanged.
    * a Hugging Face hub id (``org/name``) -> its weights are fetched now with
      ``huggingface_hub.snapshot_download`` (a no-op when already cached; skipped when
      ``HF_HUB_OFFLINE`` is set), so ``startup_max_wait_seconds`` measures start-up
      and not a download, as vLLM's own test utilities do. The hub id is returned
      unchanged: the server command stays the one a person would type, and vLLM finds
      the files in the same cache.

    Raises:
        RuntimeError: the built-in model cannot be built (e.g. torch is missing).
        Exception: from ``snapshot_download`` (unknown repo, no network, gated model);
            the runner records it as "model cannot be prepared".
    """
    import os

    if model.startswith("builtin:"):
        from harness.models import ensure_model

        name = model.split(":", 1)[1]
        return str(ensure_model(name, progress=progress.log))
    if Path(model).expanduser().exists() or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return model
    if model.count("/") == 1 and not model.startswith((".", "/", "~")):
        import time

        from huggingface_hub import snapshot_download

        t0 = time.monotonic()
        progress.log(f"{model}: fetching weights from the Hugging Face hub before start-up (snapshot_download)")
        local = snapshot_download(repo_id=model)
        progress.log(f"{model}: weights ready in {local} ({time.monotonic() - t0:.1f}s)")
    return model


def _rel(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


class RunRecorder:
    """Keeps the run record on disk while the run goes on: written at the start (status
    ``running``), after every task, variant and config, and by the first stopping signal
    (status ``interrupted``) before any server is stopped, so a SIGKILL at any moment
    leaves the last state in ``run.json``.

    Attributes:
        record: the record being filled in place.
        run_dir: its run folder.
        done: set once the final verdict is written (a later signal leaves it alone).
    """

    def __init__(self, record: RunRecord, run_dir: Path) -> None:
        self.record = record
        self.run_dir = Path(run_dir)
        self.done = False
        self._writing = False
        self._lock = threading.Lock()  # variants side by side checkpoint from their own threads
        self._writer: int | None = None

    def save(self) -> bool:
        """Write ``run.json`` now (:func:`write_run`); False when a write is already in
        progress (a signal handler interrupting a checkpoint) or the run is done.

        Raises:
            OSError: the record cannot be written (the caller decides).
        """
        if self.done or self._writer == threading.get_ident():
            return False
        with self._lock:  # another thread's write finishes first (never interleaved)
            if self.done:
                return False
            self._writer = threading.get_ident()
            self._writing = True
            try:
                write_run(self.run_dir, self.record)
            finally:
                self._writing = False
                self._writer = None
        return True

    def mark_interrupted(self, signal_name: str) -> None:
        """Set status ``interrupted`` (exit code 2, ``interrupted_by``, end time) in the record."""
        r = self.record
        r.status, r.passed, r.exit_code = "interrupted", None, EXIT_COULD_NOT_RUN
        r.interrupted_by = signal_name
        r.provenance.ended_at = utc_now()

    def interrupt(self, signal_name: str) -> None:
        """The first stopping signal: mark the record interrupted and write it (never
        raises: a failed write is said on stderr, the teardown must go on)."""
        if self.done:
            return
        self.mark_interrupted(signal_name)
        try:
            self.save()
        except Exception as e:  # noqa: BLE001 - inside a signal handler: say it, stop the servers anyway
            try:
                print(f"evalrun: warning: {self.run_dir / 'run.json'} not written on {signal_name}: {e}",
                      file=sys.stderr, flush=True)
            except (OSError, ValueError):
                pass


#: The recorder of the run in progress (at most one), for checkpoints and the signal handler.
_RECORDERS: list[RunRecorder] = []


def checkpoint() -> None:
    """Rewrite the record of the run in progress (no-op outside a run)."""
    for rec in list(_RECORDERS):
        rec.save()


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
        _RECORDERS.clear()
        claim.release()


def _run_claimed(plan: Plan, opts: RunOptions, run_id: str, run_dir: Path,
                 sp: ServerPlan | None = None) -> tuple[RunRecord, Path]:
    """:func:`run` once the run folder is claimed: the record is on disk from here on
    (status ``running``), rewritten after every task and variant (:class:`RunRecorder`)."""
    p = opts.progress
    PLACE.at("run", config=None, variant=None, task=None)
    leftovers = find_leftover_servers(Path(opts.results_dir))
    for lo in leftovers:
        p.warn(lo.describe())
    started = utc_now()
    refs = [ConfigRef(name=cp.name, path=str(cp.config.path), sha256=cp.config.sha256) for cp in plan.configs]
    record = RunRecord(run_id=run_id, provenance=provenance(opts.argv, refs, started), shard=opts.shard)
    import threading

    from harness.tasks.lm_eval_gsm8k import lm_eval_info

    def _lm_eval() -> None:  # version and task version of lm-eval's pipelines (never raises)
        record.provenance.lm_eval = LmEvalInfo(**lm_eval_info())

    # lm-eval's task takes seconds to build: built beside data preparation and the pre-launch
    # check, joined (lm_eval_done) before any server starts and before every final write of the record
    lm_thread = threading.Thread(target=_lm_eval, name="evalrun-lm-eval-info", daemon=True)
    lm_thread.start()
    lm_eval_done = lm_thread.join
    record.provenance.allow_contamination = opts.allow_contamination
    record.leftover_servers = [
        LeftoverServerRecord(pid=lo.pid, pid_file=str(lo.pid_file), command=lo.command, kill_command=lo.kill_command)
        for lo in leftovers
    ]
    recorder = RunRecorder(record, run_dir)
    _RECORDERS[:] = [recorder]
    recorder.save()  # the record exists from the start: status running
    could_not_run = False
    try:
        if _short_data(plan, opts, record):
            lm_eval_done()
            return _finish(record, run_dir, could_not_run=True), run_dir
        if opts.preflight:
            stop, not_applicable = _preflight(plan, opts, record)
            if stop:
                lm_eval_done()
                return _finish(record, run_dir, could_not_run=True), run_dir
            plan = mark_not_applicable(plan, not_applicable)
        lm_eval_done()
        for crec, cnr in _config_results(plan, opts, run_dir, record, sp):
            crec.list_path = plan.list_path  # the model list file that was read
            could_not_run |= cnr
            PLACE.at("writing", variant=None, task=None)
            recorder.save()  # keep what is measured so far
        PLACE.at("writing", config=None, variant=None, task=None)
        return _finish(record, run_dir, could_not_run), run_dir
    except KeyboardInterrupt as e:
        # (variants side by side: every job thread has ended, :func:`harness.engine.pool.run_jobs`)
        # the signal handler wrote the record (interrupted) before any server was stopped;
        # every server's context manager has now stopped its process group: check, rewrite
        leftover = sorted({pid for pids in unstopped().values() for pid in pids})
        sig = str(e.args[0]) if e.args else "KeyboardInterrupt"
        recorder.mark_interrupted(sig)
        recorder.done = True
        lm_eval_done(timeout=5.0)
        write_run(run_dir, record)
        try:  # CI's test-report step shows INTERRUPTED, not an absent or green file
            write_junit(record, run_dir / "junit.xml")
            write_atomic(run_dir / "summary.md", render_markdown(record, run_dir))
        except Exception as err:  # noqa: BLE001 - a report must never hide the interrupt
            print(f"evalrun: warning: reports of the interrupted run not written: {type(err).__name__}: {err}",
                  file=sys.stderr)
        raise RunInterrupted(run_dir, sig, leftover) from None
    except Exception as e:  # noqa: BLE001 - an unexpected error is data: the record keeps it
        recorder.done = True  # the error record is the final word: a later signal leaves it alone
        lm_eval_done(timeout=5.0)
        return record_error(record, run_dir, e, PLACE, p), run_dir


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

    from harness.engine import server as _server

    if unstopped():
        _server.hurry()  # SIGKILL to every live group; the context managers already waited
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
        write_run(run_dir, record)
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
    write_run(run_dir, record)
    for rec in _RECORDERS:  # the verdict is on disk: a later signal must not turn it into "interrupted"
        rec.done = True
    write_reports(record, run_dir)
    return record


def write_reports(record: RunRecord, run_dir: Path) -> list[str]:
    """Write ``summary.md``, ``junit.xml`` and ``summary.html`` into ``run_dir`` (each
    atomically). A report that fails to render or write is a warning on stderr naming
    the file and the error, never the run's verdict.

    Returns:
        the warnings (empty when every report was written).
    """
    warnings: list[str] = []
    writers = (
        ("summary.md", lambda: write_atomic(run_dir / "summary.md", render_markdown(record, run_dir))),
        ("junit.xml", lambda: write_junit(record, run_dir / "junit.xml")),
        ("summary.html", lambda: write_html(record, run_dir)),
    )
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
        c = cp.config
        m = Measurements()
        msgs = problems.get(cp.name)
        crec = ConfigResult(name=c.name, path=str(c.path), sha256=c.sha256, form=c.form, model=c.model,
                            pipeline=c.gates.accuracy_pipeline,
                            error=("; ".join(msgs) if msgs else
                                   "not started: another config's data holds fewer questions than it asks"))
        for vp in cp.variants:
            m.not_run[(vp.name, None)] = "short data: refused before any server started"
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


def _preflight(plan: Plan, opts: RunOptions, record: RunRecord) -> tuple[bool, dict[str, str]]:
    """Check every selected variant's server command with vLLM's own parser and its
    async-scheduling/drafter rule (:func:`harness.engine.preflight.check_server_commands`),
    recorded in ``record.preflight``.

    Returns:
        (stop, not applicable). A variant vLLM would refuse only for async scheduling with
        its drafter is returned in the second item (variant id -> vLLM's reason) and runs
        as not applicable. On any other problem, ``record.configs`` is filled with every
        variant NOT RUN (the rejected ones with their reason and ``server.status``
        ``args_rejected`` / ``launch_failed``, the others ``not_started``) and stop is True.
    """
    import time

    p = opts.progress
    cmds = [
        ServerCommand(vp.id, cp.config.path, tuple(a.replace("{port}", "8000") for a in vp.argv),
                      {k: v for k, v in vp.env.items() if not k.startswith("EVALRUN_")})  # no fault in a check
        for cp in plan.configs for vp in cp.variants
        if (opts.variants is None or vp.name in opts.variants) and not vp.not_applicable
    ]
    p.log(f"checking {len(cmds)} server command(s) with the installed vLLM's argument parser")
    t0 = time.monotonic()
    found = check_server_commands(cmds)
    not_applicable = {pr.variant_id: pr.message for pr in found if pr.kind == ASYNC_NOT_SUPPORTED}
    for vid, why in not_applicable.items():
        p.warn(f"{vid}: not applicable on this engine: {why}")
    problems = [pr for pr in found if pr.kind != ASYNC_NOT_SUPPORTED]
    record.preflight = PreflightRecord(
        checked=len(cmds), seconds=round(time.monotonic() - t0, 1),
        problems=[PreflightProblemRecord(variant=pr.variant_id, config_path=str(pr.config_path), python=pr.python,
                                         kind=pr.kind, message=pr.message) for pr in found],
    )
    if not problems:
        return False, not_applicable
    bad = {pr.variant_id: pr for pr in problems}
    for pr in problems:
        p.error(f"server command rejected before launch: {pr.describe()}")
    for cp in plan.configs:
        c = cp.config
        m = Measurements()
        crec = ConfigResult(name=c.name, path=str(c.path), sha256=c.sha256, form=c.form, model=c.model,
                            pipeline=c.gates.accuracy_pipeline)
        for vp in cp.variants:
            pr = bad.get(vp.id)
            vrec = VariantResult(
                argv=list(vp.argv), env=dict(vp.env), fault=vp.fault,
                requested=Requested(speculative_config=vp.speculative_config, async_scheduling=vp.async_scheduling),
                server=ServerRecord(status=pr.kind if pr else "not_started"),
            )
            if pr is not None:
                vrec.error = f"server command rejected before launch: {pr.message}"
                reason = f"{pr.kind}: {pr.message}"
            else:
                vrec.error = "not started: another variant's server command was rejected before launch"
                reason = vrec.error
            crec.variants[vp.name] = vrec
            m.not_run[(vp.name, None)] = reason
        crec.gates = evaluate_gates(cp.gates, m)
        record.configs.append(crec)
    return True, not_applicable


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
    p = opts.progress
    c = cp.config
    could_not_run = False
    crec = ConfigResult(name=c.name, path=str(c.path), sha256=c.sha256, form=c.form, model=c.model,
                        pipeline=c.gates.accuracy_pipeline,
                        tasks={name: spec.model_dump(mode="json", exclude={"gates"}) for name, spec in c.tasks.items()})
    record.configs.append(crec)  # filled in place, so an interrupt keeps what ran
    m = Measurements()
    crec.config_warnings = [ConfigWarningRecord(**w.model_dump()) for w in c.warnings]
    for w in c.warnings:
        p.warn(w.message)
    variants = [v for v in cp.variants if opts.variants is None or v.name in opts.variants]
    skipped = [v.name for v in cp.variants if v not in variants]
    for name in skipped:
        m.not_run[(name, None)] = "variant not selected (--variant)"
    for v in [v for v in variants if v.not_applicable]:  # the engine cannot run it: never a pass
        m.not_run[(v.name, None)] = f"not applicable: {v.not_applicable}"
        crec.variants[v.name] = VariantResult(
            argv=list(v.argv), env=dict(v.env), fault=v.fault,
            requested=Requested(speculative_config=v.speculative_config, async_scheduling=v.async_scheduling),
            server=ServerRecord(status="not_started"), error=f"not applicable: {v.not_applicable}",
        )
    variants = [v for v in variants if not v.not_applicable]

    # 1. tasks: data first, so a missing data set stops before minutes of server start-up.
    prepared: dict[str, PreparedTask] = {}
    for t in cp.tasks:
        PLACE.at("prepare", config=c.name, variant=None, task=t.name)
        try:
            prepared[t.name] = prepare_task(t.name, t.spec, opts.data_dir, opts.allow_contamination,
                                            base_dir=Path(c.path).parent)
            record.provenance.datasets[t.id] = DatasetRef(
                sha256=prepared[t.name].dataset_hash, source=prepared[t.name].source,
                num_requests=len(prepared[t.name].requests), stop=list(prepared[t.name].stop),
                contamination=prepared[t.name].contamination,
            )
            if prepared[t.name].lm_eval is not None and prepared[t.name].lm_eval.prompt_only:
                m.prompt_only[t.name] = prepared[t.name].lm_eval.prompt_only_reason()
            if prepared[t.name].contamination:
                p.warn(f"{c.name}: task {t.name}: contaminated data run anyway (--allow-contamination): "
                       f"{prepared[t.name].contamination}")
        except ContaminationError as e:
            could_not_run |= t.spec.required
            p.error(f"{c.name}: {e}")
            for v in cp.variants:
                m.not_run[(v.name, t.name)] = ("contaminated data refused (test questions among the few-shot "
                                               "examples or the train split)")
        except ShortDataError as e:  # counted only now (an lm-eval task, hub data): refused all the same
            could_not_run = True
            p.error(f"{c.name}: {e}")
            for v in cp.variants:
                m.not_run[(v.name, t.name)] = "short data: fewer questions than num_questions asks"
        except DataUnavailableError as e:
            msg = f"task {t.name}: data not available: {e}"
            if t.spec.required:
                could_not_run = True
                p.error(f"{c.name}: {msg}")
            else:
                p.warn(f"{c.name}: NOT RUN (optional task): {msg}")
            for v in cp.variants:
                m.not_run[(v.name, t.name)] = f"data not available ({'required' if t.spec.required else 'optional'} task)"
    # 1b. a run smaller than the set its threshold was measured on: say so now
    crec.subset_warnings = [SubsetWarning(**w) for w in subset_warnings(c)]
    for w in crec.subset_warnings:
        p.warn(f"{c.name}: {w.message}")
    # 2. the model
    PLACE.at("model", variant=None, task=None)
    try:
        model_ref = resolve_model(c.model, p)
        crec.model_path = model_ref
    except Exception as e:  # noqa: BLE001 - any build failure stops this config, recorded
        crec.error = f"model {c.model}: cannot be prepared: {type(e).__name__}: {e}"
        p.error(f"{c.name}: {crec.error}")
        for v in cp.variants:
            m.not_run[(v.name, None)] = "model not available"
        crec.gates = evaluate_gates(cp.gates, m)
        return crec, True
    # 3. variants
    reruns: dict[tuple[str, str], tuple[Sample, ...]] = {}
    m.runners = {}

    def one_variant(vp: VariantPlan, devices: tuple[str, ...] = ()) -> bool:
        if devices:  # its own device set, side by side with others (harness.engine.pool)
            vp = dataclasses.replace(vp, env={**vp.env, "CUDA_VISIBLE_DEVICES": ",".join(devices)})
        try:
            _, ok = _run_variant(cp, vp, model_ref, prepared, opts, run_dir, m, reruns, into=crec.variants)
        except Exception as e:  # the variant's thread knows where it was: keep it for the record
            if pool is not None and not hasattr(e, "evalrun_place"):
                e.evalrun_place = (PLACE.stage, PLACE.config, PLACE.variant, PLACE.task)  # type: ignore[attr-defined]
            raise
        if pool is not None:  # its server is stopped: its devices go to the next variant now
            pool.release(vp.id)
        if pool is not None and pool.cancelled.is_set() and interrupting():  # its server was stopped by the signal
            vr = crec.variants[vp.name]
            vr.server = ServerRecord(status="interrupted", exit_code=vr.server.exit_code, seconds=vr.server.seconds,
                                     pid=vr.server.pid)
            vr.error = "interrupted by a signal" + (f" ({vr.error})" if vr.error else "")
        PLACE.at("server", config=c.name, variant=vp.name, task=None)  # the plugin's per-process reports
        crec.variants[vp.name].plugin = plugin_report(run_dir, c.name, vp)
        fact = model_runner_fact(crec.variants[vp.name].plugin.model_runners, _read_log(run_dir, c.name, vp.name))
        crec.variants[vp.name].model_runner = fact
        m.runners[vp.name] = fact
        return ok

    if pool is None:  # a CPU host: one at a time, in this thread
        oks = [one_variant(vp) for vp in variants]
    else:
        pool.withdraw([vp.id for vp in cp.variants if vp not in variants])  # never asking for devices
        oks = run_jobs([Job(vp.id, functools.partial(one_variant, vp), need=sp.need(vp.id)) for vp in variants],
                       pool)
    could_not_run |= not all(oks)
    # 4. comparisons (the record's paired test reads each task's own pipeline); a
    # baseline rerun for noise only where divergences are left that no distribution judges
    _compare(c, m, reruns, crec)
    needs = rerun_needs(c, m, reruns)
    for vname, tasks in needs.items():
        vp = next((v for v in variants if v.name == vname), None)
        if vp is None:
            continue
        todo = {t: prepared[t] for t in tasks if t in prepared}
        if pool is None:
            _rerun_when_needed(cp, vp, model_ref, todo, opts, run_dir, m, reruns, crec.variants[vname])
            continue
        with pool.lease(vp.id + " (rerun)", sp.need(vp.id)) as devices:  # a server again: its own devices
            _rerun_when_needed(cp, dataclasses.replace(vp, env={**vp.env, "CUDA_VISIBLE_DEVICES": ",".join(devices)}),
                               model_ref, todo, opts, run_dir, m, reruns, crec.variants[vname])
    if needs:
        _compare(c, m, reruns, crec, needs)
    # 5. gates
    PLACE.at("gates", config=c.name, variant=None, task=None)
    crec.gates = evaluate_gates(cp.gates, m)
    # 6. gates against the stored baseline (last known good), when there is one
    if opts.baseline_dir is not None:
        PLACE.at("baseline")
        crec.baseline = _load_baseline(opts.baseline_dir, c.name, m)
        crec.gates += judged_baseline_gates(cp.baseline_gates, m)
        if crec.baseline.found and m.baseline is not None:
            crec.baseline.notes = baseline_notes(cp.baseline_gates, m)
    return crec, could_not_run


def _read_log(run_dir: Path, config: str, variant: str) -> str | None:
    try:
        return (run_dir / "logs" / config / f"{variant}.log").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def reference_variant(c, m: Measurements, baseline: str, task: str) -> str | None:
    """The variant whose top-k log-probabilities judge a comparison's divergences on
    ``task``: the baseline when its samples carry them, else a variant of the config
    without speculative decoding whose samples do, one asking for the baseline's
    ``model_runner`` first (then config order); None when none does."""
    if carries_logprobs(m.samples.get((baseline, task))):
        return baseline
    runner = c.variants[baseline].model_runner
    refs = [v for v, spec in c.variants.items()
            if spec.speculative_config is None and carries_logprobs(m.samples.get((v, task)))]
    return min(refs, key=lambda v: c.variants[v].model_runner != runner) if refs else None


def rerun_needs(c, m: Measurements, reruns: dict) -> dict[str, list[str]]:
    """Baseline variant -> tasks to rerun for noise because a comparison with
    ``noise_runs: 2`` and ``noise_runs_when: unexplained`` has divergences left that
    the reference's distribution cannot judge (or, without any reference
    distribution, mismatches at all). Reruns already made are not asked again."""
    out: dict[str, list[str]] = {}
    for comp in c.comparisons:
        if comp.noise_runs < 2 or comp.noise_runs_when != "unexplained":
            continue
        for tname in comp.tasks or c.tasks:
            key = (comp.baseline, comp.candidate, tname)
            om = m.matches.get(key)
            if om is None or (comp.baseline, tname) in reruns or tname in m.prompt_only:
                continue
            dv = m.divergences.get(key)
            left = (len(om.mismatches) if dv is None else
                    sum(1 for d in dv.divergences if d.verdict == UNEXPLAINED and d.source == "none"))
            if left and tname not in out.setdefault(comp.baseline, []):
                out[comp.baseline].append(tname)
    return {k: v for k, v in out.items() if v}


def _rerun_reason(comp, key, m: Measurements, reruns: dict, asked: dict[str, list[str]] | None) -> str:
    """Why the baseline was (not) rerun for this comparison and task, for the record."""
    base, _, tname = key
    om, dv = m.matches.get(key), m.divergences.get(key)
    if comp.noise_runs < 2:
        return "not run: not asked (noise_runs 1)"
    if comp.tasks and tname not in comp.tasks and (base, tname) not in reruns:
        return f"not run: this comparison does not gate task {tname}"
    if comp.noise_runs_when == "always":
        return ("ran: asked by the config (noise_runs 2, noise_runs_when always)" if (base, tname) in reruns
                else "not run: asked by the config, but the rerun did not take place (server gone or lm_eval task)")
    if asked is not None and tname in asked.get(base, []):
        if (base, tname) not in reruns:
            return "needed but not run: the baseline's server could not be started again (see the variant's error)"
        return ("ran: divergences were left that no reference distribution judges"
                if dv is not None else "ran: mismatches and no reference distribution to judge them")
    if om is None or not om.mismatches:
        return "not run: no divergence"
    return (f"not run: every divergence was judged by {dv.reference}'s distribution "
            f"({len(dv.unexplained)} unexplained, {len(dv.explained)} explained)" if dv is not None
            else "not run: not needed")


def _compare(c, m: Measurements, reruns: dict, crec: ConfigResult, asked: dict[str, list[str]] | None = None) -> None:
    """Fill ``m`` (matches, answers, noise, divergences) and ``crec.comparisons`` for
    every comparison and task both sides ran (recomputed after reruns made on demand)."""
    crec.comparisons = []
    for comp in c.comparisons:
        for tname in c.tasks:
            PLACE.at("statistics", config=c.name, variant=f"{comp.baseline}->{comp.candidate}", task=tname)
            a = m.samples.get((comp.baseline, tname))
            b = m.samples.get((comp.candidate, tname))
            if a is None or b is None:
                continue
            key = (comp.baseline, comp.candidate, tname)
            pipeline = c.gates_for(tname).accuracy_pipeline
            om = output_match(a, b)
            m.matches[key] = om
            ag = answer_agreement(a, b, pipeline)
            m.answers[key] = ag
            pc = m.paired(comp.baseline, comp.candidate, tname, pipeline)
            nz = None
            rerun = reruns.get((comp.baseline, tname)) if comp.noise_runs > 1 else None
            if rerun is not None:
                nz = output_noise_rerun(a, rerun, b)
            elif comp.noise_mismatch_rate is not None:
                nz = output_noise_stored(om, comp.noise_mismatch_rate)
            if nz is not None:
                m.noise[key] = nz
            dv = None
            ref = reference_variant(c, m, comp.baseline, tname) if comp.near_tie_nats is not None else None
            if ref is not None:
                noise_ids = None
                if rerun is not None:
                    noise_ids = {q for q, _ in output_match_noise(a, rerun)}
                dv = classify_divergences(a, b, m.samples.get((ref, tname)), ref, comp.near_tie_nats,
                                          baseline_is_reference=(ref == comp.baseline), noise_ids=noise_ids)
                m.divergences[key] = dv
            else:
                m.divergences.pop(key, None)
            crec.comparisons.append(ComparisonResult(
                baseline=comp.baseline, candidate=comp.candidate, task=tname, pipeline=pipeline,
                **dict(om), paired=pc, noise=nz,
                answer_agreement=ag,
                truncated=TruncatedIds(baseline=[x.question_id for x in a if is_truncated(x)],
                                       candidate=[x.question_id for x in b if is_truncated(x)]),
                divergence=dv,
                rerun_reason=_rerun_reason(comp, key, m, reruns, asked),
            ))


def output_match_noise(first: Sequence[Sample], rerun: Sequence[Sample]) -> list[tuple[str, int]]:
    """``(question id, first divergence)`` of the questions whose rerun differs from the first pass."""
    return [(x.question_id, x.first_divergence) for x in output_match(first, rerun).mismatches]


def _rerun_when_needed(cp: ConfigPlan, vp: VariantPlan, model_ref: str, tasks: dict[str, PreparedTask],
                       opts: RunOptions, run_dir: Path, m: Measurements, reruns: dict, vrec: VariantResult) -> None:
    """Start ``vp``'s server again and rerun ``tasks`` for noise (``noise_runs_when:
    unexplained``): each task's ``rerun`` entry and ``<task>.rerun.jsonl`` as with an
    inline rerun; the server log is ``<variant>.rerun.log``. A server that does not
    start leaves the reruns missing (the comparisons then say so; their fallback
    questions stay unexplained)."""
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
    try:
        with session:
            for tname, pt in tasks.items():
                first = m.samples.get((vp.name, tname))
                if first is None or tname not in vrec.tasks or pt.lm_eval is not None:
                    continue
                PLACE.at("client", task=tname)  # the noise rerun: requests, judging and its samples file
                vrec.tasks[tname].rerun = _rerun_task(session, c.name, vp, tplans[tname], pt, run_dir, tuple(first),
                                                      reruns, p, c.per_request_metrics)
                checkpoint()
    except ServerStartError as e:
        p.error(f"{vp.id}: the rerun for noise could not run: {e}")
        vrec.error = (vrec.error + "\n" if vrec.error else "") + f"rerun for noise could not run: {e}"


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


def _run_variant(
    cp: ConfigPlan,
    vp: VariantPlan,
    model_ref: str,
    prepared: dict[str, PreparedTask],
    opts: RunOptions,
    run_dir: Path,
    m: Measurements,
    reruns: dict | None = None,
    into: dict[str, VariantResult] | None = None,
) -> tuple[VariantResult, bool]:
    """Run one variant: its server, engine facts, tasks. ``into[vp.name]`` receives
    the variant record as soon as it exists (so an interrupt keeps it).

    The server's fate is ``vrec.server`` (:class:`ServerRecord`: ``ready``,
    ``exited_early``, ``not_ready_timeout``, ``launch_failed``, ``died_mid_task``,
    ``interrupted``, with exit code and seconds); ``vrec.engine_error`` says why the
    effective configuration could not be read (``variant_effective`` then fails).
    A task whose counters are impossible (:func:`counter_violations`) gets
    ``spec_decode`` None and ``spec_decode_error`` naming the counters, so its
    acceptance gates fail.
    """
    p = opts.progress
    c = cp.config
    log_path = run_dir / "logs" / c.name / f"{vp.name}.log"
    argv = [model_ref if a == c.model else a for a in vp.argv]
    vrec = VariantResult(
        argv=argv, env=dict(vp.env), fault=vp.fault, log=_rel(log_path, run_dir),
        requested=Requested(speculative_config=vp.speculative_config, async_scheduling=vp.async_scheduling),
    )
    if into is not None:
        into[vp.name] = vrec
    PLACE.at("server", config=c.name, variant=vp.name, task=None)
    todo = [t for t in cp.tasks if t.name in prepared]
    if not todo:
        vrec.error = "no task of this config can run"
        m.not_run[(vp.name, None)] = vrec.error
        return vrec, True
    p.log(f"{vp.id}: starting the vLLM server (log: {log_path})")
    p.log(f"  $ {shell_line(argv, vp.env)}")
    p.log(f"  ({PORT_PLACEHOLDER} is the free port chosen at start-up; the server log's first lines hold the exact command)")
    env = {**vp.env, REPORT_ENV: str(plugin_dir(run_dir, c.name, vp.name))}
    session = VariantSession(
        vp.id, argv, env, log_path,
        startup_timeout=c.startup_max_wait_seconds,
        request_timeout=c.request_timeout_seconds,
        max_concurrency=c.max_concurrency,
        speculative=vp.speculative_config is not None,
        on_wait=p.waiting(f"{vp.id}: waiting for /health"),
    )
    srv = session.server
    import os
    import time

    from harness.report.cost import given_devices

    vrec.devices = given_devices({**os.environ, **env})
    try:
        with session:
            vrec.startup_seconds = round(srv.startup_seconds or 0, 1)
            vrec.server = ServerRecord(status="ready", seconds=vrec.startup_seconds, pid=srv.proc.pid)
            p.log(f"{vp.id}: server ready in {vrec.startup_seconds}s on {session.server.base_url}")
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
                m.effectiveness[vp.name] = eff
                if not eff.effective:
                    p.warn(f"{vp.id}: not effective as asked: {eff.mismatches}"
                           + (" (declared expected on this platform)" if eff.expected_on_platform else ""))
            except EngineInfoError as e:
                vrec.engine_error = str(e)
                m.engine_facts_errors[vp.name] = str(e)
                p.error(f"{e} (variant_effective cannot pass without it)")
            t_eval = time.monotonic()  # evaluation: first request .. last counter snapshot
            for t in todo:
                PLACE.at("client", variant=vp.name, task=t.name)
                pt = prepared[t.name]
                lm_summary = None
                if pt.lm_eval is not None:
                    outcome, samples, lm_summary = _run_lm_eval(session, c.name, vp, t, pt, c, p,
                                                                tokenizer=_tokenizer_of(argv, model_ref))
                else:
                    bar = p.bar(f"{vp.id} {t.name}", len(pt.requests))
                    outcome = session.run_task(
                        pt.requests,
                        max_tokens=t.spec.max_tokens, temperature=t.spec.temperature, seed=t.spec.seed,
                        stop=pt.stop, on_done=lambda x: bar.advance(x.ok),
                        per_request=c.per_request_metrics, chat=t.spec.use_chat_completions, logprobs=vp.logprobs,
                    )
                    bar.close()
                    PLACE.at("judging")
                    try:
                        samples = judge_completions(c.name, vp.name, t.name, pt.requests, outcome.completions)
                    except Exception:  # keep the engine's answers, unjudged, then record the error
                        _keep_raw(run_dir / "samples" / c.name / vp.name / f"{t.name}.raw.jsonl",
                                  outcome.completions, p)
                        raise
                PLACE.at("writing")
                spath = run_dir / "samples" / c.name / vp.name / f"{t.name}.jsonl"
                write_jsonl(spath, samples)
                PLACE.at("scoring")
                sc = score_task(samples, lm_summary["pipelines"] if lm_summary else PIPELINES)
                m.scores[(vp.name, t.name)] = sc
                m.samples[(vp.name, t.name)] = samples
                PLACE.at("statistics")  # acceptance intervals (bootstrap) and counter checks
                trec = TaskResult(
                    samples=_rel(spath, run_dir),
                    seconds=round(outcome.seconds, 2),
                    **sc.result_fields(),
                    spec_decode=outcome.spec_metrics,
                    spec_decode_counters=outcome.spec_counters,
                    spec_decode_error=outcome.metrics_error,
                    **acceptance_intervals(samples, vp.speculative_config is not None),
                )
                trec.samples_sha256 = sha256_file(spath)  # merge verifies the file against it
                if lm_summary is not None:
                    trec.lm_eval = LmEvalTaskRecord(task=pt.lm_eval.to_json(), **lm_summary)
                metrics_error = outcome.metrics_error
                spec_metrics = outcome.spec_metrics
                if outcome.spec_counters is not None and vp.speculative_config is not None:
                    bad = counter_violations(outcome.spec_counters,
                                             vp.speculative_config.get("num_speculative_tokens"))
                    if bad:  # impossible counters: no acceptance gate may read them
                        metrics_error = f"{vp.id} {t.name}: impossible speculative-decoding counters: " + "; ".join(bad)
                        spec_metrics = None
                        trec.spec_decode = None
                        trec.spec_decode_error = metrics_error
                        trec.mean_acceptance_length_ci = trec.acceptance_rate_ci = None
                        trec.per_position_acceptance_ci = None
                        trec.acceptance_ci_reason = "not available: the counters failed the consistency check"
                if spec_metrics is not None:
                    m.spec[(vp.name, t.name)] = spec_metrics
                if metrics_error:
                    m.spec_errors[(vp.name, t.name)] = metrics_error
                    p.error(f"{vp.id} {t.name}: metrics error: {metrics_error}")
                vrec.tasks[t.name] = trec
                checkpoint()  # the task's result is on disk before the next one starts
                if reruns is not None and vp.name in noise_variants(cp) and pt.lm_eval is None and session.server.alive():
                    PLACE.at("client")  # the noise rerun: requests, judging and its samples file
                    trec.rerun = _rerun_task(
                        session, c.name, vp, t, pt, run_dir, samples, reruns, p, c.per_request_metrics)
                sd = spec_metrics
                p.log(
                    f"{vp.id} {t.name}: "
                    + "".join(f"{k} {_f(v.accuracy)}, " for k, v in sc.accuracy.items())
                    + f"errors {sc.error_count}/{sc.num_requests}"
                    + (f", mean acceptance length {_f(sd.mean_acceptance_length)}" if sd else "")
                    + f" ({outcome.seconds:.1f}s)"
                )
                if (sc.error_count or metrics_error) and srv.alive():
                    # failed requests: a dying server may still be exiting; let it show
                    srv.wait_exit(2.0)
                if not srv.alive():
                    code = srv.proc.poll() if srv.proc else None
                    raise ServerStartError(
                        f"{vp.id}: the vLLM server died during task {t.name} (exit code {code}); log: {log_path}",
                        status="died_mid_task", exit_code=code, seconds=round(srv.seconds() or 0, 1),
                    )
            vrec.evaluation_seconds = round(time.monotonic() - t_eval, 2)
            t_stop = time.monotonic()
        vrec.teardown_seconds = round(time.monotonic() - t_stop, 2)
        vrec.server.exit_code = srv.exit_code
        return vrec, True
    except KeyboardInterrupt:
        vrec.server = ServerRecord(status="interrupted", exit_code=srv.exit_code, seconds=vrec.server.seconds,
                                   pid=srv.proc.pid if srv.proc else None)
        vrec.error = "interrupted by a signal"
        raise
    except ServerStartError as e:
        vrec.error = str(e)
        vrec.server = ServerRecord(status=e.status, exit_code=e.exit_code, seconds=e.seconds,
                                   pid=srv.proc.pid if srv.proc else None)
        try:
            from harness.doctor import diagnose_server_log

            why = diagnose_server_log(log_path.read_text(encoding="utf-8", errors="replace"), argv[0])
        except OSError:
            why = None
        if why:
            vrec.error += f"\ndiagnosis: {why}"
        p.error(vrec.error)
        for t in todo:
            if t.name not in vrec.tasks:
                m.not_run[(vp.name, t.name)] = "server failed"
        if not vrec.tasks:
            m.not_run[(vp.name, None)] = "server failed to start"
        return vrec, False


def _keep_raw(path: Path, completions, p: Progress) -> None:
    """Write the unjudged completions of a task whose judging raised (best effort)."""
    from harness.records.completions import write_raw_jsonl

    try:
        n = write_raw_jsonl(path, completions)
        p.error(f"judging failed: the {n} raw completions are kept in {path}")
    except OSError as e:
        p.warn(f"{path}: raw completions not written: {e}")


def _tokenizer_of(argv: list[str], model_ref: str) -> str:
    """The tokenizer the server uses: its ``--tokenizer`` argument, else the model
    (folder or hub id); what lm-eval's prompt-scoring tasks count tokens with."""
    from harness.config.vllm_args import flag_name  # every spelling vLLM's parser accepts

    for i, a in enumerate(argv):
        if flag_name(a) != "--tokenizer":
            continue
        if "=" in a:
            return a.split("=", 1)[1]
        if i + 1 < len(argv):
            return argv[i + 1]
    return model_ref


def _run_lm_eval(session: VariantSession, config: str, vp: VariantPlan, t, pt: PreparedTask, c,
                 p: Progress, tokenizer: str | None = None) -> tuple[TaskOutcome, tuple[Sample, ...], dict[str, Any]]:
    """Run a ``kind: lm_eval`` task through lm-eval's local-completions model against
    the session's server, with ``/metrics`` snapshots around it (as
    :meth:`VariantSession.run_task` takes them). Returns the outcome (no raw
    completions: lm-eval sent the requests), the samples lm-eval judged, and lm-eval's
    summary (aggregated results, pipelines, error)."""
    import time

    from harness.tasks.lm_eval_task import run_lm_eval_task

    t0 = time.monotonic()
    before, metrics_error = session.counters_before()
    p.log(f"{vp.id} {t.name}: lm-eval task {pt.lm_eval.lm_eval_task} ({pt.lm_eval.num_docs} documents) "
          "through lm-eval's local-completions model")
    samples, summary = run_lm_eval_task(
        pt.lm_eval, base_url=session.server.base_url, served_model=session.model,
        config=config, variant=vp.name, num_fewshot=t.spec.num_fewshot, max_tokens=t.spec.max_tokens,
        seed=t.spec.seed, max_concurrency=c.max_concurrency, timeout_s=c.request_timeout_seconds,
        tokenizer=tokenizer,
    )
    if summary["error"]:
        p.error(f"{vp.id} {t.name}: {summary['error']}")
    counters, metrics, metrics_error = session.counters_since(before, metrics_error)
    return TaskOutcome((), counters, metrics, metrics_error, time.monotonic() - t0), samples, summary


def plugin_dir(run_dir: Path, config: str, variant: str) -> Path:
    """``<run>/plugin/<config>/<variant>/``: where evalrun's vLLM plugin writes one
    ``plugin-<pid>.json`` per server process (``EVALRUN_PLUGIN_REPORT_DIR``)."""
    return run_dir / "plugin" / config / variant


def plugin_report(run_dir: Path, config: str, vp: VariantPlan) -> PluginReport:
    """The record's ``variants[v].plugin``: the plugin's counters merged over the
    server's processes (:func:`harness.faults.plugin.read_reports`), plus
    ``async_scheduling_via``: how async scheduling was obtained when it was asked
    for (``"engine"``, or ``"evalrun plugin"`` when the plugin kept it on the CPU
    platform, which forces it off) and, for a fault, ``exercised`` / ``not_exercised_reason``
    (:func:`harness.faults.plugin.exercised`)."""
    rep = read_reports(plugin_dir(run_dir, config, vp.name))
    rep["dir"] = _rel(plugin_dir(run_dir, config, vp.name), run_dir)
    if vp.async_scheduling is True:
        kept = rep["counts"].get("cpu_async.kept", 0)
        rep["async_scheduling_via"] = (
            "evalrun plugin (kept after CpuPlatform.check_and_update_config forced it off)" if kept else "engine"
        )
    if vp.fault:
        ok, why = exercised(rep, vp.fault)
        rep["exercised"] = ok
        rep["not_exercised_reason"] = why or None
    return PluginReport(**rep)


def _rerun_task(session, config: str, vp: VariantPlan, t, pt: PreparedTask, run_dir: Path,
                first: tuple[Sample, ...], reruns: dict, p: Progress, per_request: bool) -> RerunRecord:
    """Run a task a second time on the same server (``noise_runs: 2``): the samples go
    to ``<task>.rerun.jsonl``; returns the record entry with the output match of the
    rerun against the first pass (the noise)."""
    bar = p.bar(f"{vp.id} {t.name} (rerun for noise)", len(pt.requests))
    out = session.run_task(
        pt.requests,
        max_tokens=t.spec.max_tokens, temperature=t.spec.temperature, seed=t.spec.seed,
        stop=pt.stop, on_done=lambda x: bar.advance(x.ok),
        per_request=per_request, chat=t.spec.use_chat_completions, logprobs=vp.logprobs,
    )
    bar.close()
    samples = judge_completions(config, vp.name, t.name, pt.requests, out.completions)
    spath = run_dir / "samples" / config / vp.name / f"{t.name}.rerun.jsonl"
    write_jsonl(spath, samples)
    reruns[(vp.name, t.name)] = samples
    om = output_match(first, samples)
    p.log(f"{vp.id} {t.name}: rerun output match against the first pass {_f(om.output_match_rate)} "
          f"({om.matched}/{om.compared}) = the noise")
    return RerunRecord(
        samples=_rel(spath, run_dir),
        seconds=round(out.seconds, 2),
        error_count=sum(1 for x in samples if not x.ok),
        spec_decode=out.spec_metrics,
        output_match_vs_first=om,
        samples_sha256=sha256_file(spath),
    )


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


#: Signals that stop evalrun: Ctrl-C, ``kill``/CI timeouts, a closed terminal, Ctrl-\\.
STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")


def terminate_as_interrupt() -> None:
    """Make every stopping signal (:data:`STOP_SIGNALS`) stop every server and keep the
    partial record.

    First signal: the run record is written with ``status: interrupted`` (so a SIGKILL
    after the CI's grace still leaves it), then SIGTERM goes to every live server's
    process group at once (so in-flight requests end), and KeyboardInterrupt is raised
    in the main thread; each server's context manager then waits for its group to exit
    (up to the stop grace, :func:`harness.engine.server.stop_grace`, saying what it
    waits for) and the runner rewrites the record with the servers' fate.
    Any further signal never interrupts that teardown: it speeds it up, sending SIGKILL
    to every live group (:func:`harness.engine.server.hurry`).
    Without this, SIGHUP (terminal closed) would end evalrun and leave the vLLM server
    running with parent 1. A signal that is ignored when evalrun starts (``nohup``)
    stays ignored.
    """
    import signal

    from harness.engine import server as _server

    state = {"count": 0}

    def handler(signum, frame):  # noqa: ARG001
        name = signal.Signals(signum).name
        state["count"] += 1
        if state["count"] == 1:
            _server.mark_interrupting()
            for rec in list(_RECORDERS):  # the record first: a SIGKILL may follow at any moment
                rec.interrupt(name)
            _server.signal_all(signal.SIGTERM)
            raise KeyboardInterrupt(name)
        _server.hurry()
        _server._event(f"{name} again: sending SIGKILL to every server's process group; still waiting until they are gone")

    for name in STOP_SIGNALS:
        sig = getattr(signal, name, None)
        # a signal the caller ignores stays ignored (``nohup evalrun ...`` survives a
        # closed terminal; a background job of a non-interactive shell ignores SIGINT)
        if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, handler)


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
    from harness.engine.server import unstopped

    sig = getattr(e, "signal_name", None) or (str(e.args[0]) if e.args else "KeyboardInterrupt")
    run_dir = getattr(e, "run_dir", None)
    left = unstopped()
    pids = sorted(set(getattr(e, "leftover_pids", None) or []) | {p for v in left.values() for p in v})
    where = f"; partial record: {Path(run_dir) / 'run.json'}" if run_dir else ""
    if pids:
        msg = (f"{prog}: interrupted ({sig}); WARNING: server processes are still alive: {pids} "
               f"({', '.join(left) or 'evalrun servers'}); end them with: kill -KILL {' '.join(map(str, pids))}{where}")
    else:
        msg = (f"{prog}: interrupted ({sig}); every server evalrun started was stopped "
               f"(checked: none of their processes remains){where}")
    try:
        print(msg, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
