"""The runner: executes a plan, config by config and variant by variant, and writes the record.

It reads as the run's table of contents: each function is a sequence of calls into the
stages and the steps beside it (:mod:`harness.run.config_steps` for a config's steps,
:mod:`harness.run.variant_steps` for a variant's, :mod:`harness.run.outcome` for the verdict,
an error or a signal); one config's run travels in one
:class:`harness.run.context.ConfigRun`. Data flows one way::

    plan -> tasks (prepare) -> session (per variant) -> task.send; server stopped -> task.judge -> samples
         -> scoring / engine counter checks / analysis.acceptance -> analysis.comparison
         -> prefix_steps (divergences scored at the baseline's prefix on the reference's server)
         -> sampled_steps (sampled completions scored on a non-speculative server)
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
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from harness.analysis.comparison import compare, rerun_needs
from harness.analysis.gates import evaluate_gates
from harness.analysis.measurements import Measurements
from harness.config.checks import check_run_id
from harness.config.plan import ConfigPlan, Plan, VariantPlan, mark_not_applicable
from harness.engine.leftovers import find_leftover_servers
from harness.engine.platform_skips import plan_skips
from harness.engine.pool import DevicePool, Job, ServerPlan, new_pool, run_jobs, server_plan
from harness.engine.preflight import (
    ASYNC_NOT_SUPPORTED,
    PendingCheck,
    PreflightRefused,
    ServerCommand,
    check_server_commands,
    start_check,
)
from harness.engine.preflight_cache import CACHE_NAME, cache_key, cached_all_clear, store_all_clear
from harness.records.atomic import ResultsFolderError, check_results_folder
from harness.records.numerics_noise import noise_record
from harness.records.provenance import ConfigRef, LmEvalInfo, new_run_id, provenance, utc_now
from harness.records.recorder import RunRecorder
from harness.records.results import config_result, unstarted_variant
from harness.records.run_folder import RunFolderTaken, claim_run_folder, reclaim_run_folder
from harness.records.run_record import (
    ConfigResult,
    PreflightProblemRecord,
    PreflightRecord,
    ResumedRecord,
    RunRecord,
)
from harness.report.dry_run import subset_warnings
from harness.run.config_steps import judge_gates, prepare_model, prepare_tasks, select_variants
from harness.run.context import ConfigRun, RunContext, RunOptions
from harness.run.outcome import finish, interrupted, record_error
from harness.run.prefix_steps import score_prefixes
from harness.run.resume import decide, in_plan_order, resumed_record, reuse_finished, set_aside
from harness.run.sampled_steps import score_sampled
from harness.run.variant_steps import engine_build, rerun_for_noise, run_variant
from harness.tasks import DataUnavailableError, ShortDataError, available_questions, check_enough

__all__ = ["run", "RunFolderExistsError", "mark_not_applicable"]


class RunFolderExistsError(FileExistsError):
    """The run folder already holds a record; names the folder."""


def run(plan: Plan, opts: RunOptions, ctx: RunContext) -> tuple[RunRecord, Path]:
    """Execute the plan and write the run folder; ``ctx`` holds the run's state (its place,
    recorder, progress and process registry; :func:`harness.api.run` makes it).

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
    claimed, or one holding an earlier attempt, is refused. With ``opts.resume`` the
    earlier attempt's claim is taken over instead (its holder must be gone) and
    :func:`harness.run.resume.decide` says which variants are reused (``record.resumed``).

    Raises:
        RunFolderExistsError: the run folder is claimed by another run or holds an
            earlier run (the message names the holder).
        ResumeRefused: ``opts.resume`` and the earlier attempt differs (nothing started).
        ResultsFolderError: the results folder cannot be created or written or has too
            little free space (checked before any server starts), or the record could
            not be written later (a previous good ``run.json`` is left as it was).
        RunInterrupted: a stopping signal arrived; every server was stopped and the
            partial record (status ``interrupted``) written first.
    """
    run_id = opts.run_id or new_run_id()
    if (bad_id := check_run_id(run_id)) is not None:  # every command: the run folder is one name in --results-dir
        raise RunFolderExistsError(f"run id {run_id!r}: {bad_id}")
    run_dir = Path(opts.results_dir) / run_id
    engine_build.cache_clear()  # each run reads the builds its variants run (a build may change between runs)
    sp = server_plan(plan, opts.variants, opts.gpus, opts.max_servers, opts.estimates)  # DeviceError: before all
    noise_record()  # NoiseSettingError (a bad EVALRUN_NUMERICS_NOISE): before any folder or server
    check_results_folder(opts.results_dir)  # writable, some free space: before any server starts
    try:
        claim = (claim_run_folder if opts.resume is None else reclaim_run_folder)(run_dir, opts.argv)
    except RunFolderTaken as e:
        raise RunFolderExistsError(str(e)) from None
    except OSError as e:
        raise ResultsFolderError(f"run folder {run_dir}: cannot be created: {e.strerror or e}") from e
    try:
        resumed = None
        if opts.resume is not None:  # which variants are reused; the earlier attempt's files set aside
            decision = decide(plan, opts, run_dir, ctx.progress)
            claim.take_over(opts.argv)  # only a resume that goes ahead rewrites the earlier attempt's claim
            resumed = resumed_record(decision, set_aside(run_dir, decision, plan))
            opts = dataclasses.replace(opts, reusable=decision.reusable)
        return _run_claimed(plan, opts, ctx, run_id, run_dir, sp, resumed)
    finally:
        ctx.recorder = None
        claim.release()


def _run_claimed(plan: Plan, opts: RunOptions, ctx: RunContext, run_id: str, run_dir: Path,
                 sp: ServerPlan | None = None, resumed: ResumedRecord | None = None) -> tuple[RunRecord, Path]:
    """:func:`run` once the run folder is claimed: the record is on disk from here on
    (status ``running``), rewritten after every task and variant (:class:`RunRecorder`)."""
    ctx.place.at("run", config=None, variant=None, task=None)
    record, lm_eval_done = _new_record(plan, opts, ctx, run_id)
    record.resumed = resumed
    recorder = ctx.recorder = RunRecorder(record, run_dir)
    try:
        try:
            recorder.save()  # the record exists from the start: status running
            return _run_plan(plan, opts, ctx, run_dir, record, lm_eval_done, sp), run_dir
        except Exception as e:  # noqa: BLE001 - an unexpected error is data: the record keeps it
            recorder.done = True  # the error record is the final word: a signal's handler writes nothing
            lm_eval_done(timeout=5.0)
            return record_error(record, run_dir, e, ctx), run_dir
    except KeyboardInterrupt as e:  # also one arriving while the verdict or the error is written
        raise interrupted(e, ctx, lm_eval_done) from None


def _new_record(plan: Plan, opts: RunOptions, ctx: RunContext, run_id: str) -> tuple[RunRecord, Callable[..., None]]:
    """The run's record at its start (status ``running``): provenance, and servers an
    earlier run left in ``opts.results_dir`` (:mod:`harness.engine.leftovers`: only an identified
    one is named with the command to end it).
    lm-eval's version and task version, and the servers' engine build
    (``provenance.build``, :func:`harness.engine.builds.identity_or_none` of ``plan.python``),
    are filled in by threads; the second item joins them
    (``lm_eval_done(timeout=None)``), called before any server starts and before
    every final write of the record."""
    p = ctx.progress
    leftovers = find_leftover_servers(Path(opts.results_dir))
    for lo in leftovers:
        p.warn(lo.describe())
    started = utc_now()
    refs = [ConfigRef(name=c.name, path=str(c.config.path), sha256=c.config.sha256) for c in plan.configs]
    record = RunRecord(run_id=run_id, provenance=provenance(opts.argv, refs, started), shard=opts.shard)
    record.numerics_noise = noise_record()  # None (absent from run.json) unless EVALRUN_NUMERICS_NOISE is set
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


def _run_plan(plan: Plan, opts: RunOptions, ctx: RunContext, run_dir: Path, record: RunRecord,
              lm_eval_done: Callable[..., None], sp: ServerPlan | None = None) -> RunRecord:
    """The run's steps in order: short data, preflight, every config, the verdict
    (``lm_eval_done`` joins the provenance thread of :func:`_new_record`)."""
    if _short_data(plan, opts, ctx, record):
        lm_eval_done()
        return finish(record, run_dir, True, ctx)
    skips, unknown = plan_skips(plan)  # vLLM's platform skips: not applicable, never PASS (unknown: exit 2)
    for vid, why in {**skips, **unknown}.items():
        (ctx.progress.error if vid in unknown else ctx.progress.warn)(f"{vid}: {why}")
    plan = mark_not_applicable(plan, {**skips, **unknown})
    gate = None
    if opts.preflight:
        stop, not_applicable, gate = _preflight(plan, opts, ctx, record)
        if stop:
            lm_eval_done()
            return finish(record, run_dir, True, ctx)
        plan = mark_not_applicable(plan, not_applicable)
    lm_eval_done()
    _warm_imports()
    try:
        could_not_run = _configs(plan, dataclasses.replace(opts, launch_gate=gate), ctx, run_dir, record, sp)
        if gate is not None:
            gate.settle()
            _preflight(plan, opts, ctx, record, done=gate)  # the all-clear recorded and cached
    except PreflightRefused as e:  # found while the first config was prepared: no server started
        record.configs.clear()
        stop, not_applicable, _ = _preflight(plan, opts, ctx, record, done=e.check)
        if stop:
            return finish(record, run_dir, True, ctx)
        could_not_run = _configs(mark_not_applicable(plan, not_applicable), opts, ctx, run_dir, record, sp)
    return finish(record, run_dir, could_not_run or bool(unknown), ctx)


def _configs(plan: Plan, opts: RunOptions, ctx: RunContext, run_dir: Path, record: RunRecord,
             sp: ServerPlan | None) -> bool:
    """Run every config (:func:`_config_results`), saving the record after each; whether
    something required could not run."""
    could_not_run = False
    for crec, cnr in _config_results(plan, opts, ctx, run_dir, record, sp):
        crec.list_path = plan.list_path  # the model list file that was read
        could_not_run |= cnr
        ctx.place.at("writing", variant=None, task=None)
        ctx.checkpoint()  # keep what is measured so far
    ctx.place.at("writing", config=None, variant=None, task=None)
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


def _short_data(plan: Plan, opts: RunOptions, ctx: RunContext, record: RunRecord) -> bool:
    """Before any server starts: every selected task whose data can be counted here
    (a local GSM8K folder, the synthetic set; :func:`harness.tasks.available_questions`)
    must hold the questions it asks (:func:`harness.tasks.check_enough`). On a short
    task, fill ``record.configs`` with every config NOT RUN (``error`` naming the file
    and both counts) and return True; the run then ends with exit code 2. Data that
    cannot be read is left to the task's own preparation (required / optional)."""
    problems: dict[str, list[str]] = {}
    for config_plan in plan.configs:
        for t in config_plan.tasks:
            try:
                got = available_questions(t.name, t.spec, opts.data_dir)
                if got is not None:
                    check_enough(t.name, t.spec, *got)
            except DataUnavailableError:
                continue
            except ShortDataError as e:
                problems.setdefault(config_plan.name, []).append(str(e))
    if not problems:
        return False
    p = ctx.progress
    for name, msgs in problems.items():
        for msg in msgs:
            p.error(f"{name}: {msg}")
    for config_plan in plan.configs:
        m = Measurements()
        said = problems.get(config_plan.name)
        crec = config_result(config_plan.config, error=("; ".join(said) if said else
                                               "not started: another config's data holds fewer questions than it asks"))
        for variant_plan in config_plan.variants:
            m.variant_record(variant_plan.name).not_run = "short data: refused before any server started"
        crec.gates = evaluate_gates(config_plan.gates, m)
        record.configs.append(crec)
    return True


def _preflight(plan: Plan, opts: RunOptions, ctx: RunContext, record: RunRecord, done: PendingCheck | None = None
               ) -> tuple[bool, dict[str, str], PendingCheck | None]:
    """Check every selected variant's server command with vLLM's own parser and its
    async-scheduling/drafter rule (:func:`harness.engine.preflight.start_check`),
    recorded in ``record.preflight``; ``done``: the answer of a check started before.

    Returns:
        (stop, not applicable, the check when it still runs after its head start: the
        run prepares its first config beside it, every server waits for it, the caller
        decides with ``done`` later). A variant
        vLLM would refuse only for async scheduling with its drafter is returned in the
        second item (variant id -> vLLM's reason) and runs as not applicable. On any
        other problem, ``record.configs`` is filled with every variant NOT RUN (the
        rejected ones with their reason and ``server.status`` ``args_rejected`` /
        ``launch_failed``, the others ``not_started``) and stop is True.
    """
    import time

    p = ctx.progress
    cmds = [
        ServerCommand(
            variant_plan.id,
            config_plan.config.path,
            tuple(a.replace("{port}", "8000") for a in variant_plan.argv),
            {k: v for k, v in variant_plan.env.items() if not k.startswith("EVALRUN_")},  # no fault in a check
            speculates=variant_plan.speculative_config is not None,
        )
        for config_plan in plan.configs
        for variant_plan in config_plan.variants
        if (opts.variants is None or variant_plan.name in opts.variants)
        and not variant_plan.not_applicable
        and variant_plan.build_error is None  # no server starts on a build that was not made
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
            p.log("  the first config's tasks and model are prepared beside it; no server starts before its answer")
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


def _refused_before_launch(plan: Plan, bad: dict[str, PreflightProblemRecord], record: RunRecord) -> None:
    """Fill ``record.configs`` with every variant NOT RUN because server commands were
    rejected before launch (``bad``: variant id -> the preflight problem)."""
    for config_plan in plan.configs:
        m = Measurements()
        crec = config_result(config_plan.config)
        for variant_plan in config_plan.variants:
            pr = bad.get(variant_plan.id)
            if pr is not None:
                vrec = unstarted_variant(variant_plan, pr.kind, f"server command rejected before launch: {pr.message}")
                reason = f"{pr.kind}: {pr.message}"
            else:
                reason = "not started: another variant's server command was rejected before launch"
                vrec = unstarted_variant(variant_plan, "not_started", reason)
            crec.variants[variant_plan.name] = vrec
            m.variant_record(variant_plan.name).not_run = reason
        crec.gates = evaluate_gates(config_plan.gates, m)
        record.configs.append(crec)


def _config_results(plan: Plan, opts: RunOptions, ctx: RunContext, run_dir: Path, record: RunRecord,
                    sp: ServerPlan | None) -> Iterator[tuple[ConfigResult, bool]]:
    """``(config result, could not run)`` of every config, in plan order. On a CPU host
    (``sp`` None or without devices) each config runs when asked for. On a
    GPU host every config runs in its own thread at once and its variants lease
    disjoint device sets of one pool (:mod:`harness.engine.pool`), so variants of
    different configs share the node; a config's comparisons and gates run when all
    its variants finished. An unexpected error keeps the place where it happened."""
    if sp is None or not sp.uses_pool:
        for config_plan in plan.configs:
            yield _run_config(config_plan, opts, ctx, run_dir, record)
        return
    pool = new_pool(sp)
    ctx.progress.log(f"devices {','.join(sp.devices)}: variants side by side on disjoint sets, longest first"
                      + (f", at most {sp.max_servers} server(s) at once" if sp.max_servers else ""))

    def one_config(config_plan: ConfigPlan, _devices: tuple[str, ...]) -> tuple[ConfigResult, bool]:
        try:
            out = _run_config(config_plan, opts, ctx, run_dir, record, pool=pool, sp=sp)
        except Exception as e:
            ctx.place.stamp(e)
            raise
        finally:  # variants it did not run (data, model, not selected) hold no place in the order
            pool.withdraw([variant_plan.id for variant_plan in config_plan.variants])
        ctx.checkpoint()  # the config's comparisons and gates are on disk before the others end
        return out

    try:
        results = run_jobs(
            [Job(config_plan.name, functools.partial(one_config, config_plan)) for config_plan in plan.configs], pool
        )
    except Exception as e:
        ctx.place.restore(e)
        raise
    finally:  # the record's configs in plan order, whichever thread appended first
        order = {config_plan.name: i for i, config_plan in enumerate(plan.configs)}
        record.configs.sort(key=lambda r: order.get(r.name, len(order)))
    yield from results


def _run_config(config_plan: ConfigPlan, opts: RunOptions, ctx: RunContext, run_dir: Path, record: RunRecord,
                pool: DevicePool | None = None, sp: ServerPlan | None = None) -> tuple[ConfigResult, bool]:
    """Run one config: its tasks prepared, its model resolved, every selected variant,
    the comparisons (and the baseline reruns they need), its gates. Returns the config's
    record (already in ``record.configs``, filled in place so an interrupt keeps what ran)
    and whether something required could not run."""
    c = config_plan.config
    crec = config_result(c, tasks={name: spec.for_run(run_dir.name).model_dump(mode="json", exclude={"gates"})
                                   for name, spec in c.tasks.items()})
    record.configs.append(crec)  # filled in place, so an interrupt keeps what ran
    run = ConfigRun(config_plan, opts, ctx, run_dir, record, crec, pool=pool, servers=sp)
    variants = select_variants(run)
    # 1. tasks: data first, so a missing data set stops before minutes of server start-up.
    could_not_run = prepare_tasks(run)
    # 1b. a run smaller than the set its threshold was measured on: say so now
    crec.subset_warnings = subset_warnings(c)
    for w in crec.subset_warnings:
        ctx.progress.warn(f"{c.name}: {w.message}")
    # 2. the model (none when no variant runs: a config vLLM skips here downloads nothing)
    model_ref = prepare_model(run) if variants else c.model
    if model_ref is None:
        crec.gates = evaluate_gates(config_plan.gates, run.measured)
        return crec, True
    run = dataclasses.replace(run, model_ref=model_ref)
    # 3. variants
    run.measured.runners_collected = True  # every variant's model runner is read (run_variant)
    could_not_run |= not all(_run_variants(run, reuse_finished(run, variants)))  # --resume: reused ones loaded
    in_plan_order(run)
    # 4. comparisons (the record's paired test reads each task's own pipeline); a
    # baseline rerun for noise only where divergences are left that no distribution judges
    _comparisons(run, variants)
    # 4a. divergences the reference's recorded distribution could not judge: scored at the baseline's prefix
    score_prefixes(run, variants)
    # 4b. the sampled verdict: every sampled completion scored on a non-speculative server
    score_sampled(run, variants)
    # 5. gates, 6. gates against the stored baseline (last known good), when there is one
    judge_gates(run)
    return crec, could_not_run


def _run_variants(run: ConfigRun, variants: list[VariantPlan]) -> list[bool]:
    """Every variant of ``variants`` run (:func:`harness.run.variant_steps.run_variant`): one at
    a time in this thread on a CPU host, else side by side on the pool's device sets.
    Returns per variant whether its server ran."""
    if run.pool is None or run.servers is None:  # a CPU host (the pool comes with its plan)
        return [run_variant(run, variant_plan) for variant_plan in variants]
    run.pool.withdraw([v.id for v in run.plan.variants if v not in variants])  # never asking for devices
    return run_jobs([Job(v.id, functools.partial(run_variant, run, v), need=run.servers.need(v.id))
                     for v in variants], run.pool)


def _comparisons(run: ConfigRun, variants: list[VariantPlan]) -> None:
    """The config's comparisons (:func:`harness.analysis.comparison.compare`); then the
    baseline reruns for noise they need (:func:`rerun_needs`,
    :func:`harness.run.variant_steps.rerun_for_noise`) and, after them, the comparisons again."""
    c, m = run.plan.config, run.measured
    run.result.comparisons = compare(c, m, run.reruns, at=run.place.at)
    needs = rerun_needs(c, m, run.reruns)
    for vname, tasks in needs.items():
        variant_plan = next((v for v in variants if v.name == vname), None)
        if variant_plan is not None:
            rerun_for_noise(run, variant_plan, [t for t in tasks if t in run.prepared])
    if needs:
        run.result.comparisons = compare(c, m, run.reruns, needs, at=run.place.at)
