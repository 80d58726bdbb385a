"""What a run is asked to do (:class:`RunOptions`) and what one config's run carries
through its steps (:class:`ConfigRun`): the runner (:mod:`harness.run.runner`) builds them,
the steps of a variant (:mod:`harness.run.variant_steps`) read them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis.measurements import Measurements
from harness.config.plan import ConfigPlan
from harness.engine.pool import DevicePool, ServerPlan
from harness.engine.preflight import PendingCheck
from harness.records.run_record import ConfigResult, RunRecord, VariantResult
from harness.records.samples import Sample
from harness.records.shards import ShardInfo
from harness.report.progress import Progress
from harness.tasks import PreparedTask

__all__ = ["RunOptions", "ConfigRun"]


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
    progress: Progress = field(default_factory=Progress)
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


@dataclass(frozen=True)
class ConfigRun:
    """One config's run, as its steps see it. The fields are fixed once the config's
    model is resolved (:func:`dataclasses.replace` sets ``model_ref``); the records and
    measurements in them are filled in place, so an interrupt keeps what ran.

    Attributes:
        plan: the config's plan (its variants, tasks and gates).
        opts: the run's options (progress, data folder, baselines, ...).
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
        return self.opts.progress
