"""``--resume RUN_DIR``: whether an earlier attempt in a run folder may be continued, which
of its variants are reused, and loading them.

The user repeats the command with ``--resume RUN_DIR``; the earlier attempt's record
(``run.json``, status ``running`` after a SIGKILL, ``interrupted`` or ``error``) says
what it ran. :func:`decide` refuses (:class:`ResumeRefused`, exit code 2) when anything
that changes what a variant measures differs, naming the key: the configs (names and
SHA-256), ``--shard``, ``--allow-contamination``, the engine build (package, version,
commit, interpreter), the model path, each task's data (SHA-256, number of requests,
stop strings), or the server command of a variant it would reuse. The command-line
options that select what runs are compared by the CLI (:func:`differing_options`).

A variant is reused when its results are complete: its server was ready and no error
was recorded, its engine facts were read, every task of the config was measured with
its samples file on disk and of the recorded SHA-256 (its noise rerun too when the
config reruns it inline), and the samples score to the recorded counts. Its samples and
measurements are then loaded (:func:`reuse_finished`) and its server is not started;
every comparison, noise rerun and gate is computed over reused and new variants as in a
fresh run. Every other variant runs again; what it left before is moved, with the
earlier ``run.json``, to ``attempts/<n>/`` (:func:`set_aside`), so nothing is lost and
no earlier report is merged into a new one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.analysis.comparison import noise_variants
from harness.analysis.scoring import score_task
from harness.config.plan import ConfigPlan, Plan, VariantPlan
from harness.config.schema import VLLM_PIPELINE
from harness.engine.builds import identity_or_none
from harness.engine.info import model_runner_fact
from harness.models.resolve import resolve_model
from harness.records.files import UnsafeName, check_record_name, check_relative, no_symlink_below
from harness.records.provenance import provenance, server_environment, utc_now
from harness.records.results import plugin_report
from harness.records.run_folder import RunFolder
from harness.records.run_record import (
    ConfigResult,
    ResumedRecord,
    RunRecord,
    RunRecordError,
    TaskResult,
    VariantResult,
    load_run,
)
from harness.records.samples import Sample, sha256_file
from harness.report.progress import Progress
from harness.run.context import ConfigRun, RunOptions
from harness.run.variant_steps import read_log
from harness.tasks import ContaminationError, DataUnavailableError, ShortDataError, prepare_task, task_for
from harness.tasks.answers import GSM8K_PIPELINES as PIPELINES

__all__ = ["ResumeRefused", "Decision", "RESUMABLE", "decide", "differing_options", "set_aside",
           "resumed_record", "reuse_finished", "in_plan_order"]

#: Statuses of an earlier attempt that may be resumed (a finished run's verdict stands).
RESUMABLE = ("running", "interrupted", "error")
#: Environment a server gets from the device pool, not from the config: may differ.
_POOL_ENV = ("CUDA_VISIBLE_DEVICES",)


class ResumeRefused(Exception):
    """The earlier attempt cannot be resumed; the message names the folder and every key
    that differs (exit code 2, nothing started)."""


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` found.

    Attributes:
        earlier: the earlier attempt's record.
        reusable: ``(config, variant)`` -> its earlier record (complete and matching).
        reasons: ``<config>/<variant>`` -> why a selected variant runs again.
    """

    earlier: RunRecord
    reusable: dict[tuple[str, str], VariantResult]
    reasons: dict[str, str]


def finished_run(plan: Plan, opts: RunOptions, run_dir: Path, progress: Progress) -> RunRecord:
    """A finished attempt in ``run_dir`` that measured what ``plan`` and ``opts`` would
    (``evalrun calibrate --resume`` keeps its finished repeats instead of running them again).

    Returns:
        the earlier record (status ``completed``).

    Raises:
        ResumeRefused: no readable record, a run that did not finish (resume it instead),
            a merged run, unsafe names, or any difference :func:`decide` refuses on
            (configs, shard, contamination, build, evalrun revision, server environment,
            model, data); the message names each.
    """
    try:
        earlier = load_run(run_dir)
    except RunRecordError as e:
        raise ResumeRefused(f"{run_dir}: cannot reuse: {e}") from None
    if earlier.status != "completed" or earlier.merged_from:
        raise ResumeRefused(f"{run_dir}: cannot reuse: status {earlier.status}"
                            f"{' (a merged run)' if earlier.merged_from else ''}; only a finished run is reused")
    _check_names(earlier, run_dir)
    differ = _run_differences(plan, opts, earlier, progress)
    if differ:
        raise ResumeRefused(f"{run_dir}: cannot reuse, what this run would measure differs from it:\n  "
                            + "\n  ".join(differ))
    return earlier


def differing_options(then: Mapping[str, object], now: Mapping[str, object]) -> list[str]:
    """The options (``{option: value}`` as the CLI parsed them) whose values differ
    between the earlier attempt's command line and this one, one phrase each."""
    return [f"{k}: the earlier run had {then.get(k)!r}, this one {now.get(k)!r}"
            for k in sorted(set(then) | set(now)) if then.get(k) != now.get(k)]


def decide(plan: Plan, opts: RunOptions, run_dir: Path, progress: Progress) -> Decision:
    """Whether the earlier attempt in ``run_dir`` may be resumed with ``plan`` and ``opts``
    (module docstring), and which selected variants are reused; ``progress`` says how
    each config's model is resolved again.

    Raises:
        ResumeRefused: no readable record, a finished or merged run, or a difference
            (configs, shard, contamination, build, model, data, a reused variant's
            server command); the message names each.
    """
    try:
        earlier = load_run(run_dir)
    except RunRecordError as e:
        raise ResumeRefused(f"{run_dir}: cannot resume: {e}") from None
    if earlier.status not in RESUMABLE:
        raise ResumeRefused(f"{run_dir}: cannot resume: the run finished ({earlier.outcome.upper()}, status "
                            f"{earlier.status}); its verdict stands: start a new run with another --run-id")
    if earlier.merged_from:
        raise ResumeRefused(f"{run_dir}: cannot resume a merged run (evalrun merge): resume its shards instead")
    _check_names(earlier, run_dir)
    differ = _run_differences(plan, opts, earlier, progress)
    reusable: dict[tuple[str, str], VariantResult] = {}
    reasons: dict[str, str] = {}
    for config_plan in plan.configs:
        crec = earlier.config(config_plan.name)
        for variant_plan in config_plan.variants:
            if opts.variants is not None and variant_plan.name not in opts.variants:
                continue
            vrec = crec.variants.get(variant_plan.name) if crec is not None else None
            why = _incomplete(config_plan, variant_plan, vrec, run_dir, earlier)
            if why is None and crec is not None and vrec is not None:
                differ += _command_differences(config_plan, variant_plan, vrec, crec)
                reusable[(config_plan.name, variant_plan.name)] = vrec
            else:
                reasons[variant_plan.id] = why or "not recorded"
    if differ:
        raise ResumeRefused(f"{run_dir}: cannot resume, what this run would measure differs from the earlier "
                            "attempt:\n  " + "\n  ".join(differ))
    return Decision(earlier, reusable, reasons)


def _check_names(earlier: RunRecord, run_dir: Path) -> None:
    """Every config and variant name of the earlier record as names are checked at
    creation (they become the folders :func:`set_aside` moves).

    Raises:
        ResumeRefused: naming the record, the field and the name.
    """
    where = str(run_dir / "run.json")
    try:
        for c in earlier.configs:
            check_record_name(c.name, where, "configs[].name")
            for v in c.variants:
                check_record_name(v, where, f"configs.{c.name}.variants")
    except UnsafeName as e:
        raise ResumeRefused(f"{run_dir}: cannot resume: {e}") from None


def _run_differences(plan: Plan, opts: RunOptions, earlier: RunRecord, progress: Progress) -> list[str]:
    """What differs for the whole run: configs, shard, contamination, build, model, data."""
    pv = earlier.provenance
    out = []
    then = {c.name: c.sha256 for c in pv.configs}
    now = {config_plan.name: config_plan.config.sha256 for config_plan in plan.configs}
    if set(then) != set(now):
        out.append(f"configs: the earlier run had {sorted(then)}, this one {sorted(now)}")
    for config_plan in plan.configs:
        if config_plan.name in then and then[config_plan.name] != now[config_plan.name]:
            out.append(
                f"config {config_plan.name} ({config_plan.config.path}): sha256 {then[config_plan.name][:12]} -> "
                f"{now[config_plan.name][:12]} (the file was edited)"
            )
    shard = [s.model_dump(exclude={"weights"}) if s else None for s in (earlier.shard, opts.shard)]
    if shard[0] != shard[1]:
        out.append(f"shard: the earlier run was {shard[0]}, this one {shard[1]}")
    if pv.allow_contamination != opts.allow_contamination:
        out.append(f"allow_contamination: {pv.allow_contamination} -> {opts.allow_contamination}")
    out += _build_difference(plan, earlier)
    out += _evalrun_difference(earlier)
    out += _env_difference(earlier)
    out += _model_differences(plan, earlier, progress)
    return out + _data_differences(plan, opts, earlier)


def _build_difference(plan: Plan, earlier: RunRecord) -> list[str]:
    """The engine build of ``plan.python`` against the earlier attempt's (fails closed:
    a build that cannot be read on either side differs)."""
    then, now = earlier.provenance.build, identity_or_none(plan.python)
    if then is None or now is None:
        return [f"build: cannot compare the engine builds (earlier {then.describe() if then else 'not recorded'}, "
                f"this run {now.describe() if now else f'unreadable from {plan.python}'})"]
    keys = ("python", "package", "version", "commit")
    a, b = then.model_dump(include=set(keys)), now.model_dump(include=set(keys))
    return [f"build.{k}: {a[k]!r} -> {b[k]!r}" for k in keys if a[k] != b[k]]


def _evalrun_difference(earlier: RunRecord) -> list[str]:
    """evalrun's version and git revision against the earlier attempt's (an attempt by
    another evalrun judged, scored or sent differently; a revision unknown on either
    side is compared as it is)."""
    now = provenance([], [], utc_now())
    then = earlier.provenance
    return [f"evalrun {k}: {getattr(then, k)!r} -> {getattr(now, k)!r}"
            for k in ("evalrun_version", "git_revision") if getattr(then, k) != getattr(now, k)]


def _env_difference(earlier: RunRecord) -> list[str]:
    """The inherited environment that shapes every server (every ``VLLM_*`` and evalrun's
    own server settings, :func:`harness.records.provenance.server_environment`) against
    the earlier attempt's; fails closed on a record written before it was kept."""
    then, now = earlier.provenance.server_env, server_environment()
    if then is None:
        return ["environment: the earlier attempt did not record the inherited VLLM_* / EVALRUN_* variables its "
                "servers ran with (an older evalrun): cannot tell they are the same"]
    return [f"environment {k}: {'set' if k in then else 'unset'} -> {'set' if k in now else 'unset'}"
            + (" (another value)" if k in then and k in now else "")
            for k in sorted(set(then) | set(now)) if then.get(k) != now.get(k)]


def _model_differences(plan: Plan, earlier: RunRecord, progress: Progress) -> list[str]:
    """Each config's resolved model path against the earlier attempt's."""
    out = []
    for config_plan in plan.configs:
        crec = earlier.config(config_plan.name)
        if crec is None or crec.model_path is None:
            continue
        try:
            now = resolve_model(config_plan.config.model, progress)
        except Exception as e:  # noqa: BLE001 - said as the difference; the run would fail the same way
            now = f"not available: {type(e).__name__}: {e}"
        if now != crec.model_path:
            out.append(
                f"config {config_plan.name}: model {config_plan.config.model}: path {crec.model_path!r} -> {now!r}"
            )
    return out


def _data_differences(plan: Plan, opts: RunOptions, earlier: RunRecord) -> list[str]:
    """Each task's data (prepared now, :func:`harness.tasks.prepare_task`) against the
    dataset the earlier attempt recorded (``provenance.datasets``)."""
    out = []
    for config_plan in plan.configs:
        for t in config_plan.tasks:
            then = earlier.provenance.datasets.get(t.id)
            if then is None:  # never prepared: no variant of it can be reused for this task
                continue
            try:
                pt = prepare_task(t.name, t.spec, opts.data_dir, opts.allow_contamination,
                                  base_dir=Path(config_plan.config.path).parent)
            except (ContaminationError, ShortDataError, DataUnavailableError) as e:
                out.append(f"datasets[{t.id}]: prepared before, cannot be prepared now: {e}")
                continue
            now = {"sha256": pt.dataset_hash, "num_requests": len(pt.requests), "stop": list(pt.stop)}
            out += [f"datasets[{t.id}].{k}: {getattr(then, k)!r} -> {v!r}" for k, v in now.items()
                    if getattr(then, k) != v]
    return out


def _incomplete(config_plan: ConfigPlan, variant_plan: VariantPlan, vrec: VariantResult | None, run_dir: Path,
                earlier: RunRecord) -> str | None:
    """Why the earlier attempt's record of ``variant_plan`` is not complete (None: it is)."""
    if vrec is None:
        return "not run in the earlier attempt"
    if vrec.server.status != "ready" or vrec.error:
        return f"server {vrec.server.status}" + (f": {vrec.error.splitlines()[0]}" if vrec.error else "")
    if vrec.engine is None:  # unread or unreadable: what ran cannot be compared, so it runs again
        return "its engine facts were not read" + (f" ({vrec.engine_error.splitlines()[0]})" if vrec.engine_error
                                                     else "")
    inline = variant_plan.name in noise_variants(config_plan)
    for t in config_plan.tasks:
        trec = vrec.tasks.get(t.name)
        if trec is None or t.id not in earlier.provenance.datasets:
            return f"task {t.name} not measured"
        why = _samples_problem(run_dir, trec.samples, trec.samples_sha256)
        if why is None:
            try:
                why = _score_problem(trec, RunFolder(run_dir).read(trec.samples))
            except (OSError, ValueError) as e:  # matching hash, unreadable lines: runs again, named
                why = f"samples file {trec.samples}: cannot be read: {e}"
        if why is None and trec.rerun is not None:
            why = _samples_problem(run_dir, trec.rerun.samples, trec.rerun.samples_sha256)
        elif why is None and inline and task_for(t.spec.kind).reruns_for_noise:
            why = "its noise rerun is not recorded"
        if why is not None:
            return f"task {t.name}: {why}"
    return None


def _samples_problem(run_dir: Path, rel: str, sha256: str | None) -> str | None:
    """Why a recorded samples file cannot be reused (missing, unreadable, other bytes)."""
    try:
        got = sha256_file(run_dir / check_relative(rel, str(run_dir / "run.json"), "samples path"))
    except UnsafeName as e:
        return str(e)
    except OSError as e:
        return f"samples file {rel}: {e.strerror or e}"
    return None if sha256 is not None and got == sha256 else f"samples file {rel}: its SHA-256 is not the recorded one"


def _pipelines(trec: TaskResult) -> Sequence[str]:
    """The answer pipelines the task was scored under (an lm-eval task's own; vLLM's rule
    first for a task with ``vllm_rules``)."""
    if trec.lm_eval is not None:
        return trec.lm_eval.pipelines
    return (VLLM_PIPELINE, *PIPELINES) if VLLM_PIPELINE in trec.correct else PIPELINES


def _score_problem(trec: TaskResult, samples: Sequence[Sample]) -> str | None:
    """Whether the samples score to the counts recorded for them (None: they do)."""
    sc = score_task(samples, _pipelines(trec))
    got = (sc.num_requests, sc.error_count, {p: v.correct for p, v in sc.accuracy.items()})
    want = (trec.num_requests, trec.error_count, dict(trec.correct))
    return None if got == want else f"its samples score {got}, the record says {want}"


def _command_differences(
    config_plan: ConfigPlan, variant_plan: VariantPlan, vrec: VariantResult, crec: ConfigResult
) -> list[str]:
    """How the server command ``variant_plan`` would run differs from the one its reused record ran."""
    want = [crec.model_path if a == config_plan.config.model else a for a in variant_plan.argv]
    out = []
    if want != vrec.argv:
        i = next((i for i, (a, b) in enumerate(zip(want, vrec.argv)) if a != b), min(len(want), len(vrec.argv)))
        a = vrec.argv[i] if i < len(vrec.argv) else None
        b = want[i] if i < len(want) else None
        out.append(f"variant {variant_plan.id}: server command, argument {i}: {a!r} -> {b!r}")
    env_then = {k: v for k, v in vrec.env.items() if k not in _POOL_ENV}
    env_now = {k: v for k, v in variant_plan.env.items() if k not in _POOL_ENV}
    out += [f"variant {variant_plan.id}: env {k}: {env_then.get(k)!r} -> {env_now.get(k)!r}"
            for k in sorted(set(env_then) | set(env_now)) if env_then.get(k) != env_now.get(k)]
    if vrec.fault != variant_plan.fault:
        out.append(f"variant {variant_plan.id}: fault {vrec.fault!r} -> {variant_plan.fault!r}")
    return out + _variant_build_difference(variant_plan, vrec)


def _variant_build_difference(variant_plan: VariantPlan, vrec: VariantResult) -> list[str]:
    """The engine build a variant names (``build:``) against the one its reused record ran
    on (a venv upgraded in place keeps its interpreter path, so the command alone cannot
    tell); variants on the run's build are covered by :func:`_build_difference`. Fails
    closed: a build that cannot be read on either side differs."""
    if variant_plan.build is None and vrec.build_spec is None:
        return []
    if variant_plan.build != vrec.build_spec:
        return [f"variant {variant_plan.id}: build {vrec.build_spec!r} -> {variant_plan.build!r}"]
    then, now = vrec.build, identity_or_none(variant_plan.python)
    if then is None or now is None:
        return [f"variant {variant_plan.id}: cannot compare its engine builds (earlier "
                f"{then.describe() if then else 'not recorded'}, this run "
                f"{now.describe() if now else f'unreadable from {variant_plan.python}'})"]
    keys = ("package", "version", "commit")
    a, b = then.model_dump(include=set(keys)), now.model_dump(include=set(keys))
    return [f"variant {variant_plan.id}: build.{k}: {a[k]!r} -> {b[k]!r}" for k in keys if a[k] != b[k]]


def set_aside(run_dir: Path, decision: Decision, plan: Plan) -> str:
    """Move the earlier attempt's ``run.json`` and reports, and the files of every variant
    that runs again (samples, plugin reports, server logs), to ``attempts/<n>/`` (same
    relative paths; ``n`` counts the attempts). PID files stay where they are, so the
    run's check for servers left running still finds them. Returns the kept record's
    path relative to ``run_dir``. Names come from the plan and from the record
    :func:`decide` checked; nothing is moved through a symlink.

    Raises:
        OSError: a path to move is or passes a symlink (named), or a move fails.
    """
    n = RunFolder(run_dir).next_attempt()
    dest = RunFolder(run_dir).attempt(n)
    moves = [Path(p) for p in ("run.json", "summary.md", "summary.html", "junit.xml")]
    earlier = {(c.name, v) for c in decision.earlier.configs for v in c.variants}
    for c, v in sorted(
        earlier
        | {
            (config_plan.name, variant_plan.name)
            for config_plan in plan.configs
            for variant_plan in config_plan.variants
        }
    ):
        if (c, v) not in decision.reusable:
            moves += [Path("samples", c, v), Path("plugin", c, v), Path("plugin", c, f"{v}.rerun"),
                      Path("logs", c, f"{v}.log"), Path("logs", c, f"{v}.rerun.log")]
    for rel in moves:
        src, to = run_dir / rel, dest / rel
        no_symlink_below(run_dir, src)  # never moves a file in or out through a link (UnreadableFile: OSError)
        no_symlink_below(run_dir, to)
        if os.path.lexists(src):
            to.parent.mkdir(parents=True, exist_ok=True)
            no_symlink_below(run_dir, to.parent)
            os.replace(src, to)
    return str(Path("attempts", str(n), "run.json"))


def resumed_record(decision: Decision, kept: str) -> ResumedRecord:
    """The record's ``resumed`` entry at the start of the resumed run; the reused and rerun
    variants are added as each config decides (:func:`reuse_finished`)."""
    e = decision.earlier
    return ResumedRecord(from_run_id=e.run_id, from_status=e.status, from_started_at=e.provenance.started_at,
                         at=utc_now(), earlier_record=kept, rerun_reasons=dict(decision.reasons))


def reuse_finished(run: ConfigRun, variants: list[VariantPlan]) -> list[VariantPlan]:
    """Load every variant of ``variants`` the resume decision reuses (its record, samples,
    scores, acceptance, noise reruns, engine facts, plugin report and model runner, as
    :func:`harness.run.variant_steps.run_variant` would have left them) into ``run``; the
    variants still to run, in order. Without ``--resume``: ``variants`` unchanged.

    Raises:
        OSError, ValueError: a samples file :func:`decide` checked cannot be read now
            (the run then ends with status ``error``).
    """
    resumed = run.record.resumed
    if run.opts.resume is None or resumed is None:
        return variants
    todo = []
    for variant_plan in variants:
        vrec = run.opts.reusable.get((run.plan.name, variant_plan.name))
        if vrec is None:
            todo.append(variant_plan)
            resumed.variants_rerun.append(variant_plan.id)
            continue
        _load(run, variant_plan, vrec)
        resumed.variants_reused.append(variant_plan.id)
        run.progress.log(
            f"{variant_plan.id}: reused from the earlier attempt (complete and matching): no server started"
        )
    return todo


def _load(run: ConfigRun, variant_plan: VariantPlan, vrec: VariantResult) -> None:
    """One reused variant's record and measurements into ``run`` (:func:`reuse_finished`)."""
    c, m = run.plan.config, run.measured
    for tname, trec in vrec.tasks.items():
        samples = tuple(run.folder.read(trec.samples))
        m.task_record(variant_plan.name, tname).samples = samples  # scores, acceptance, shape: read from the record
        if trec.rerun is not None:
            run.reruns[(variant_plan.name, tname)] = tuple(run.folder.read(trec.rerun.samples))
    vrec.plugin = plugin_report(run.run_dir, c.name, variant_plan)
    log = read_log(run.folder.log(c.name, variant_plan.name))
    vrec.model_runner = model_runner_fact(vrec.plugin.model_runners, log)
    run.result.variants[variant_plan.name] = vrec


def in_plan_order(run: ConfigRun) -> None:
    """The config's variant records in plan order after a resume (reused ones were loaded
    first); a new run's order is left as it is."""
    if run.opts.resume is None:
        return
    order = {v.name: i for i, v in enumerate(run.plan.variants)}
    run.result.variants = dict(sorted(run.result.variants.items(), key=lambda kv: order.get(kv[0], len(order))))
