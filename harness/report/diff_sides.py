"""The two sides of ``evalrun diff``: a run folder (``results/<run id>/``, its
``run.json``) or a baseline file (``results/baselines/<config>.json``), found by path or
run id and read through :func:`harness.records.run_record.load_run` /
:func:`harness.records.baselines.load_baseline` into the typed :class:`Side` view the
diff compares (:mod:`harness.report.diff`).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config.model_list import PROJECT_ROOT
from harness.records.baselines import (
    BASELINE_SCHEMAS,
    BaselineDoc,
    BaselineError,
    BaselineTask,
    load_baseline,
    token_ids_hash,
)
from harness.records.files import MAX_RECORD_BYTES, read_text
from harness.records.measures import EngineFactsRecord, Interval, NoiseRecord, SpecDecodeRecord
from harness.records.provenance import DatasetRef
from harness.records.run_folder import RunFolder
from harness.records.run_record import GateResult, RunErrorRecord, RunRecord, RunRecordError, TaskResult, load_run
from harness.records.samples import Sample
from harness.tasks.kinds import record_pipelines


class DiffError(ValueError):
    """A side of the diff cannot be read; the message names the path."""


def resolve_side(path: str | Path, results_dir: str | Path | None = None) -> Path:
    """A diff side as a path: as given when it exists, else a run id, i.e. the folder
    ``<results_dir>/<id>`` (default ``results/`` of the project).

    Raises:
        DiffError: neither exists; names both places and the nearest run ids.
    """
    p = Path(path)
    if p.exists():
        return p
    rdir = Path(results_dir) if results_dir is not None else PROJECT_ROOT / "results"
    if len(p.parts) == 1 and (rdir / p).exists():
        return rdir / p
    runs = sorted(x.name for x in rdir.glob("*") if (x / "run.json").is_file()) if rdir.is_dir() else []
    near = difflib.get_close_matches(str(path), runs, n=3, cutoff=0.5)
    raise DiffError(
        f"{p}: no such run folder, run.json or baseline file, and no run id {str(path)!r} in {rdir}"
        + (f"; nearest run ids: {', '.join(near)}" if near
           else (f"; latest runs: {', '.join(runs[-3:])}" if runs else ""))
    )


@dataclass(frozen=True)
class QuestionView:
    """One question of one task on one side, as the diff compares it: the prompt's
    hash, gold answer, verdict and answer per pipeline, completion, token ids (None on a
    baseline side, which keeps only their hash), the token ids' hash, and the error."""

    prompt_hash: str | None
    gold: str
    correct: dict[str, bool]
    answers: dict[str, str | None]
    completion: str | None
    token_ids: list[int] | None
    token_hash: str | None
    error: str | None


@dataclass(frozen=True)
class TaskView:
    """One task of one variant on one side: its questions by id and the record's
    acceptance figures (:class:`~harness.records.measures.SpecDecodeRecord`) with their
    intervals; ``record_counts`` is a baseline's stored ``correct`` / ``scored``;
    ``pipelines`` the answer pipelines the task was scored under, as its record lists them
    (:func:`harness.tasks.kinds.record_pipelines`: an lm-eval task's own, else its kind's)."""

    questions: dict[str, QuestionView]
    spec_decode: SpecDecodeRecord | None
    mean_acceptance_length_ci: Interval | None
    acceptance_rate_ci: Interval | None
    per_position_acceptance_ci: list[Interval | None] | None
    acceptance_ci_reason: str | None
    record_counts: dict[str, dict[str, int]] | None = None
    pipelines: tuple[str, ...] = ()


@dataclass(frozen=True)
class VariantView:
    """One variant on one side: the engine's facts, its tasks, its error."""

    engine: EngineFactsRecord | None
    tasks: dict[str, TaskView]
    error: str | None


@dataclass(frozen=True)
class ComparisonView:
    """One in-run comparison on one side: output match, the mismatched question ids
    with their first divergence (None on a baseline side) and the noise reference."""

    baseline: str
    candidate: str
    task: str
    output_match_rate: float | None
    compared: int | None  # None: a baseline stored without counts
    matched: int | None
    mismatched: dict[str, int | None]
    noise: NoiseRecord | None


@dataclass(frozen=True)
class ConfigView:
    """One config on one side: gate pipeline, variants, comparisons, gates by id, the
    config file's SHA-256, the task settings and the data references by task name
    (a baseline side has no gates, settings or data references)."""

    pipeline: str | None
    variants: dict[str, VariantView]
    comparisons: list[ComparisonView]
    gates: dict[str, GateResult]
    sha256: str | None
    task_specs: dict[str, dict[str, Any]] | None  # the record's task settings (JSON)
    datasets: dict[str, DatasetRef]


@dataclass(frozen=True)
class SideHead:
    """A side as the diff result names it: path, ``kind`` (``run`` or ``baseline``),
    id, verdict, status and outcome word."""

    path: str
    kind: str
    id: str
    passed: bool | None
    status: str
    outcome: str


@dataclass(frozen=True)
class Side:
    """One side of a diff (:func:`load_side`): where it came from (``kind`` ``run`` or
    ``baseline``), its id, verdict, status and outcome, and its configs by name."""

    path: str
    kind: str
    id: str
    passed: bool | None
    status: str
    outcome: str
    configs: dict[str, ConfigView]

    def head(self) -> SideHead:
        """The side as the diff result names it."""
        return SideHead(path=self.path, kind=self.kind, id=self.id, passed=self.passed, status=self.status,
                        outcome=self.outcome)


def load_side(path: str | Path, results_dir: str | Path | None = None) -> Side:
    """Read one side: a run (:func:`harness.records.run_record.load_run` and its samples)
    or a baseline (:func:`harness.records.baselines.load_baseline`), as the typed
    :class:`Side` view.

    Raises:
        DiffError: the path does not exist, is not a run record or baseline, or a
            samples file named by the record cannot be read.
    """

    p = resolve_side(path, results_dir)
    if p.is_file():
        try:
            doc = json.loads(read_text(p, MAX_RECORD_BYTES, "run record or baseline"))
        except (OSError, json.JSONDecodeError) as e:
            raise DiffError(f"{p}: not a JSON run record or baseline: {e}") from e
        if isinstance(doc, dict) and doc.get("schema") in BASELINE_SCHEMAS:
            try:
                return _side_from_baseline(load_baseline(p), p)
            except BaselineError as e:
                raise DiffError(str(e)) from e
    try:
        rec = load_run(p)
    except RunRecordError as e:
        raise DiffError(str(e)) from e
    try:
        return _side_from_run(rec, rec.path or p)
    except ValueError as e:  # a recorded samples path that would leave the run folder (named)
        raise DiffError(str(e)) from e


def _task_view(t: TaskResult | BaselineTask, questions: dict[str, QuestionView],
               record_counts: dict[str, dict[str, int]] | None = None,
               spec: dict[str, Any] | None = None) -> TaskView:
    """The view of one recorded task; ``spec`` its settings in the run record (None for a
    baseline, which keeps none)."""
    kind = spec.get("kind") if spec else None
    own = t.lm_eval.pipelines if isinstance(t, TaskResult) and t.lm_eval is not None else None
    return TaskView(questions=questions, spec_decode=t.spec_decode,
                    mean_acceptance_length_ci=t.mean_acceptance_length_ci, acceptance_rate_ci=t.acceptance_rate_ci,
                    per_position_acceptance_ci=t.per_position_acceptance_ci,
                    acceptance_ci_reason=getattr(t, "acceptance_ci_reason", None), record_counts=record_counts,
                    pipelines=record_pipelines(kind if isinstance(kind, str) else None, own, t.accuracy))


def _question(s: Sample) -> QuestionView:
    return QuestionView(prompt_hash=s.prompt_hash, gold=s.gold, correct=dict(s.correct), answers=dict(s.answers),
                        completion=s.completion, token_ids=list(s.token_ids) if s.token_ids is not None else None,
                        token_hash=token_ids_hash(s.token_ids), error=s.error)


def _side_from_run(rec: RunRecord, run_dir: Path) -> Side:
    configs = {}
    for c in rec.configs:
        variants = {}
        for vname, v in c.variants.items():
            tasks = {}
            for ts in (x for x in RunFolder(run_dir).tasks(rec, c.name) if x.variant == vname):
                try:
                    samples = ts.read()
                except (OSError, ValueError) as e:
                    raise DiffError(f"{ts.path}: cannot read samples: {e}") from e
                tasks[ts.task] = _task_view(ts.result, {s.question_id: _question(s) for s in samples},
                                            spec=c.tasks.get(ts.task))
            variants[vname] = VariantView(engine=v.engine, tasks=tasks, error=v.error)
        comps = [ComparisonView(baseline=comp.baseline, candidate=comp.candidate, task=comp.task,
                                output_match_rate=comp.output_match_rate, compared=comp.compared, matched=comp.matched,
                                mismatched={mm.question_id: mm.first_divergence for mm in comp.mismatches},
                                noise=comp.noise)
                 for comp in c.comparisons]
        configs[c.name] = ConfigView(
            pipeline=c.pipeline, variants=variants, comparisons=comps, gates={g.id: g for g in c.gates},
            sha256=c.sha256, task_specs=c.tasks or None,
            datasets={tid.split("/", 1)[1]: d for tid, d in rec.provenance.datasets.items()
                      if tid.split("/", 1)[0] == c.name})
    noise = rec.numerics_noise  # a run with GPU-like logits says so wherever its id shows (docs/numerics.md)
    rid = rec.run_id if noise is None else f"{rec.run_id} [numerics noise {noise.spec}, {noise.level_nats:g} nats]"
    return Side(path=str(run_dir), kind="run", id=rid, passed=rec.passed, status=rec.status,
                outcome=rec.outcome, configs=configs)


def _side_from_baseline(doc: BaselineDoc, path: Path) -> Side:
    variants = {}
    for vname, v in doc.variants.items():
        tasks = {}
        for tname, t in v.tasks.items():
            qs = {qid: QuestionView(prompt_hash=q.prompt_hash, gold=q.gold, correct=dict(q.correct),
                                    answers=dict(q.answers), completion=q.completion, token_ids=None,
                                    token_hash=q.token_ids_sha256, error=q.error)
                  for qid, q in t.questions.items()}
            tasks[tname] = _task_view(t, qs, {"correct": t.correct, "scored": t.scored})
        variants[vname] = VariantView(engine=v.engine, tasks=tasks, error=None)
    comps = [ComparisonView(baseline=comp.baseline, candidate=comp.candidate, task=comp.task,
                            output_match_rate=comp.output_match_rate, compared=comp.compared, matched=comp.matched,
                            mismatched={q: None for q in comp.mismatched}, noise=None)
             for comp in doc.comparisons]
    cv = ConfigView(pipeline=doc.pipeline, variants=variants, comparisons=comps, gates={},
                    sha256=doc.config_sha256, task_specs=None, datasets={})
    return Side(path=str(path), kind="baseline", id=f"baseline of {doc.config} (run {doc.source_run.run_id})",
                passed=True, status="baseline", outcome="passed", configs={doc.config: cv})


@dataclass(frozen=True)
class SidePeek:
    """What the diff checks of a side before reading its samples: its path, its run's
    status (None when it is not a readable run record, e.g. a baseline) and the
    unexpected error that ended it (``status`` ``error``)."""

    path: str
    status: str | None
    error: RunErrorRecord | None = None


def peek(path: Path) -> SidePeek:
    """:class:`SidePeek` of a run folder or run.json (its typed record,
    :func:`harness.records.run_record.load_run`, without its samples)."""
    try:
        rec = load_run(path)
    except RunRecordError:
        return SidePeek(path=str(path), status=None)
    return SidePeek(path=str(path), status=rec.status, error=rec.error)
