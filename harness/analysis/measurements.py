"""What a run measured for one config, typed per (variant, task), per variant and per comparison.

The gates (:mod:`harness.analysis.gates`) read three kinds of record:

* :class:`TaskMeasurement` per ``(variant, task)``: score, samples, speculative-decoding
  metrics or why they are missing, why the task did not run;
* :class:`VariantMeasurement` per variant: effective engine configuration or why it could
  not be read, model runner, why the variant did not run;
* :class:`ComparisonMeasurement` per ``(baseline, candidate, task)``: output match,
  answer agreement, noise reference, judged divergences;

plus the config's stored baseline and the tasks that only score prompts. Readers use the
typed accessors :meth:`Measurements.task`, :meth:`Measurements.variant` and
:meth:`Measurements.comparison`; writers :meth:`Measurements.task_record` (and
``variant_record``, ``comparison_record``), which create the stored record
(``m.task_record(v, t).score = sc``, ``m.variant_record(v).not_run = why``).
"""

from __future__ import annotations

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
    """

    effectiveness: EffectivenessRecord | None = None
    engine_facts_error: str | None = None
    runner: ModelRunnerRecord | None = None
    not_run: str | None = None


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
            (:data:`harness.analysis.gates.PROMPT_ONLY_KINDS`) are NOT RUN with that reason.
    """

    tasks: dict[tuple[str, str], TaskMeasurement] = field(default_factory=dict)
    variants: dict[str, VariantMeasurement] = field(default_factory=dict)
    comparisons: dict[tuple[str, str, str], ComparisonMeasurement] = field(default_factory=dict)
    runners_collected: bool = False
    baseline: BaselineDoc | None = None
    baseline_error: str | None = None
    prompt_only: dict[str, str] = field(default_factory=dict)

    # ------------------------------------------------------------------ readers

    def task(self, variant: str | None, task: str | None) -> TaskMeasurement:
        """The measurement of ``variant`` on ``task``; a new empty record (all None, not
        stored) when nothing was measured."""
        return self.tasks.get((variant, task)) or TaskMeasurement()  # type: ignore[arg-type]

    def variant(self, variant: str | None) -> VariantMeasurement:
        """The measurement of ``variant``; an empty record (not stored) when none."""
        return self.variants.get(variant) or VariantMeasurement()  # type: ignore[arg-type]

    def comparison(self, baseline: str | None, candidate: str, task: str | None) -> ComparisonMeasurement:
        """The measurement of ``baseline`` vs ``candidate`` on ``task``; an empty record
        (not stored) when none."""
        return self.comparisons.get((baseline, candidate, task)) or ComparisonMeasurement()  # type: ignore[arg-type]

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
