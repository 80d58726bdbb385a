"""Result construction: measurement objects -> the run record's typed entries.

Every record entry the runner fills (a task's result, a noise rerun, a comparison,
a variant that never started, the plugin's report) is built here from the measured
types the engine, task and analysis stages return (:mod:`harness.records.measures`,
stored as they are), so this module imports no later stage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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
    @property
    def false_alarm_budget(self) -> float | None: ...


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


def config_result(config: ConfigIdentity, **fields: object) -> ConfigResult:
    """A config's record entry with its identity filled in (name, path, sha256, form,
    model, accuracy pipeline) from the loaded ``config``; ``fields`` add the rest."""
    return ConfigResult(name=config.name, path=str(config.path), sha256=config.sha256, form=config.form,
                        model=config.model, pipeline=config.gates.accuracy_pipeline,
                        false_alarm_budget=config.false_alarm_budget, **fields)


def requested(variant: VariantPlan) -> Requested:
    """What the variant asked the engine for (speculative config, async scheduling)."""
    return Requested(speculative_config=variant.speculative_config, async_scheduling=variant.async_scheduling)


def unstarted_variant(variant: VariantPlan, status: str, error: str | None) -> VariantResult:
    """The record of a variant whose server never started: its planned command and
    environment, ``server.status`` ``status`` and ``error`` naming why."""
    return VariantResult(argv=list(variant.argv), env=dict(variant.env), fault=variant.fault,
                         requested=requested(variant), server=ServerRecord(status=status), error=error)


def task_result(spath: Path, run_dir: Path, outcome: TaskOutcome, score: TaskScore,
                intervals: Mapping[str, object]) -> TaskResult:
    """A task's record entry.

    Args:
        spath: the task's samples file (stored relative to ``run_dir``, with its SHA-256).
        run_dir: the run folder.
        outcome: the engine's :class:`harness.records.task_outcome.TaskOutcome` (seconds,
            speculative-decoding counters, metrics and error).
        score: the task's score (:func:`harness.analysis.scoring.score_task`), stored
            as the record's per-metric maps (:meth:`TaskScore.result_fields`).
        intervals: acceptance intervals
            (:func:`harness.analysis.acceptance.acceptance_intervals`).
    """
    trec = TaskResult(
        samples=rel(spath, run_dir),
        seconds=round(outcome.seconds, 2),
        **score.result_fields(),
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
                 output_match: OutputMatchRecord) -> RerunRecord:
    """A task's noise-rerun entry: its samples file, seconds, errors, acceptance and
    the output match of the rerun against the first pass (``output_match``)."""
    return RerunRecord(
        samples=rel(spath, run_dir),
        seconds=round(outcome.seconds, 2),
        error_count=sum(1 for x in samples if not x.ok),
        spec_decode=outcome.spec_metrics,
        output_match_vs_first=output_match,
        samples_sha256=sha256_file(spath),
    )


@dataclass(frozen=True)
class ComparisonMeasured:
    """What one comparison measured on one task (:func:`harness.analysis.comparison.compare`),
    the values of its record entry; each None when not measured.

    Attributes:
        output_match: greedy output match of the candidate against the baseline.
        paired: the paired accuracy test under the comparison's pipeline.
        noise: the candidate's mismatches against a noise reference.
        answer_agreement: same extracted answer, beside output match.
        divergence: the divergences judged by a reference's distribution.
        truncated: question ids cut by ``max_tokens`` on each side.
    """

    output_match: OutputMatchRecord
    paired: PairedRecord | None = None
    noise: NoiseRecord | None = None
    answer_agreement: AnswerAgreementRecord | None = None
    divergence: DivergenceReportRecord | None = None
    truncated: TruncatedIds | None = None


def comparison_result(pair: ComparisonPair, task: str, pipeline: str, measured: ComparisonMeasured,
                      rerun_reason: str) -> ComparisonResult:
    """One comparison's record entry on one task: the pair's variants, the task, the
    answer pipeline its paired test reads, what it measured (:class:`ComparisonMeasured`)
    and why the baseline was (not) rerun for noise."""
    return ComparisonResult(
        baseline=pair.baseline, candidate=pair.candidate, task=task, pipeline=pipeline,
        **dict(measured.output_match), paired=measured.paired, noise=measured.noise,
        answer_agreement=measured.answer_agreement, truncated=measured.truncated,
        divergence=measured.divergence, rerun_reason=rerun_reason,
    )


def plugin_dir(run_dir: Path, config: str, variant: str) -> Path:
    """``<run>/plugin/<config>/<variant>/``: where evalrun's vLLM plugin writes one
    ``plugin-<pid>.json`` per server process (``EVALRUN_PLUGIN_REPORT_DIR``)."""
    return run_dir / "plugin" / config / variant


def plugin_report(run_dir: Path, config: str, variant: VariantPlan) -> PluginReport:
    """The record's ``variants[v].plugin``: the plugin's counters merged over the
    server's processes (:func:`harness.faults.plugin.read_reports`), plus
    ``async_scheduling_via``: how async scheduling was obtained when it was asked
    for (``"engine"``, or ``"evalrun plugin"`` when the plugin kept it on the CPU
    platform, which forces it off) and, for a fault, ``exercised`` / ``not_exercised_reason``
    (:func:`harness.faults.plugin.exercised`)."""
    rep = read_reports(plugin_dir(run_dir, config, variant.name))
    rep["dir"] = rel(plugin_dir(run_dir, config, variant.name), run_dir)
    if variant.async_scheduling is True:
        kept = rep["counts"].get("cpu_async.kept", 0)
        rep["async_scheduling_via"] = (
            "evalrun plugin (kept after CpuPlatform.check_and_update_config forced it off)" if kept else "engine"
        )
    if variant.fault:
        ok, why = exercised(rep, variant.fault)
        rep["exercised"] = ok
        rep["not_exercised_reason"] = why or None
    return PluginReport(**rep)
