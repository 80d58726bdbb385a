"""The runner: executes a plan, config by config and variant by variant, and writes the record.

This is the one module that imports from every stage. Data flows one way::

    plan -> session (per variant) -> samples -> scoring / engine metrics / stats
         -> gates -> results (run.json, samples, logs) -> report (summary.md)

Nothing measured is lost: samples are written as soon as a task ends, and a variant
whose server fails is recorded with its error while the other variants still run.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from harness.engine.info import EngineInfoError, check_effective
from harness.analysis.gates import (
    Measurements, baseline_notes, evaluate_gates, judged_baseline_gates, output_noise_rerun, output_noise_stored,
)
from harness.config.plan import PORT_PLACEHOLDER, ConfigPlan, Plan, VariantPlan, shell_line
from harness.report.progress import Progress
from harness.report.summary import render_markdown
from harness.records.run_record import (
    AnswerAgreementRecord, BaselineInfo, ComparisonResult, ConfigRef, ConfigResult, DatasetRef, EffectivenessRecord, EngineFactsRecord,
    NoiseRecord, OutputMatchRecord, PairedRecord, RerunRecord, Requested, RunRecord, SpecDecodeCountersRecord,
    SpecDecodeRecord, SubsetWarning, TaskResult, TruncatedIds, VariantResult, new_run_id, provenance, utc_now,
    write_run,
)
from harness.records.samples import Sample, write_jsonl
from harness.analysis.scoring import answer_agreement, is_truncated, output_match, score_task
from harness.engine.server import ServerStartError
from harness.engine.session import VariantSession
from harness.analysis.stats import ratio_bootstrap_ci
from harness.report.dry_run import subset_warnings
from harness.tasks import ContaminationError, DataUnavailableError, PreparedTask, prepare_task
from harness.tasks.judging import judge_completions

EXIT_PASSED, EXIT_GATE_FAILED, EXIT_COULD_NOT_RUN = 0, 1, 2


class RunFolderExistsError(FileExistsError):
    """The run folder already holds a record; names the folder."""


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
    """

    results_dir: Path
    data_dir: Path | None = None
    run_id: str | None = None
    argv: list[str] = field(default_factory=lambda: list(sys.argv))
    variants: list[str] | None = None
    progress: Progress = field(default_factory=Progress)
    baseline_dir: Path | None = None
    allow_contamination: bool = False


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
    """Variants run twice because a comparison judges output match against their
    rerun (``noise_runs: 2`` on a comparison whose baseline they are)."""
    return {comp.baseline for comp in cp.config.comparisons if comp.noise_runs > 1}


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


def _model(cls, obj):
    """A record type built from a measurement object's attributes (None stays None)."""
    return None if obj is None else cls.model_validate(obj, from_attributes=True)


def run(plan: Plan, opts: RunOptions) -> tuple[RunRecord, Path]:
    """Execute the plan and write the run folder.

    Returns:
        (the run record, the run folder). ``record.exit_code`` is 0 when every gate
        passed, 1 when a gate failed, 2 when something could not run (a server did not
        start, required data was missing) and no gate failed.

    Raises:
        RunFolderExistsError: the run folder already holds a record.
        KeyboardInterrupt: after the partial record is written (status ``interrupted``).
    """
    run_id = opts.run_id or new_run_id()
    run_dir = Path(opts.results_dir) / run_id
    if (run_dir / "run.json").exists():
        raise RunFolderExistsError(
            f"{run_dir}: a run record is already there; choose another --run-id "
            "(runs are never mixed or overwritten)"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    started = utc_now()
    refs = [ConfigRef(name=cp.name, path=str(cp.config.path), sha256=cp.config.sha256) for cp in plan.configs]
    record = RunRecord(run_id=run_id, provenance=provenance(opts.argv, refs, started))
    record.provenance.allow_contamination = opts.allow_contamination
    could_not_run = False
    try:
        for cp in plan.configs:
            crec, cnr = _run_config(cp, opts, run_dir, record)
            could_not_run |= cnr
            record.configs.append(crec)
            write_run(run_dir, record)  # keep what is measured so far
    except KeyboardInterrupt:
        # servers are already stopped by their context managers; keep the record
        record.status, record.passed, record.exit_code = "interrupted", None, EXIT_COULD_NOT_RUN
        record.provenance.ended_at = utc_now()
        write_run(run_dir, record)
        raise
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
    (run_dir / "summary.md").write_text(render_markdown(record), encoding="utf-8")
    return record, run_dir


def _run_config(cp: ConfigPlan, opts: RunOptions, run_dir: Path, record: RunRecord) -> tuple[ConfigResult, bool]:
    p = opts.progress
    c = cp.config
    could_not_run = False
    crec = ConfigResult(name=c.name, path=str(c.path), sha256=c.sha256, form=c.form, model=c.model,
                        pipeline=c.gates.accuracy_pipeline,
                        tasks={name: spec.model_dump(mode="json", exclude={"gates"}) for name, spec in c.tasks.items()})
    m = Measurements()
    variants = [v for v in cp.variants if opts.variants is None or v.name in opts.variants]
    skipped = [v.name for v in cp.variants if v not in variants]
    for name in skipped:
        m.not_run[(name, None)] = "variant not selected (--variant)"

    # 1. tasks: data first, so a missing data set stops before minutes of server start-up.
    prepared: dict[str, PreparedTask] = {}
    for t in cp.tasks:
        try:
            prepared[t.name] = prepare_task(t.name, t.spec, opts.data_dir, opts.allow_contamination)
            record.provenance.datasets[t.id] = DatasetRef(
                sha256=prepared[t.name].dataset_hash, source=prepared[t.name].source,
                num_requests=len(prepared[t.name].requests), stop=list(prepared[t.name].stop),
                contamination=prepared[t.name].contamination,
            )
            if prepared[t.name].contamination:
                p.warn(f"{c.name}: task {t.name}: contaminated data run anyway (--allow-contamination): "
                       f"{prepared[t.name].contamination}")
        except ContaminationError as e:
            could_not_run |= t.spec.required
            p.error(f"{c.name}: {e}")
            for v in cp.variants:
                m.not_run[(v.name, t.name)] = ("contaminated data refused (test questions among the few-shot "
                                               "examples or the train split)")
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
    for vp in variants:
        vrec, ok = _run_variant(cp, vp, model_ref, prepared, opts, run_dir, m, reruns)
        crec.variants[vp.name] = vrec
        could_not_run |= not ok
    # 4. comparisons (the record's paired test reads each task's own pipeline)
    for comp in c.comparisons:
        for tname in c.tasks:
            a = m.samples.get((comp.baseline, tname))
            b = m.samples.get((comp.candidate, tname))
            if a is None or b is None:
                continue
            pipeline = c.gates_for(tname).accuracy_pipeline
            om = output_match(a, b)
            m.matches[(comp.baseline, comp.candidate, tname)] = om
            ag = answer_agreement(a, b, pipeline)
            m.answers[(comp.baseline, comp.candidate, tname)] = ag
            pc = m.paired(comp.baseline, comp.candidate, tname, pipeline)
            nz = None
            if comp.noise_runs > 1 and (comp.baseline, tname) in reruns:
                nz = output_noise_rerun(a, reruns[(comp.baseline, tname)], b)
            elif comp.noise_mismatch_rate is not None:
                nz = output_noise_stored(om, comp.noise_mismatch_rate)
            if nz is not None:
                m.noise[(comp.baseline, comp.candidate, tname)] = nz
            crec.comparisons.append(ComparisonResult(
                baseline=comp.baseline, candidate=comp.candidate, task=tname, pipeline=pipeline,
                **OutputMatchRecord.model_validate(om, from_attributes=True).model_dump(),
                paired=_model(PairedRecord, pc), noise=_model(NoiseRecord, nz),
                answer_agreement=_model(AnswerAgreementRecord, ag),
                truncated=TruncatedIds(baseline=[x.question_id for x in a if is_truncated(x)],
                                       candidate=[x.question_id for x in b if is_truncated(x)]),
            ))
    # 5. gates
    crec.gates = evaluate_gates(cp.gates, m)
    # 6. gates against the stored baseline (last known good), when there is one
    if opts.baseline_dir is not None:
        crec.baseline = _load_baseline(opts.baseline_dir, c.name, m)
        crec.gates += judged_baseline_gates(cp.baseline_gates, m)
        if crec.baseline.found and m.baseline is not None:
            crec.baseline.notes = baseline_notes(cp.baseline_gates, m)
    return crec, could_not_run


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
) -> tuple[VariantResult, bool]:
    p = opts.progress
    c = cp.config
    log_path = run_dir / "logs" / c.name / f"{vp.name}.log"
    argv = [model_ref if a == c.model else a for a in vp.argv]
    vrec = VariantResult(
        argv=argv, env=dict(vp.env), fault=vp.fault, log=_rel(log_path, run_dir),
        requested=Requested(speculative_config=vp.speculative_config, async_scheduling=vp.async_scheduling),
    )
    todo = [t for t in cp.tasks if t.name in prepared]
    if not todo:
        vrec.error = "no task of this config can run"
        m.not_run[(vp.name, None)] = vrec.error
        return vrec, True
    p.log(f"{vp.id}: starting the vLLM server (log: {log_path})")
    p.log(f"  $ {shell_line(argv, vp.env)}")
    p.log(f"  ({PORT_PLACEHOLDER} is the free port chosen at start-up; the server log's first lines hold the exact command)")
    session = VariantSession(
        vp.id, argv, vp.env, log_path,
        startup_timeout=c.startup_max_wait_seconds,
        request_timeout=c.request_timeout_seconds,
        max_concurrency=c.max_concurrency,
        speculative=vp.speculative_config is not None,
        on_wait=p.waiting(f"{vp.id}: waiting for /health"),
    )
    try:
        with session:
            vrec.startup_seconds = round(session.server.startup_seconds or 0, 1)
            p.log(f"{vp.id}: server ready in {vrec.startup_seconds}s on {session.server.base_url}")
            try:
                facts = session.engine_facts()
                vrec.engine = _model(EngineFactsRecord, facts)
                eff = check_effective(facts, vp.speculative_config, vp.async_scheduling, vp.expected_effective)
                vrec.effective = _model(EffectivenessRecord, eff)
                m.effectiveness[vp.name] = eff
                if not eff.effective:
                    p.warn(f"{vp.id}: not effective as asked: {eff.mismatches}"
                           + (" (declared expected on this platform)" if eff.expected_on_platform else ""))
            except EngineInfoError as e:
                vrec.engine_error = str(e)
                p.error(str(e))
            for t in todo:
                pt = prepared[t.name]
                bar = p.bar(f"{vp.id} {t.name}", len(pt.requests))
                outcome = session.run_task(
                    pt.requests,
                    max_tokens=t.spec.max_tokens, temperature=t.spec.temperature, seed=t.spec.seed,
                    stop=pt.stop, on_done=lambda x: bar.advance(x.ok),
                    per_request=c.per_request_metrics,
                )
                bar.close()
                samples = judge_completions(c.name, vp.name, t.name, pt.requests, outcome.completions)
                spath = run_dir / "samples" / c.name / vp.name / f"{t.name}.jsonl"
                write_jsonl(spath, samples)
                sc = score_task(samples)
                m.scores[(vp.name, t.name)] = sc
                m.samples[(vp.name, t.name)] = samples
                trec = TaskResult(
                    samples=_rel(spath, run_dir),
                    seconds=round(outcome.seconds, 2),
                    num_requests=sc.num_requests,
                    error_count=sc.error_count,
                    error_rate=sc.error_rate,
                    accuracy={k: v.accuracy for k, v in sc.accuracy.items()},
                    accuracy_ci={k: v.accuracy_ci for k, v in sc.accuracy.items()},
                    correct={k: v.correct for k, v in sc.accuracy.items()},
                    scored={k: v.scored for k, v in sc.accuracy.items()},
                    invalid_rate={k: v.invalid_rate for k, v in sc.accuracy.items()},
                    finish_reasons=sc.finish_reasons,
                    truncated=sc.truncated,
                    truncated_rate=sc.truncated_rate,
                    truncated_ids=list(sc.truncated_ids),
                    stop_reasons=sc.stop_reasons,
                    spec_decode=_model(SpecDecodeRecord, outcome.spec_metrics),
                    spec_decode_counters=_model(SpecDecodeCountersRecord, outcome.spec_counters),
                    spec_decode_error=outcome.metrics_error,
                    **acceptance_intervals(samples, vp.speculative_config is not None),
                )
                if outcome.spec_metrics is not None:
                    m.spec[(vp.name, t.name)] = outcome.spec_metrics
                if outcome.metrics_error:
                    m.spec_errors[(vp.name, t.name)] = outcome.metrics_error
                    p.warn(f"{vp.id} {t.name}: {outcome.metrics_error}")
                vrec.tasks[t.name] = trec
                if reruns is not None and vp.name in noise_variants(cp) and session.server.alive():
                    trec.rerun = _rerun_task(
                        session, c.name, vp, t, pt, run_dir, samples, reruns, p, c.per_request_metrics)
                acc = sc.accuracy
                sd = outcome.spec_metrics
                p.log(
                    f"{vp.id} {t.name}: strict-match {_f(acc['strict-match'].accuracy)}, "
                    f"flexible-extract {_f(acc['flexible-extract'].accuracy)}, errors {sc.error_count}/{sc.num_requests}"
                    + (f", mean acceptance length {_f(sd.mean_acceptance_length)}" if sd else "")
                    + f" ({outcome.seconds:.1f}s)"
                )
                if not session.server.alive():
                    raise ServerStartError(
                        f"{vp.id}: the vLLM server died during task {t.name}; log: {log_path}"
                    )
        return vrec, True
    except ServerStartError as e:
        vrec.error = str(e)
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
        per_request=per_request,
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
        spec_decode=_model(SpecDecodeRecord, out.spec_metrics),
        output_match_vs_first=_model(OutputMatchRecord, om),
    )


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def terminate_as_interrupt() -> None:
    """Turn SIGTERM (CI timeouts, ``kill``) into KeyboardInterrupt so every server's
    context manager tears its process group down and the partial record is kept."""
    import signal

    def handler(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)
