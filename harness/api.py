"""The front door of a run: :func:`run` is how every caller starts one (the ``evalrun``
command, ``evalrun calibrate``, ``evalrun selfcheck``, ``evalrun bisect`` and the pytest
plugin). It builds the run's options (:class:`harness.run.context.RunOptions`) and its
state (:class:`harness.run.context.RunContext`: place, recorder, progress, the process
registry), installs the stopping-signal handling, and hands the plan to the runner
(:func:`harness.run.runner.run`).

Example::

    from harness import api
    from harness.config.loader import load_config
    from harness.config.plan import build_plan

    plan = build_plan([load_config("configs/tiny-qwen3next-mtp-cpu.yaml")])
    record, run_dir = api.run(plan, results_dir=Path("results"), argv=["my-script"])
    print(record.outcome, run_dir / "run.json")

This module is the one place that takes the process's server registry
(:func:`harness.engine.server.processes`) for a run.
"""

from __future__ import annotations

from pathlib import Path

from harness.config.plan import Plan
from harness.engine.devices import DeviceError
from harness.engine.server import processes
from harness.faults.noise import NoiseSettingError
from harness.records.atomic import ResultsFolderError
from harness.records.run_record import RunRecord
from harness.records.shards import ShardInfo
from harness.report.progress import Progress
from harness.run import outcome
from harness.run.context import RunContext, RunOptions
from harness.run.resume import ResumeRefused
from harness.run.resume import finished_run as _finished
from harness.run.runner import RunFolderExistsError
from harness.run.runner import run as run_plan

__all__ = ["REFUSED", "RunContext", "new_context", "run", "say_interrupted"]

#: What :func:`run` raises when it refuses before any server starts (each names why):
#: the run folder is taken, the results folder cannot be written, the devices asked for
#: are not there, ``resume`` differs from the earlier attempt, ``EVALRUN_NUMERICS_NOISE`` is invalid.
REFUSED: tuple[type[Exception], ...] = (RunFolderExistsError, ResultsFolderError, DeviceError, ResumeRefused,
                                        NoiseSettingError)


def new_context(progress: Progress | None = None) -> RunContext:
    """A run's state with this process's server registry and ``progress`` (default: a
    :class:`harness.report.progress.Progress` that prints everything)."""
    return RunContext(processes=processes(), progress=progress if progress is not None else Progress())


def run(plan: Plan, *, results_dir: Path, argv: list[str], run_id: str | None = None,
        data_dir: Path | None = None, variants: list[str] | None = None, baseline_dir: Path | None = None,
        allow_contamination: bool = False, shard: ShardInfo | None = None, gpus: str | None = None,
        max_servers: int | None = None, estimates: dict[str, float] | None = None, preflight_cache: bool = True,
        resume: Path | None = None, context: RunContext | None = None,
        stop_signals: bool = True) -> tuple[RunRecord, Path]:
    """Run ``plan`` and write its run folder ``results_dir/<run id>/``.

    Args:
        plan: the configs, variants, tasks and gates (:func:`harness.config.plan.build_plan`).
        results_dir, argv, run_id, data_dir, variants, baseline_dir, allow_contamination,
            shard, gpus, max_servers, estimates, preflight_cache, resume: the run's
            options, as :class:`harness.run.context.RunOptions` documents them.
        context: the run's state (:func:`new_context`); a caller that must say, after
            the run returned, what a late signal kept passes its own and reads
            ``context.last_final``. Default: a new one.
        stop_signals: install the stopping-signal handlers
            (:meth:`harness.run.context.RunContext.install_stop_handlers`: the first
            SIGINT/SIGTERM/SIGHUP/SIGQUIT writes the record, stops every server and raises
            KeyboardInterrupt). False leaves the process's handlers as they are (the pytest
            plugin: pytest owns them).

    Returns:
        (the run record, the run folder); ``record.exit_code`` is 0 passed, 1 a gate
        failed, 2 something could not run or an unexpected error (``status`` ``error``).

    Raises:
        RunFolderExistsError, ResultsFolderError, DeviceError, ResumeRefused: refused
            before any server starts (:data:`REFUSED`).
        harness.run.outcome.RunInterrupted: a stopping signal ended the run (every server
            stopped, the partial record written first).
    """
    ctx = context if context is not None else new_context()
    opts = RunOptions(
        results_dir=results_dir, data_dir=data_dir, run_id=run_id, argv=list(argv), variants=variants,
        baseline_dir=baseline_dir, allow_contamination=allow_contamination, shard=shard, gpus=gpus,
        max_servers=max_servers, estimates=estimates, preflight_cache=preflight_cache, resume=resume,
    )
    ctx.last_final = None
    if stop_signals:
        ctx.install_stop_handlers()  # the record first: a SIGKILL may follow at any moment
    return run_plan(plan, opts, ctx)


def finished_run(plan: Plan, run_dir: Path, *, argv: list[str], data_dir: Path | None = None,
                 variants: list[str] | None = None, context: RunContext | None = None) -> RunRecord:
    """The finished run in ``run_dir`` when it measured what running ``plan`` there would
    (:func:`harness.run.resume.finished_run`).

    Raises:
        ResumeRefused: it did not finish, or anything it measured differs (named).
    """
    ctx = context if context is not None else new_context()
    opts = RunOptions(results_dir=run_dir.parent, data_dir=data_dir, run_id=run_dir.name, argv=list(argv),
                      variants=variants)
    return _finished(plan, opts, run_dir, ctx.progress)


def say_interrupted(e: BaseException, prog: str = "evalrun") -> None:
    """Tell on stderr what a stopping signal left behind (:func:`harness.run.outcome.say_interrupted`
    with this process's server registry). Never raises."""
    outcome.say_interrupted(e, processes(), prog)
