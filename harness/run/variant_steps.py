"""One variant's steps on its engine session, each once: start the server, send every
task, stop the server, judge what was sent, read the engine's reports; and the rerun for
noise that starts the server again (:func:`run_variant`, :func:`rerun_for_noise`).

An orchestration module beside the runner rather than part of :mod:`harness.engine`:
judging a task scores it (:mod:`harness.analysis.scoring`), bounds its acceptance
(:mod:`harness.analysis.acceptance`) and matches a rerun's output
(:func:`harness.analysis.scoring.output_match`), and a failed server's log is
diagnosed by :mod:`harness.engine.doctor`; those stages come after the engine's.

Every task's requests are sent while the server is up (:meth:`harness.tasks.base.Task.send`);
the server is then stopped, its devices handed back, and only then is each task judged,
scored and recorded (:meth:`harness.tasks.base.Task.judge`), so no device waits on CPU work.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis.acceptance import acceptance_intervals
from harness.analysis.comparison import noise_variants
from harness.analysis.measurements import Measurements
from harness.analysis.scoring import output_match, score_task
from harness.config.plan import PORT_PLACEHOLDER, TaskPlan, VariantPlan, shell_line
from harness.engine.builds import identity_or_none
from harness.engine.devices import given_devices
from harness.engine.doctor import diagnose_server_log
from harness.engine.info import EngineInfoError, check_effective, model_runner_fact
from harness.engine.rpc_checks import missing_extension, run_checks, worker_extension
from harness.engine.server import ServerStartError
from harness.engine.session import VariantSession, counter_problem
from harness.records.provenance import EngineBuild
from harness.records.results import (
    plugin_report,
    reject_counters,
    rel,
    requested,
    rerun_record,
    task_result,
    unstarted_variant,
)
from harness.records.run_record import LmEvalTaskRecord, RerunRecord, ServerRecord, VariantResult
from harness.records.samples import Sample, write_jsonl
from harness.run.context import ConfigRun
from harness.run.serving import FIRST_PASS, RERUN, VariantServer
from harness.tasks import SentTask, TaskContext, task_for

__all__ = ["VariantRun", "run_variant", "rerun_for_noise"]


@dataclass
class VariantRun:
    """What serving one variant produced; :func:`run_variant` merges it into the
    config's measurements (:meth:`merge_into`), so a variant shares no state with the
    others while it runs.

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


@dataclass
class _Sent:
    """One task sent on a variant's server, not judged yet: its plan, context and what
    :meth:`harness.tasks.base.Task.send` returned; ``rerun`` the context and sent result
    of its inline noise rerun, when one ran."""

    task: TaskPlan
    ctx: TaskContext
    sent: SentTask
    rerun: tuple[TaskContext, SentTask] | None = None


def run_variant(run: ConfigRun, variant_plan: VariantPlan, devices: tuple[str, ...] = ()) -> bool:
    """Run one variant of ``run`` (on ``devices`` of ``run.pool`` when given): serve it
    (:func:`_serve`), merge what it measured into ``run.measured`` and ``run.reruns``,
    then read its plugin reports and model runner into its record.

    Returns:
        False when its server failed or its engine build could not be made
        (``variant_plan.build_error``: no server starts, ``server.status`` ``build_failed``).

    Raises:
        KeyboardInterrupt: a stopping signal (the record says ``interrupted``).
    """
    if variant_plan.build_error is not None:
        return _build_failed(run, variant_plan)
    pool = run.pool
    try:
        out = _serve(run, VariantServer(run, variant_plan, FIRST_PASS, devices))
    except Exception as e:  # the variant's thread knows where it was: keep it for the record
        if pool is not None:
            run.place.stamp(e)
        raise
    out.merge_into(run.measured, run.reruns)
    if pool is not None:  # released when its server stopped (before judging); here too if it never started
        pool.release(variant_plan.id)
    vr = run.result.variants[variant_plan.name]
    vr.build, vr.build_spec = engine_build(variant_plan.python), variant_plan.build
    if pool is not None and pool.cancelled.is_set() and run.ctx.processes.interrupting():  # stopped by the signal
        vr.server = ServerRecord(status="interrupted", exit_code=vr.server.exit_code, seconds=vr.server.seconds,
                                 pid=vr.server.pid)
        vr.error = "interrupted by a signal" + (f" ({vr.error})" if vr.error else "")
    c = run.plan.config
    run.place.at("server", config=c.name, variant=variant_plan.name, task=None)  # the plugin's per-process reports
    vr.plugin = plugin_report(run.run_dir, c.name, variant_plan)
    vr.model_runner = model_runner_fact(vr.plugin.model_runners, read_log(run.folder.log(c.name, variant_plan.name)))
    run.ctx.checkpoint()  # the finished variant's whole record on disk before the next server starts
    return out.ok


@functools.lru_cache(maxsize=64)
def engine_build(python: str) -> EngineBuild | None:
    """The engine build of interpreter ``python``, read once per interpreter
    (:func:`harness.engine.builds.identity_or_none`; None when it cannot be read)."""
    return identity_or_none(python)


def _build_failed(run: ConfigRun, variant_plan: VariantPlan) -> bool:
    """A variant whose engine build could not be made: recorded with the build's error
    (naming the installer's log), every task NOT RUN, no server started. Returns False."""
    if run.pool is not None:
        run.pool.release(variant_plan.id)
    why = f"engine build {variant_plan.build} could not be made: {variant_plan.build_error}"
    run.progress.error(f"{variant_plan.id}: {why}")
    vrec = unstarted_variant(variant_plan, "build_failed", why)
    vrec.build_spec = variant_plan.build
    run.result.variants[variant_plan.name] = vrec
    run.measured.variant_record(variant_plan.name).not_run = why
    return False


def _serve(run: ConfigRun, server: VariantServer) -> VariantRun:
    """Serve one variant's first pass on ``server``: its engine facts, tasks.
    ``run.result.variants[variant_plan.name]`` receives the variant record as soon as it exists (so
    an interrupt keeps it).

    The tasks are sent while the server is up, then the server is stopped and its devices
    given back (:class:`harness.run.serving.VariantServer`), and only then each task
    judged. An lm-eval task judges inside lm-eval's own loop, i.e. while sending. On a
    stopping signal the tasks already sent are still judged and recorded.

    The server's fate is ``vrec.server`` (:class:`ServerRecord`: ``ready``,
    ``exited_early``, ``not_ready_timeout``, ``launch_failed``, ``died_mid_task``,
    ``interrupted``, with exit code and seconds); ``vrec.engine_error`` says why the
    effective configuration could not be read (``variant_effective`` then fails).
    A task whose counters are impossible (:func:`harness.engine.session.counter_problem`)
    gets ``spec_decode`` None and ``spec_decode_error`` naming the counters, so its
    acceptance gates fail.
    """
    c, p, variant_plan = run.plan.config, run.progress, server.variant
    log_path, argv = server.log_path, server.argv
    vrec = VariantResult(
        argv=argv,
        env=dict(variant_plan.env),
        fault=variant_plan.fault,
        log=rel(log_path, run.run_dir),
        requested=requested(variant_plan),
    )
    out = VariantRun(vrec)
    run.result.variants[variant_plan.name] = vrec
    run.place.at("server", config=c.name, variant=variant_plan.name, task=None)
    todo = [t for t in run.plan.tasks if t.name in run.prepared]
    if not todo:
        vrec.error = "no task of this config can run"
        out.measured.variant_record(variant_plan.name).not_run = vrec.error
        return out
    p.log(f"{variant_plan.id}: starting the vLLM server (log: {log_path})")
    p.log(f"  $ {shell_line(argv, variant_plan.env)}")
    p.log(f"  ({PORT_PLACEHOLDER} is the free port chosen at start-up; "
          "the server log's first lines hold the exact command)")
    vrec.devices = given_devices({**os.environ, **server.env})
    if _extension_missing(run, variant_plan, out):
        return out
    sent: list[_Sent] = []  # sent while the server is up, judged once it is stopped
    try:
        with server as session:
            _server_ready(session, run, variant_plan, out)
            t_eval = time.monotonic()  # evaluation: first request .. last counter snapshot
            for t in todo:
                _send_task(session, run, variant_plan, t, argv, sent)
            vrec.evaluation_seconds = round(time.monotonic() - t_eval, 2)
            t_stop = time.monotonic()
        vrec.teardown_seconds = round(time.monotonic() - t_stop, 2)
        vrec.server.exit_code = session.server.exit_code
    except KeyboardInterrupt:
        if server.session is None:  # while waiting for devices or the pre-launch check: no server yet
            raise
        srv = server.session.server
        vrec.server = ServerRecord(status="interrupted", exit_code=srv.exit_code, seconds=vrec.server.seconds,
                                   pid=srv.pid)
        vrec.error = "interrupted by a signal"
        _judge_all_before_interrupt(run, variant_plan, sent, out)
        raise
    except ServerStartError as e:
        _judge_all(run, variant_plan, sent, out)  # the tasks it finished before it died
        assert server.session is not None  # made before the server could fail to start
        _server_failed(e, server.session, variant_plan, todo, argv, out, run)
        return out
    _judge_all(run, variant_plan, sent, out)  # its devices are free before judging, statistics and reports
    return out


def _extension_missing(run: ConfigRun, variant_plan: VariantPlan, out: VariantRun) -> bool:
    """Before the server of a config with ``startup_rpc_checks`` starts: whether its worker
    extension's module cannot be imported by the servers' interpreter
    (:func:`harness.engine.rpc_checks.missing_extension`). vLLM cannot start such a server,
    so none starts: the variant is NOT RUN with the reason, its checks ``not_run``."""
    checks = run.plan.config.startup_rpc_checks
    ext = worker_extension(variant_plan.argv) if checks else None
    missing = missing_extension(variant_plan.python, ext) if ext is not None else None
    if missing is None:
        return False
    vrec = out.record
    run.progress.error(f"{variant_plan.id}: {missing}; no server started")
    vrec.server, vrec.error = ServerRecord(status="not_started"), f"not started: {missing}"
    vrec.startup_checks = run_checks("", checks, missing=missing)
    out.measured.variant_record(variant_plan.name).not_run = missing
    return True


def _server_ready(session: VariantSession, run: ConfigRun, variant_plan: VariantPlan, out: VariantRun) -> None:
    """The server answered: its start-up in the record, then the engine's facts and
    whether the variant is effective as asked (:func:`check_effective`), then the config's
    start-up checks (``startup_rpc_checks``, :func:`harness.engine.rpc_checks.run_checks`)."""
    c, p, vrec, srv = run.plan.config, run.progress, out.record, session.server
    vrec.startup_seconds = round(srv.startup_seconds or 0, 1)
    vrec.server = ServerRecord(status="ready", seconds=vrec.startup_seconds, pid=srv.pid)
    p.log(f"{variant_plan.id}: server ready in {vrec.startup_seconds}s on {session.base_url}")
    run.ctx.checkpoint()
    try:
        facts = session.engine_facts()
        vrec.engine = facts
        if facts.platform == "rocm" and c.rocm_request_timeout_seconds is not None:
            # vLLM's test reads rocm_request_timeout_seconds on ROCm only; so does evalrun
            session.request_timeout = c.rocm_request_timeout_seconds
            p.log(f"{variant_plan.id}: ROCm engine: request timeout {c.rocm_request_timeout_seconds:g} s "
                  "(rocm_request_timeout_seconds)")
        if facts.vllm_version is None:  # the session reads /version leniently
            raise EngineInfoError(f"{variant_plan.id}: cannot read the engine's version from /version")
        eff = check_effective(
            facts, variant_plan.speculative_config, variant_plan.async_scheduling, variant_plan.expected_effective
        )
        vrec.effective = eff
        if not eff.effective:
            p.warn(f"{variant_plan.id}: not effective as asked: {eff.mismatches}"
                   + (" (declared expected on this platform)" if eff.expected_on_platform else ""))
    except EngineInfoError as e:
        vrec.engine_error = str(e)
        p.error(f"{e} (variant_effective cannot pass without it)")
    if c.startup_rpc_checks:
        vrec.startup_checks = run_checks(session.base_url, c.startup_rpc_checks)
        for o in vrec.startup_checks:
            (p.log if o.verdict == "passed" else p.error)(f"{variant_plan.id}: start-up check {o.detail}")


def _send(session: VariantSession, run: ConfigRun, variant_plan: VariantPlan, t: TaskPlan, argv: list[str],
          raw_path: Path | None, label: str, at: Callable[[str], None] | None = None) -> tuple[TaskContext, SentTask]:
    """Send task ``t``'s requests on the running server (:meth:`harness.tasks.base.Task.send`):
    the one send path of a first pass and of a noise rerun. ``raw_path`` keeps the
    engine's answers before judging; ``at`` (default: none) is told each stage."""
    c, p = run.plan.config, run.progress
    ctx = TaskContext(
        config=c.name, variant=variant_plan.name, variant_id=variant_plan.id, task=t.name,
        spec=t.spec.for_run(run.run_dir.name),
        per_request=c.per_request_metrics, max_concurrency=c.max_concurrency,
        request_timeout=c.request_timeout_seconds, logprobs=variant_plan.logprobs, server_argv=tuple(argv),
        model_ref=run.model_ref, raw_path=raw_path, label=label, log=p.log, warn=p.warn, error=p.error, bar=p.bar,
        seed_offset=variant_plan.seed_offset, **({} if at is None else {"at": at}),
    )
    return ctx, task_for(t.spec.kind).send(session, ctx, run.prepared[t.name])


def _send_task(session: VariantSession, run: ConfigRun, variant_plan: VariantPlan, t: TaskPlan, argv: list[str],
               sent: list[_Sent]) -> None:
    """One task's server work on the variant's running server: its requests and, when
    the config asks for it, its inline noise rerun; appended to ``sent`` (for
    :func:`_judge_task`), then a dead server raised.

    Raises:
        ServerStartError: the server died during the task (``died_mid_task``).
    """
    run.place.at("client", variant=variant_plan.name, task=t.name)
    kind = task_for(t.spec.kind)
    raw_path = run.folder.samples(run.plan.config.name, variant_plan.name, t.name, "raw")
    item = _Sent(
        t, *_send(session, run, variant_plan, t, argv, raw_path, f"{variant_plan.id} {t.name}", at=run.place.at)
    )
    sent.append(item)
    if variant_plan.name in noise_variants(run.plan) and kind.reruns_for_noise and session.server.alive():
        run.place.at("client")  # the noise rerun's requests
        item.rerun = _send(session, run, variant_plan, t, argv, None, f"{variant_plan.id} {t.name} (rerun for noise)")
    outcome = item.sent.outcome
    failures = bool(item.sent.failed_requests or outcome.metrics_error
                    or counter_problem(outcome, variant_plan.speculative_config, f"{variant_plan.id} {t.name}"))
    # failed requests: a dying server may still be exiting; let it show
    session.raise_if_died(t.name, failures)


def _judge_all(run: ConfigRun, variant_plan: VariantPlan, sent: list[_Sent], out: VariantRun) -> None:
    """:func:`_judge_task` for every sent task, in order (the server is stopped)."""
    for item in sent:
        _judge_task(run, variant_plan, item, out)


def _judge_all_before_interrupt(run: ConfigRun, variant_plan: VariantPlan, sent: list[_Sent], out: VariantRun) -> None:
    """:func:`_judge_all` on the way out of a stopping signal, so the tasks that were
    sent are recorded; a judging error is said and left (the signal goes on), the raw
    completions kept as when judging raises."""
    try:
        _judge_all(run, variant_plan, sent, out)
    except Exception as e:  # noqa: BLE001 - the interrupt is what the run reports; this is said beside it
        run.progress.error(f"{variant_plan.id}: judging the tasks sent before the signal failed: {e}")


def _judge_task(run: ConfigRun, variant_plan: VariantPlan, item: _Sent, out: VariantRun) -> None:
    """One sent task once its server is stopped: judged (:meth:`harness.tasks.base.Task.judge`),
    samples written, scored, its result recorded with acceptance intervals and the
    counter check, and its inline noise rerun judged against it."""
    c, p, vrec, t = run.plan.config, run.progress, out.record, item.task
    run.place.at("client", config=c.name, variant=variant_plan.name, task=t.name)
    tr = task_for(t.spec.kind).judge(item.sent, item.ctx, run.prepared[t.name])
    outcome, samples = tr.outcome, tr.samples
    run.place.at("writing")
    spath = run.folder.samples(c.name, variant_plan.name, t.name)
    write_jsonl(spath, samples)
    run.place.at("scoring")
    sc = score_task(samples, tr.pipelines)
    out.measured.task_record(variant_plan.name, t.name).samples = samples  # the rest is read from the record
    run.place.at("statistics")  # acceptance intervals (bootstrap) and counter checks
    trec = task_result(spath, run.run_dir, outcome, sc,
                       acceptance_intervals(samples, variant_plan.speculative_config is not None))
    if tr.lm_eval is not None:
        trec.lm_eval = LmEvalTaskRecord(**tr.lm_eval)
    metrics_error, spec_metrics = outcome.metrics_error, outcome.spec_metrics
    bad = counter_problem(outcome, variant_plan.speculative_config, f"{variant_plan.id} {t.name}")
    if bad:  # impossible counters: no acceptance gate may read them
        metrics_error, spec_metrics = bad, None
        reject_counters(trec, bad)
    if metrics_error:
        p.error(f"{variant_plan.id} {t.name}: metrics error: {metrics_error}")
    vrec.tasks[t.name] = trec
    run.ctx.checkpoint()  # the task's result is on disk before the next one is judged
    if item.rerun is not None:
        run.place.at("client")  # the noise rerun: judging and its samples file
        trec.rerun = _judge_rerun(run, variant_plan, t, samples, out.reruns, *item.rerun)
        run.ctx.checkpoint()  # its rerun on disk too: a resumed run reuses only what the record holds
    sd = spec_metrics
    p.log(
        f"{variant_plan.id} {t.name}: "
        + "".join(f"{k} {_f(v.accuracy)}, " for k, v in sc.accuracy.items())
        + f"errors {sc.error_count}/{sc.num_requests}"
        + (f", mean acceptance length {_f(sd.mean_acceptance_length)}" if sd else "")
        + f" ({outcome.seconds:.1f}s)"
    )


def _server_failed(e: ServerStartError, session: VariantSession, variant_plan: VariantPlan, todo: list[TaskPlan],
                   argv: list[str], out: VariantRun, run: ConfigRun) -> None:
    """A server that did not start or died mid-task: the variant's error (with the
    doctor's diagnosis of its log when one applies), its server record, and its tasks
    not run."""
    vrec, srv = out.record, session.server
    out.ok = False
    vrec.error = str(e)
    vrec.server = ServerRecord(status=e.status, exit_code=e.exit_code, seconds=e.seconds, pid=srv.pid)
    try:
        why = diagnose_server_log(srv.log_path.read_text(encoding="utf-8", errors="replace"), argv[0])
    except OSError:
        why = None
    if why:
        vrec.error += f"\ndiagnosis: {why}"
    run.progress.error(vrec.error)
    for t in todo:
        if t.name not in vrec.tasks:
            out.measured.task_record(variant_plan.name, t.name).not_run = "server failed"
    if not vrec.tasks:
        out.measured.variant_record(variant_plan.name).not_run = "server failed to start"


def rerun_for_noise(run: ConfigRun, variant_plan: VariantPlan, tasks: list[str]) -> None:
    """Start ``variant_plan``'s server again (:data:`harness.run.serving.RERUN`, on a device set of
    its own when ``run`` has a pool) and rerun ``tasks`` (prepared task names) for noise
    (``noise_runs_when: unexplained``): each task's ``rerun`` entry and
    ``<task>.rerun.jsonl`` as with an inline rerun, the samples in ``run.reruns``; the
    server log is ``<variant>.rerun.log``. A server that does not start leaves the reruns
    missing (the comparisons then say so; their fallback questions stay unexplained) and
    adds to the variant's error. The reruns are sent while the server is up and judged
    after it is stopped (and its devices released)."""
    c, p, m = run.plan.config, run.progress, run.measured
    vrec = run.result.variants[variant_plan.name]
    if not tasks or not vrec.tasks:
        return
    server = VariantServer(run, variant_plan, RERUN)
    p.log(f"{variant_plan.id}: rerun for noise, needed by divergences no reference distribution judges "
          f"(tasks {', '.join(tasks)}); starting the server again (log: {server.log_path})")
    tplans = {t.name: t for t in run.plan.tasks}
    sent: dict[str, tuple[TaskContext, SentTask]] = {}  # sent on the server, judged once it is stopped
    try:
        with server as session:
            for tname in tasks:
                first = m.task(variant_plan.name, tname).samples
                if first is None or tname not in vrec.tasks or not task_for(tplans[tname].spec.kind).reruns_for_noise:
                    continue
                run.place.at("client", task=tname)  # the noise rerun's requests
                sent[tname] = _send(session, run, server.variant, tplans[tname], server.argv, None,
                                    f"{variant_plan.id} {tname} (rerun for noise)")
    except ServerStartError as e:
        p.error(f"{variant_plan.id}: the rerun for noise could not run: {e}")
        vrec.error = (vrec.error + "\n" if vrec.error else "") + f"rerun for noise could not run: {e}"
        return
    for tname, (ctx, st) in sent.items():
        run.place.at(
            "client", config=c.name, variant=variant_plan.name, task=tname
        )  # the rerun's judging and samples file
        vrec.tasks[tname].rerun = _judge_rerun(
            run, variant_plan, tplans[tname], tuple(m.task(variant_plan.name, tname).samples or ()), run.reruns, ctx, st
        )
        run.ctx.checkpoint()


def _judge_rerun(run: ConfigRun, variant_plan: VariantPlan, t: TaskPlan, first: tuple[Sample, ...],
                 reruns: dict[tuple[str, str], tuple[Sample, ...]], ctx: TaskContext, sent: SentTask) -> RerunRecord:
    """Judge a task's second pass (``noise_runs: 2``): the samples go to
    ``<task>.rerun.jsonl`` and ``reruns``; returns the record entry with the output
    match of the rerun against the first pass (the noise)."""
    tr = task_for(t.spec.kind).judge(sent, ctx, run.prepared[t.name])
    spath = run.folder.samples(run.plan.config.name, variant_plan.name, t.name, "rerun")
    write_jsonl(spath, tr.samples)
    reruns[(variant_plan.name, t.name)] = tr.samples
    om = output_match(first, tr.samples)
    run.progress.log(
        f"{variant_plan.id} {t.name}: rerun output match against the first pass {_f(om.output_match_rate)} "
        f"({om.matched}/{om.compared}) = the noise"
    )
    return rerun_record(spath, run.run_dir, tr.outcome, tr.samples, om)


def read_log(path: Path) -> str | None:
    """A server log's text (:meth:`harness.records.run_folder.RunFolder.log`), None when unreadable."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"
