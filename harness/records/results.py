"""Result construction: measurement objects -> the run record's typed entries.

Every record entry the runner fills (a task's result, a noise rerun, a comparison,
a variant that never started, the plugin's report) is built here from the measured
types the engine, task and analysis stages return (:mod:`harness.records.measures`,
stored as they are), so this module imports no later stage.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from harness.config.plan import VariantPlan
from harness.faults.plugin import exercised, read_reports
from harness.records.measures import (
    AnswerAgreementRecord,
    DivergenceReportRecord,
    NoiseRecord,
    OutputMatchRecord,
    PairedRecord,
    TaskScore,
)
from harness.records.run_record import (
    ComparisonResult,
    ConfigResult,
    PluginReport,
    Requested,
    RerunRecord,
    ServerRecord,
    TaskResult,
    TruncatedIds,
    VariantResult,
)
from harness.records.samples import Sample, sha256_file
from harness.records.task_outcome import TaskOutcome

#: Why acceptance intervals are dropped when a task's counters failed the consistency check.
COUNTERS_REJECTED = "not available: the counters failed the consistency check"


class _AccuracyGates(Protocol):
    @property
    def accuracy_pipeline(self) -> str: ...


class ConfigIdentity(Protocol):
    """What a config's record entry takes from the loaded config
    (:class:`harness.config.plan.ConfigPlan`'s ``config``)."""

    @property
    def name(self) -> str: ...
    @property
    def path(self) -> Path: ...
    @property
    def sha256(self) -> str: ...
    @property
    def form(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def gates(self) -> _AccuracyGates: ...


class ComparisonPair(Protocol):
    """A planned comparison's two variants (the config's ``comparisons`` entries)."""

    @property
    def baseline(self) -> str: ...
    @property
    def candidate(self) -> str: ...


def rel(path: Path, base: Path) -> str:
    """``path`` relative to ``base`` when it lies inside it, else ``path`` as given."""
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


def config_result(c: ConfigIdentity, **fields: object) -> ConfigResult:
    """A config's record entry with its identity filled in (name, path, sha256, form,
    model, accuracy pipeline) from the loaded config ``c``; ``fields`` add the rest."""
    return ConfigResult(name=c.name, path=str(c.path), sha256=c.sha256, form=c.form, model=c.model,
                        pipeline=c.gates.accuracy_pipeline, **fields)


def requested(vp: VariantPlan) -> Requested:
    """What the variant asked the engine for (speculative config, async scheduling)."""
    return Requested(speculative_config=vp.speculative_config, async_scheduling=vp.async_scheduling)


def unstarted_variant(vp: VariantPlan, status: str, error: str | None) -> VariantResult:
    """The record of a variant whose server never started: its planned command and
    environment, ``server.status`` ``status`` and ``error`` naming why."""
    return VariantResult(argv=list(vp.argv), env=dict(vp.env), fault=vp.fault, requested=requested(vp),
                         server=ServerRecord(status=status), error=error)


def task_result(spath: Path, run_dir: Path, outcome: TaskOutcome, sc: TaskScore,
                intervals: Mapping[str, object]) -> TaskResult:
    """A task's record entry.

    Args:
        spath: the task's samples file (stored relative to ``run_dir``, with its SHA-256).
        run_dir: the run folder.
        outcome: the engine's :class:`harness.records.task_outcome.TaskOutcome` (seconds,
            speculative-decoding counters, metrics and error).
        sc: the task's score (:func:`harness.analysis.scoring.score_task`).
        intervals: acceptance intervals
            (:func:`harness.analysis.acceptance.acceptance_intervals`).
    """
    trec = TaskResult(
        samples=rel(spath, run_dir),
        seconds=round(outcome.seconds, 2),
        **sc.result_fields(),
        spec_decode=outcome.spec_metrics,
        spec_decode_counters=outcome.spec_counters,
        spec_decode_error=outcome.metrics_error,
        engine_counters=outcome.engine_counters,
        engine_counters_error=outcome.engine_counters_error,
        shape=outcome.shape,
        **intervals,
    )
    trec.samples_sha256 = sha256_file(spath)  # merge verifies the file against it
    return trec


def reject_counters(trec: TaskResult, error: str) -> None:
    """Drop a task's acceptance figures and intervals because its counters are
    impossible (``error`` names them): no acceptance gate may read them."""
    trec.spec_decode = None
    trec.spec_decode_error = error
    trec.mean_acceptance_length_ci = trec.acceptance_rate_ci = None
    trec.per_position_acceptance_ci = None
    trec.acceptance_ci_reason = COUNTERS_REJECTED


def rerun_record(spath: Path, run_dir: Path, outcome: TaskOutcome, samples: Sequence[Sample],
                 om: OutputMatchRecord) -> RerunRecord:
    """A task's noise-rerun entry: its samples file, seconds, errors, acceptance and
    the output match of the rerun against the first pass (``om``)."""
    return RerunRecord(
        samples=rel(spath, run_dir),
        seconds=round(outcome.seconds, 2),
        error_count=sum(1 for x in samples if not x.ok),
        spec_decode=outcome.spec_metrics,
        output_match_vs_first=om,
        samples_sha256=sha256_file(spath),
    )


def comparison_result(comp: ComparisonPair, tname: str, pipeline: str, a: Sequence[Sample], b: Sequence[Sample],
                      om: OutputMatchRecord, pc: PairedRecord | None, nz: NoiseRecord | None,
                      ag: AnswerAgreementRecord | None, dv: DivergenceReportRecord | None, rerun_reason: str,
                      is_truncated: Callable[[Sample], bool]) -> ComparisonResult:
    """One comparison's record entry on one task.

    Args:
        comp: the config's comparison (baseline, candidate).
        tname, pipeline: the task and the answer pipeline its paired test reads.
        a, b: baseline and candidate samples.
        om, pc, nz, ag, dv: output match, paired test, noise, answer agreement and
            divergence report (each None when not measured).
        rerun_reason: why the baseline was (not) rerun for noise.
        is_truncated: ``sample -> bool`` (:func:`harness.analysis.scoring.is_truncated`).
    """
    return ComparisonResult(
        baseline=comp.baseline, candidate=comp.candidate, task=tname, pipeline=pipeline,
        **dict(om), paired=pc, noise=nz,
        answer_agreement=ag,
        truncated=TruncatedIds(baseline=[x.question_id for x in a if is_truncated(x)],
                               candidate=[x.question_id for x in b if is_truncated(x)]),
        divergence=dv,
        rerun_reason=rerun_reason,
    )


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
    rep["dir"] = rel(plugin_dir(run_dir, config, vp.name), run_dir)
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
