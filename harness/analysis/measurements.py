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
``variant_record``, ``comparison_record``), which create the stored record. The keyed spellings the runner writes
(``m.scores[(v, t)] = ...``, ``m.not_run[(v, None)] = ...``, ``m.matches[(b, c, t)] = ...``)
are read/write views onto those records, so both address the same data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import (
    Any,
    Generic,
    TypeVar,
)

from harness.records.measures import DivergenceReportRecord
from harness.records.measures import NoiseRecord
from harness.records.measures import AnswerAgreementRecord, OutputMatchRecord
from harness.analysis.scoring import TaskScore, correctness
from harness.records.measures import PairedRecord
from harness.analysis.stats import paired_comparison
from harness.records.measures import EffectivenessRecord, ModelRunnerRecord
from harness.records.measures import SpecDecodeRecord
from harness.records.baselines import BaselineDoc
from harness.records.samples import Sample


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
    """

    score: TaskScore | None = None
    samples: Sequence[Sample] | None = None
    spec: SpecDecodeRecord | None = None
    spec_error: str | None = None
    not_run: str | None = None


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
    """

    match: OutputMatchRecord | None = None
    answers: AnswerAgreementRecord | None = None
    noise: NoiseRecord | None = None
    divergences: DivergenceReportRecord | None = None


K = TypeVar("K")
R = TypeVar("R")


class FieldView(MutableMapping[K, Any], Generic[K, R]):
    """A dict-like view of one field of keyed records: ``view[key]`` is
    ``getattr(records[key], name)``; a key is present when its record exists and the
    field is not None. Setting creates the record (``make()``) when missing; setting None
    or deleting clears the field. Raises ``KeyError`` on a missing key like a dict."""

    def __init__(self, records: dict[K, R], make: Callable[[], R], name: str):
        self._records, self._make, self._name = records, make, name

    def __getitem__(self, key: K) -> Any:
        r = self._records.get(key)
        value = None if r is None else getattr(r, self._name)
        if value is None:
            raise KeyError(key)
        return value

    def __setitem__(self, key: K, value: Any) -> None:
        r = self._records.get(key)
        if r is None:
            if value is None:
                return
            r = self._records[key] = self._make()
        setattr(r, self._name, value)

    def __delitem__(self, key: K) -> None:
        self[key]  # KeyError when absent, as a dict
        setattr(self._records[key], self._name, None)

    def __iter__(self) -> Iterator[K]:
        return iter([k for k, r in self._records.items() if getattr(r, self._name) is not None])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"{self._name}{dict(self.items())!r}"


class NotRunView(MutableMapping[tuple[str, "str | None"], str]):
    """``m.not_run``: ``(variant, None)`` is :attr:`VariantMeasurement.not_run`,
    ``(variant, task)`` is :attr:`TaskMeasurement.not_run` (a view as :class:`FieldView`)."""

    def __init__(self, m: Measurements):
        self._variant = FieldView(m.variants, VariantMeasurement, "not_run")
        self._task = FieldView(m.tasks, TaskMeasurement, "not_run")

    def _view(self, key: tuple[str, str | None]) -> tuple[FieldView, Any]:
        if not (isinstance(key, tuple) and len(key) == 2):
            raise KeyError(f"not_run key must be (variant, task or None), got {key!r}")
        return (self._variant, key[0]) if key[1] is None else (self._task, key)

    def __getitem__(self, key: tuple[str, str | None]) -> str:
        view, k = self._view(key)
        return view[k]

    def __setitem__(self, key: tuple[str, str | None], value: str) -> None:
        view, k = self._view(key)
        view[k] = value

    def __delitem__(self, key: tuple[str, str | None]) -> None:
        view, k = self._view(key)
        del view[k]

    def __iter__(self) -> Iterator[tuple[str, str | None]]:
        return iter([(v, None) for v in self._variant] + list(self._task))

    def __len__(self) -> int:
        return len(self._variant) + len(self._task)


#: keyed attribute -> (record family, record field): the writer spellings of the runner.
_TASK_VIEWS = {"scores": "score", "samples": "samples", "spec": "spec", "spec_errors": "spec_error"}
_VARIANT_VIEWS = {"effectiveness": "effectiveness", "engine_facts_errors": "engine_facts_error"}
_COMPARISON_VIEWS = {"matches": "match", "answers": "answers", "noise": "noise", "divergences": "divergences"}

def _fill(view: MutableMapping, values: Mapping | None) -> None:
    view.clear()
    for k, v in (values or {}).items():
        view[k] = v


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

    Keyed views (read/write, dict-like, onto the records above): ``scores``,
    ``samples``, ``spec``, ``spec_errors`` by ``(variant, task)``; ``effectiveness``,
    ``engine_facts_errors`` by variant; ``not_run`` by ``(variant, task)`` or
    ``(variant, None)``; ``matches``, ``answers``, ``noise``, ``divergences`` by
    ``(baseline, candidate, task)``; ``runners`` by variant (None when not collected).
    Each also accepted as a keyword of the constructor, and assignable as a whole.
    """

    scores: MutableMapping[tuple[str, str], TaskScore]
    samples: MutableMapping[tuple[str, str], Sequence[Sample]]
    spec: MutableMapping[tuple[str, str], SpecDecodeRecord]
    spec_errors: MutableMapping[tuple[str, str], str]
    effectiveness: MutableMapping[str, EffectivenessRecord]
    engine_facts_errors: MutableMapping[str, str]
    matches: MutableMapping[tuple[str, str, str], OutputMatchRecord]
    answers: MutableMapping[tuple[str, str, str], AnswerAgreementRecord]
    noise: MutableMapping[tuple[str, str, str], NoiseRecord]
    divergences: MutableMapping[tuple[str, str, str], DivergenceReportRecord]

    def __init__(self, *, baseline: BaselineDoc | None = None, baseline_error: str | None = None,
                 prompt_only: dict[str, str] | None = None, runners: Mapping[str, ModelRunnerRecord] | None = None,
                 not_run: Mapping[tuple[str, str | None], str] | None = None, **views: Mapping | None):
        unknown = set(views) - set(_TASK_VIEWS) - set(_VARIANT_VIEWS) - set(_COMPARISON_VIEWS)
        if unknown:
            raise TypeError(f"Measurements: unknown measurement(s) {sorted(unknown)}")
        self.tasks: dict[tuple[str, str], TaskMeasurement] = {}
        self.variants: dict[str, VariantMeasurement] = {}
        self.comparisons: dict[tuple[str, str, str], ComparisonMeasurement] = {}
        self.runners_collected = False
        self.baseline = baseline
        self.baseline_error = baseline_error
        self.prompt_only: dict[str, str] = dict(prompt_only or {})
        for name, values in views.items():
            setattr(self, name, values)
        if not_run:
            self.not_run = not_run
        self.runners = runners

    # ------------------------------------------------------------------ typed accessors

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

    def paired(self, baseline: str | None, candidate: str, task: str | None, pipeline: str) -> PairedRecord | None:
        """Paired accuracy of ``baseline`` vs ``candidate`` on ``task`` under ``pipeline``
        over the questions both scored (None when they share none)."""
        a, b = self.task(baseline, task).samples, self.task(candidate, task).samples
        if a is None or b is None:
            return None
        ca, cb = correctness(a, pipeline), correctness(b, pipeline)
        return paired_comparison(ca, cb) if set(ca) & set(cb) else None

    # ------------------------------------------------------------------ keyed views

    def __getattr__(self, name: str) -> Any:
        # only reached for attributes not set on the instance: the keyed views
        if "tasks" not in self.__dict__:  # not initialised yet (copy, pickle)
            raise AttributeError(name)
        if name in _TASK_VIEWS:
            return FieldView(self.__dict__["tasks"], TaskMeasurement, _TASK_VIEWS[name])
        if name in _VARIANT_VIEWS:
            return FieldView(self.__dict__["variants"], VariantMeasurement, _VARIANT_VIEWS[name])
        if name in _COMPARISON_VIEWS:
            return FieldView(self.__dict__["comparisons"], ComparisonMeasurement, _COMPARISON_VIEWS[name])
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _TASK_VIEWS or name in _VARIANT_VIEWS or name in _COMPARISON_VIEWS:
            _fill(getattr(self, name), value)
        else:
            super().__setattr__(name, value)

    @property
    def not_run(self) -> NotRunView:
        """``(variant, task)`` or ``(variant, None)`` -> why it did not run (a view)."""
        return NotRunView(self)

    @not_run.setter
    def not_run(self, values: Mapping[tuple[str, str | None], str] | None) -> None:
        _fill(self.not_run, values)

    @property
    def runners(self) -> FieldView[str, VariantMeasurement] | None:
        """variant -> :class:`ModelRunnerRecord` (a view), None when not collected;
        assigning a mapping marks them collected, assigning None not collected."""
        if not self.runners_collected:
            return None
        return FieldView(self.variants, VariantMeasurement, "runner")

    @runners.setter
    def runners(self, values: Mapping[str, ModelRunnerRecord] | None) -> None:
        for r in self.variants.values():
            r.runner = None
        self.runners_collected = values is not None
        if values is not None:
            _fill(self.runners, values)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return (f"Measurements(tasks={self.tasks!r}, variants={self.variants!r}, "
                f"comparisons={self.comparisons!r}, runners_collected={self.runners_collected!r}, "
                f"baseline={self.baseline!r}, baseline_error={self.baseline_error!r}, "
                f"prompt_only={self.prompt_only!r})")

