"""What a run measured for one config, as the gates read it: a view of the config's record.

The run record (:class:`harness.records.run_record.ConfigResult`) is the one tree of
measured values: a task's scores, acceptance figures and shape proof
(:class:`~harness.records.run_record.TaskResult`), a variant's effective configuration and
model runner (:class:`~harness.records.run_record.VariantResult`), a comparison's output
match, answer agreement, noise and divergences
(:class:`~harness.records.run_record.ComparisonResult`). Each is written once, into the
record; :class:`Measurements` bound to the record (``Measurements(record=crec)``) reads them
from there. It holds beside them only what the record does not: the samples in memory, why
something did not run, the target's scores and the sampled verdict, the stored baseline
and the tasks that only score prompts.

The gates (:mod:`harness.analysis.gates`) read three kinds of record:

* :class:`TaskMeasurement` per ``(variant, task)``: score, samples, speculative-decoding
  metrics or why they are missing, why the task did not run;
* :class:`VariantMeasurement` per variant: effective engine configuration or why it could
  not be read, model runner, why the variant did not run;
* :class:`ComparisonMeasurement` per ``(baseline, candidate, task)``: output match,
  answer agreement, noise reference, judged divergences;

through the typed accessors :meth:`Measurements.task`, :meth:`Measurements.variant` and
:meth:`Measurements.comparison`. Writers of what the record does not hold use
:meth:`Measurements.task_record` (and ``variant_record``, ``comparison_record``), which
create the stored entry (``m.task_record(v, t).samples = xs``,
``m.variant_record(v).not_run = why``); measurements built without a record (a config
refused before any server, tests) hold every field there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

from harness.analysis.scoring import TaskScore, correctness
from harness.analysis.stats import paired_comparison
from harness.records.baselines import BaselineDoc
from harness.records.completions import TargetScore
from harness.records.measures import (
    AnswerAgreementRecord,
    DivergenceReportRecord,
    EffectivenessRecord,
    ModelRunnerRecord,
    NoiseRecord,
    OutputMatchRecord,
    PairedRecord,
    SampledRecord,
    SpecDecodeRecord,
)
from harness.records.run_record import ConfigResult, StartupCheckRecord, TaskResult, VariantResult
from harness.records.samples import Sample
from harness.records.shape_proof import ShapeProofRecord


@dataclass
class TaskMeasurement:
    """What one variant measured on one task (every field None when not measured).

    Attributes:
        score: the task's :class:`TaskScore`.
        samples: the task's samples, one per request (paired gates judge them under
            their own pipeline).
        spec: :class:`SpecDecodeRecord` of a speculative variant.
        spec_error: why the speculative-decoding metrics are missing or unusable.
        not_run: why this task did not run for this variant.
        shape: a traffic shape's proof (``kind: shape``).
        target_scores: question id -> the target's log-likelihood of this variant's
            sampled completion (:class:`TargetScore`), for the sampled verdict.
        scoring_error: why this variant's completions could not be scored.
    """

    score: TaskScore | None = None
    samples: Sequence[Sample] | None = None
    spec: SpecDecodeRecord | None = None
    spec_error: str | None = None
    not_run: str | None = None
    shape: ShapeProofRecord | None = None
    target_scores: dict[str, TargetScore] | None = None
    scoring_error: str | None = None


@dataclass
class VariantMeasurement:
    """What one variant measured across its tasks (every field None when not measured).

    Attributes:
        effectiveness: the engine's effective configuration against the requested one.
        engine_facts_error: why the effective configuration could not be read
            (``/server_info`` or ``/version`` unreadable); fails ``variant_effective``.
        runner: the model runner the engine ran (:class:`ModelRunnerRecord`).
        not_run: why the whole variant did not run.
        startup_checks: the answers of the config's start-up checks (``startup_rpc_checks``).
    """

    effectiveness: EffectivenessRecord | None = None
    engine_facts_error: str | None = None
    runner: ModelRunnerRecord | None = None
    not_run: str | None = None
    startup_checks: list[StartupCheckRecord] | None = None


@dataclass
class ComparisonMeasurement:
    """What one comparison (baseline vs candidate) measured on one task.

    Attributes:
        match: greedy output match of the candidate against the baseline.
        answers: same extracted answer (reported beside output match).
        noise: the candidate's mismatches against a noise reference (rerun or stored rate).
        divergences: the divergences judged by a reference's top-k log-probabilities.
        sampled: the sampled verdict's test (:func:`harness.analysis.sampled.sampled_test`).
    """

    match: OutputMatchRecord | None = None
    answers: AnswerAgreementRecord | None = None
    noise: NoiseRecord | None = None
    divergences: DivergenceReportRecord | None = None
    sampled: SampledRecord | None = None


def _fill(into: object, measured: object) -> None:
    """Copy every field ``measured`` holds (not None) onto ``into`` (same record type)."""
    for f in fields(measured):  # type: ignore[arg-type]
        value = getattr(measured, f.name)
        if value is not None:
            setattr(into, f.name, value)


@dataclass
class Measurements:
    """What a run measured for one config, for the gates.

    Attributes:
        tasks: ``(variant, task)`` -> :class:`TaskMeasurement`.
        variants: variant -> :class:`VariantMeasurement`.
        comparisons: ``(baseline, candidate, task)`` -> :class:`ComparisonMeasurement`.
        runners_collected: whether model-runner facts were collected (the runner always
            collects them; then ``variant_effective`` also requires a known runner, the
            one asked for, and the same runner as every variant it is compared with).
        baseline: the stored baseline of the config, for the baseline gates.
        baseline_error: why the stored baseline file could not be read.
        prompt_only: task -> why it generates nothing (an lm_eval ``multiple_choice`` /
            ``loglikelihood`` task scores prompts): its gates that read generated tokens
            (:func:`harness.config.gates.generation_kinds`) are NOT RUN with that reason.
        record: the config's record the readers view (None: every value is in the
            stored entries). A value the record holds is read from it; the stored entry
            gives the rest (and a value the record does not have).
    """

    tasks: dict[tuple[str, str], TaskMeasurement] = field(default_factory=dict)
    variants: dict[str, VariantMeasurement] = field(default_factory=dict)
    comparisons: dict[tuple[str, str, str], ComparisonMeasurement] = field(default_factory=dict)
    runners_collected: bool = False
    baseline: BaselineDoc | None = None
    baseline_error: str | None = None
    prompt_only: dict[str, str] = field(default_factory=dict)
    record: ConfigResult | None = field(default=None, repr=False, compare=False)
    _scores: dict[int, tuple[TaskResult, TaskScore]] = field(default_factory=dict, init=False, repr=False,
                                                             compare=False)

    # ------------------------------------------------------------------ readers

    def _variant_result(self, variant: str | None) -> VariantResult | None:
        return None if self.record is None or variant is None else self.record.variants.get(variant)

    def _score_of(self, trec: TaskResult) -> TaskScore:
        """The task's figures in the record as a :class:`TaskScore` (read once per entry)."""
        got = self._scores.get(id(trec))
        if got is None or got[0] is not trec:
            got = self._scores[id(trec)] = (trec, TaskScore.of_result(trec))
        return got[1]

    def task(self, variant: str | None, task: str | None) -> TaskMeasurement:
        """The measurement of ``variant`` on ``task``: score, acceptance figures (or why
        they are missing) and shape proof from the record's task entry when there is one,
        the rest from the stored entry; a new empty record (all None, not stored) when
        nothing was measured."""
        stored = self.tasks.get((variant, task))  # type: ignore[arg-type]
        vrec = self._variant_result(variant)
        trec = vrec.tasks.get(task) if vrec is not None and task is not None else None
        if trec is None:
            return stored or TaskMeasurement()
        s = stored or TaskMeasurement()
        return dataclasses.replace(
            s, score=self._score_of(trec), spec=trec.spec_decode or s.spec,
            spec_error=trec.spec_decode_error or s.spec_error, shape=trec.shape or s.shape)

    def variant(self, variant: str | None) -> VariantMeasurement:
        """The measurement of ``variant``: effective configuration (or why it could not
        be read) and model runner from the record's variant entry when there is one, the
        rest from the stored entry; an empty record (not stored) when none."""
        stored = self.variants.get(variant)  # type: ignore[arg-type]
        vrec = self._variant_result(variant)
        if vrec is None:
            return stored or VariantMeasurement()
        s = stored or VariantMeasurement()
        return dataclasses.replace(s, effectiveness=vrec.effective or s.effectiveness,
                                   engine_facts_error=vrec.engine_error or s.engine_facts_error,
                                   runner=vrec.model_runner or s.runner,
                                   startup_checks=vrec.startup_checks or s.startup_checks)

    def comparison(self, baseline: str | None, candidate: str, task: str | None) -> ComparisonMeasurement:
        """The measurement of ``baseline`` vs ``candidate`` on ``task``: output match (the
        record's comparison entry itself, an :class:`OutputMatchRecord`), answer agreement,
        noise and divergences from the record when it holds the comparison, the sampled
        verdict from the stored entry; an empty record (not stored) when none."""
        stored = self.comparisons.get((baseline, candidate, task))  # type: ignore[arg-type]
        crec = (self.record.comparison(baseline, candidate, task)
                if self.record is not None and baseline is not None and task is not None else None)
        if crec is None:
            return stored or ComparisonMeasurement()
        s = stored or ComparisonMeasurement()
        return dataclasses.replace(s, match=crec, answers=crec.answer_agreement or s.answers,
                                   noise=crec.noise or s.noise, divergences=crec.divergence or s.divergences)

    def paired(self, baseline: str | None, candidate: str, task: str | None, pipeline: str) -> PairedRecord | None:
        """Paired accuracy of ``baseline`` vs ``candidate`` on ``task`` under ``pipeline``
        over the questions both scored (None when they share none)."""
        a, b = self.task(baseline, task).samples, self.task(candidate, task).samples
        if a is None or b is None:
            return None
        ca, cb = correctness(a, pipeline), correctness(b, pipeline)
        return paired_comparison(ca, cb) if set(ca) & set(cb) else None

    # ------------------------------------------------------------------ writers

    def task_record(self, variant: str, task: str) -> TaskMeasurement:
        """The stored record of ``variant`` on ``task``, created when missing (for writers:
        ``m.task_record(v, t).score = sc``)."""
        return self.tasks.setdefault((variant, task), TaskMeasurement())

    def variant_record(self, variant: str) -> VariantMeasurement:
        """The stored record of ``variant``, created when missing (for writers)."""
        return self.variants.setdefault(variant, VariantMeasurement())

    def comparison_record(self, baseline: str, candidate: str, task: str) -> ComparisonMeasurement:
        """The stored record of ``baseline`` vs ``candidate`` on ``task``, created when
        missing (for writers)."""
        return self.comparisons.setdefault((baseline, candidate, task), ComparisonMeasurement())

    def absorb(self, measured: Measurements) -> None:
        """Add the task, variant and comparison records of ``measured`` (e.g. one
        variant's, measured apart while other variants ran) field by field: a field
        ``measured`` holds replaces this one's, a field it left None keeps this one's."""
        for key, t in measured.tasks.items():
            _fill(self.task_record(*key), t)
        for name, v in measured.variants.items():
            _fill(self.variant_record(name), v)
        for ckey, c in measured.comparisons.items():
            _fill(self.comparison_record(*ckey), c)
