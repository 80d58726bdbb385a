"""What a run is asked to do (:class:`RunOptions`), the state of the run in progress
(:class:`RunContext`: where it is, its recorder, its process registry and progress) and what
one config's run carries through its steps (:class:`ConfigRun`): the front door
(:func:`harness.api.run`) makes the context, the runner (:mod:`harness.run.runner`) builds
the rest, the steps of a variant (:mod:`harness.run.variant_steps`) read them.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis.measurements import Measurements
from harness.config.plan import ConfigPlan
from harness.engine.pool import DevicePool, ServerPlan
from harness.engine.preflight import PendingCheck
from harness.engine.server import EngineProcesses
from harness.records.recorder import RunRecorder
from harness.records.run_folder import RunFolder
from harness.records.run_record import ConfigResult, RunRecord, VariantResult
from harness.records.samples import Sample
from harness.records.shards import ShardInfo
from harness.report.progress import Progress
from harness.tasks import PreparedTask

__all__ = ["RunOptions", "Place", "RunContext", "ConfigRun"]


@dataclass
class RunOptions:
    """How to run a plan.

    Attributes:
        results_dir: parent folder of run folders (default ``results/``).
        data_dir: GSM8K folder (test.jsonl, train.jsonl), or None.
        run_id: the run folder's name (default: a new time-based id).
        argv: the command line, for provenance.
        variants: run only these variant names (None = all).
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
        shard: ``--shard i/n``: which shard of a list this run is (``record.shard``;
            :mod:`harness.run.merge` joins the shards), None for a whole run.
        gpus: ``--gpus``: the devices evalrun may use (a count or a comma list; None =
            every device found, :func:`harness.engine.devices.available_devices`).
        max_servers: ``--max-servers``: at most this many servers alive at once.
        estimates: variant id -> estimated server seconds, the order in which variants
            get devices (longest first; :func:`harness.engine.pool.server_plan`).
        launch_gate: the pre-launch check still running while the first config is
            prepared; every server waits for it
            (:class:`harness.engine.preflight.PendingCheck`; set by the runner).
        resume: ``--resume``: the run folder of the earlier attempt to continue (its
            parent is ``results_dir``, its name ``run_id``), None for a new run.
        reusable: ``(config, variant)`` -> the earlier attempt's record of a variant
            whose results are complete and match (:func:`harness.run.resume.decide`; set by
            the runner): loaded, not run.
    """

    results_dir: Path
    data_dir: Path | None = None
    run_id: str | None = None
    argv: list[str] = field(default_factory=lambda: list(sys.argv))
    variants: list[str] | None = None
    baseline_dir: Path | None = None
    allow_contamination: bool = False
    preflight: bool = True
    preflight_cache: bool = True
    shard: ShardInfo | None = None
    gpus: str | None = None
    max_servers: int | None = None
    estimates: dict[str, float] | None = None
    launch_gate: PendingCheck | None = None
    resume: Path | None = None
    reusable: dict[tuple[str, str], VariantResult] = field(default_factory=dict)


@dataclass
class Place(threading.local):
    """Where the run is: the stage and the config, variant and task it is in (what an
    unexpected exception is recorded with, :class:`harness.records.run_record.RunErrorRecord`).
    Stages: ``prepare``, ``model``, ``server``, ``client``, ``judging``, ``scoring``,
    ``statistics``, ``gates``, ``baseline``, ``writing``, ``run``. One per thread (variants
    running side by side each have their own, :mod:`harness.engine.pool`)."""

    stage: str = "run"
    config: str | None = None
    variant: str | None = None
    task: str | None = None

    def at(self, stage: str, **where: str | None) -> None:
        """Enter ``stage``; keyword arguments (config, variant, task) replace those parts."""
        self.stage = stage
        for k, v in where.items():
            setattr(self, k, v)

    def stamp(self, exc: BaseException) -> None:
        """Note this thread's place on ``exc`` (unless a deeper thread did), for the
        thread that records it (:meth:`restore`)."""
        if not hasattr(exc, "evalrun_place"):
            exc.evalrun_place = (self.stage, self.config, self.variant, self.task)  # type: ignore[attr-defined]

    def restore(self, exc: BaseException) -> None:
        """Take the place :meth:`stamp` noted on ``exc``, when one was."""
        where = getattr(exc, "evalrun_place", None)
        if where is not None:
            self.at(where[0], config=where[1], variant=where[2], task=where[3])


@dataclass
class RunContext:
    """The state of one command's runs, owned by the run instead of module globals: made
    by the front door (:func:`harness.api.run`) and handed to every step.

    Attributes:
        processes: the registry of this process's servers and stopping state
            (:class:`harness.engine.server.EngineProcesses`; the front door passes the
            process's own).
        progress: the progress reporter (terminal lines, bars, warnings).
        place: where the run is (:class:`Place`, one per thread).
        recorder: the recorder of the run in progress (None outside a run): the
            checkpoints and the first stopping signal write its record.
        last_final: the recorder whose final word (verdict, error or interrupt) was
            written last; kept after the run ends, so a signal that comes later (while
            the command prints its tables) keeps that outcome.
    """

    processes: EngineProcesses
    progress: Progress = field(default_factory=Progress)
    place: Place = field(default_factory=Place)
    recorder: RunRecorder | None = None
    last_final: RunRecorder | None = None

    def checkpoint(self) -> None:
        """Rewrite the record of the run in progress (no-op outside a run).

        Raises:
            OSError: the record cannot be written.
        """
        if self.recorder is not None:
            self.recorder.save()

    def interrupt(self, signal_name: str) -> None:
        """The first stopping signal: mark the run in progress interrupted and write its
        record (never raises; nothing outside a run)."""
        if self.recorder is not None:
            self.recorder.interrupt(signal_name)

    def install_stop_handlers(self) -> None:
        """Make every stopping signal stop every server and keep the partial record
        (:meth:`harness.engine.server.EngineProcesses.install_stop_handlers` with
        :meth:`interrupt` first: a SIGKILL may follow at any moment).

        First signal: the record is written with ``status: interrupted``, then SIGTERM
        goes to every live server's process group and KeyboardInterrupt is raised in the
        main thread; each server's context manager waits for its group to exit and the
        runner rewrites the record with the servers' fate. A further signal never
        interrupts that teardown: it sends SIGKILL to every live group. A signal ignored
        when evalrun starts (``nohup``) stays ignored.
        """
        self.processes.install_stop_handlers(self.interrupt)

    def leftover_pids(self) -> list[int]:
        """Pids of evalrun's servers still alive after their teardown (sorted, no repeats)."""
        return sorted({pid for pids in self.processes.unstopped().values() for pid in pids})


@dataclass(frozen=True)
class ConfigRun:
    """One config's run, as its steps see it. The fields are fixed once the config's
    model is resolved (:func:`dataclasses.replace` sets ``model_ref``); the records and
    measurements in them are filled in place, so an interrupt keeps what ran.

    Attributes:
        plan: the config's plan (its variants, tasks and gates).
        opts: the run's options (data folder, baselines, ...).
        ctx: the run's state (place, recorder, process registry, progress).
        run_dir: the run folder (``logs/``, ``samples/``, ``run.json``).
        record: the run's record (``provenance.datasets`` is filled here).
        result: the config's record, already in ``record.configs``.
        measured: the config's measurements, every variant's merged in: a view of
            ``result`` (bound here) plus the samples and reasons the record does not hold.
        prepared: task name -> prepared task (the tasks that can run).
        model_ref: the resolved model (a path or hub id; "" until resolved).
        reruns: ``(variant, task)`` -> samples of its noise rerun.
        pool: the device pool on a GPU host (None: one variant at a time).
        servers: the device plan the pool follows (None on a CPU host).
    """

    plan: ConfigPlan
    opts: RunOptions
    ctx: RunContext
    run_dir: Path
    record: RunRecord
    result: ConfigResult
    measured: Measurements = field(default_factory=Measurements)
    prepared: dict[str, PreparedTask] = field(default_factory=dict)
    model_ref: str = ""
    reruns: dict[tuple[str, str], tuple[Sample, ...]] = field(default_factory=dict)
    pool: DevicePool | None = None
    servers: ServerPlan | None = None

    def __post_init__(self) -> None:
        if self.measured.record is None:  # the gates read the config's record through it
            self.measured.record = self.result

    @property
    def progress(self) -> Progress:
        """The run's progress reporter."""
        return self.ctx.progress

    @property
    def folder(self) -> RunFolder:
        """Every path of the run folder (:class:`harness.records.run_folder.RunFolder`)."""
        return RunFolder(self.run_dir)

    @property
    def place(self) -> Place:
        """Where the run is (this thread's :class:`Place`)."""
        return self.ctx.place
