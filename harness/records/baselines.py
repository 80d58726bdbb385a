"""Stored baselines: a last-known-good document per config, typed, written from a passing run.

A baseline is one JSON file per config, ``<baseline dir>/<config>.json`` (default
``results/baselines/``; a folder the user can commit, or any path given with
``--baseline DIR``). ``evalrun --config LIST --update-baseline`` writes it from a run in
which every gate of that config passed; later runs of the config are gated against it
(the gates are planned by :func:`harness.config.gates.plan_baseline_gates` and judged
by :mod:`harness.analysis.gates`):

* ``baseline_accuracy_drop`` (per variant and task): fails when the accuracy dropped
  since the baseline by more than ``gates.baseline_max_accuracy_drop`` **or** is
  significantly lower at ``gates.baseline_alpha`` (one-sided). Paired over the same
  question ids and prompts (exact one-sided McNemar) when the baseline stores
  per-question correctness (it always does when written by evalrun); otherwise
  Fisher's exact test, one-sided.
* ``baseline_acceptance_length_drop`` (per speculative variant and task): fails when
  mean acceptance length dropped since the baseline by more than
  ``gates.baseline_max_acceptance_length_drop`` tokens.
* ``baseline_position_acceptance_drop`` (per speculative variant and task): fails when a
  draft position's acceptance rate (accepted_per_pos[i] / drafts, from the stored
  ``spec_decode``) fell below ``(1 - gates.position_acceptance_rtol)`` times the baseline's
  and significantly (docs/gates.md, "Per-position acceptance").

The file is a :class:`BaselineDoc` (``schema`` :data:`BASELINE_SCHEMA`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Final, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from harness.records.bounds import Bounded
from harness.records.files import MAX_RECORD_BYTES, UnreadableFile, read_text
from harness.records.measures import EngineFactsRecord, Interval, SpecDecodeRecord
from harness.records.provenance import utc_now
from harness.records.run_folder import RunFolder
from harness.records.run_record import RunRecord, _first_error, rename_v1_pipelines
from harness.records.samples import Sample

__all__ = [
    "BASELINE_SCHEMA", "BaselineError", "BaselineDoc", "BaselineQuestion", "BaselineTask",
    "baseline_path", "token_ids_hash", "make_baseline", "write_baselines", "load_baseline",
]

BASELINE_SCHEMA: Final = "evalrun-baseline/2"
#: Baseline schemas this evalrun reads; /1 is migrated on read (evalrun's pipelines
#: renamed, :func:`harness.records.run_record.rename_v1_pipelines`).
BASELINE_SCHEMAS = ("evalrun-baseline/1", BASELINE_SCHEMA)


class BaselineError(ValueError):
    """A baseline cannot be written or read; the message names the file or config."""


class _Model(Bounded, BaseModel):
    """Every baseline type (:class:`harness.records.bounds.Bounded`), fields also by alias."""

    model_config = ConfigDict(populate_by_name=True)


class BaselineQuestion(_Model):
    """One question of the baseline run: prompt hash, gold, verdict and extracted answer
    per pipeline, completion text, ``token_ids_sha256`` (:func:`token_ids_hash`), error."""

    prompt_hash: str
    gold: str
    correct: dict[str, bool] = {}
    answers: dict[str, str | None] = {}
    completion: str | None = None
    token_ids_sha256: str | None = None
    error: str | None = None


class BaselineTask(_Model):
    """One task of one variant in the baseline: the run's task figures and every question."""

    num_requests: int
    error_count: int
    accuracy: dict[str, float | None]
    accuracy_ci: dict[str, Interval | None]
    correct: dict[str, int]
    scored: dict[str, int]
    spec_decode: SpecDecodeRecord | None = None
    mean_acceptance_length_ci: Interval | None = None
    acceptance_rate_ci: Interval | None = None
    per_position_acceptance_ci: list[Interval | None] | None = None
    questions: dict[str, BaselineQuestion] = {}

    _RATES = ("accuracy", "accuracy_ci")
    _WITHIN = (("error_count", "num_requests"), ("correct", "scored"), ("scored", "num_requests"))

    def correctness(self, pipeline: str) -> dict[str, tuple[str, bool]]:
        """Question id -> (prompt hash, verdict of ``pipeline``) for the successful
        questions (empty when the baseline stores no questions)."""
        return {qid: (q.prompt_hash, bool(q.correct[pipeline]))
                for qid, q in self.questions.items() if q.error is None and pipeline in q.correct}


class BaselineVariant(_Model):
    engine: EngineFactsRecord | None = None
    tasks: dict[str, BaselineTask] = {}


class BaselineComparison(_Model):
    baseline: str
    candidate: str
    task: str
    output_match_rate: float | None = None
    compared: int | None = None
    matched: int | None = None
    mismatched: list[str] = []

    _RATES = ("output_match_rate",)
    _WITHIN = (("matched", "compared"),)


class SourceRun(_Model):
    run_id: str
    path: str
    started_at: str | None = None
    git_revision: str | None = None
    vllm_version: str | None = None
    platform: str | None = None


class BaselineDoc(_Model):
    """A stored baseline (``<config>.json``).

    Attributes:
        schema_: :data:`BASELINE_SCHEMA` (``schema`` in the file).
        config, config_sha256, config_path: the config the baseline is of.
        written_at: ISO UTC time of writing.
        source_run: the run it was made from.
        pipeline: the config-level answer pipeline at the time (tasks may override;
            every question stores its verdict under every pipeline).
        variants: per variant, per task, the figures and questions.
        comparisons: output match of each comparison in the source run.
    """

    schema_: Literal["evalrun-baseline/2"] = Field(BASELINE_SCHEMA, alias="schema")
    config: str
    config_sha256: str | None = None
    config_path: str | None = None
    written_at: str
    source_run: SourceRun
    pipeline: str
    variants: dict[str, BaselineVariant] = {}
    comparisons: list[BaselineComparison] = []

    _path: Path | None = PrivateAttr(default=None)

    @property
    def path(self) -> Path | None:
        """The file this baseline was read from (not stored)."""
        return self._path

    def task(self, variant: str, task: str | None) -> BaselineTask | None:
        """The baseline's figures of ``variant`` on ``task``, or None."""
        v = self.variants.get(variant)
        return v.tasks.get(task) if v and task is not None else None


def baseline_path(baseline_dir: str | Path, config: str) -> Path:
    """``<baseline_dir>/<config>.json``."""
    return Path(baseline_dir) / f"{config}.json"


def token_ids_hash(ids: Sequence[int] | None) -> str | None:
    """First 16 hex digits of the SHA-256 of the token ids written as comma-separated
    decimal integers (``"1,2,3"``); None when there are no ids."""
    if ids is None:
        return None
    return hashlib.sha256(",".join(str(int(i)) for i in ids).encode()).hexdigest()[:16]


def _question(s: Sample) -> BaselineQuestion:
    return BaselineQuestion(
        prompt_hash=s.prompt_hash, gold=s.gold, correct=dict(s.correct), answers=dict(s.answers),
        completion=s.completion, token_ids_sha256=token_ids_hash(s.token_ids), error=s.error,
    )


def make_baseline(record: RunRecord, run_dir: str | Path, config: str) -> BaselineDoc:
    """Build the baseline document of one config from a run record and its samples.

    Args:
        record: the run record.
        run_dir: the run folder (samples are read from it).
        config: the config's name.

    Raises:
        BaselineError: the config is not in the record, or a samples file is missing
            or unreadable.
    """
    run_dir = Path(run_dir)
    crec = record.config(config)
    if crec is None:
        raise BaselineError(f"config {config!r} is not in run {record.run_id}")
    prov = record.provenance
    doc = BaselineDoc(
        config=config, config_sha256=crec.sha256, config_path=crec.path, written_at=utc_now(),
        source_run=SourceRun(run_id=record.run_id, path=str(run_dir), started_at=prov.started_at,
                             git_revision=prov.git_revision, vllm_version=prov.vllm_version,
                             platform=prov.platform),
        pipeline=crec.pipeline,
    )
    for vname, v in crec.variants.items():
        vdoc = BaselineVariant(engine=v.engine)
        for ts in (x for x in RunFolder(run_dir).tasks(record, config) if x.variant == vname):
            tname, t = ts.task, ts.result
            try:
                samples = ts.read()
            except (OSError, ValueError) as e:
                raise BaselineError(f"{ts.path}: cannot read samples for the baseline: {e}") from e
            vdoc.tasks[tname] = BaselineTask(
                num_requests=t.num_requests, error_count=t.error_count, accuracy=t.accuracy,
                accuracy_ci=t.accuracy_ci, correct=t.correct, scored=t.scored, spec_decode=t.spec_decode,
                mean_acceptance_length_ci=t.mean_acceptance_length_ci, acceptance_rate_ci=t.acceptance_rate_ci,
                per_position_acceptance_ci=t.per_position_acceptance_ci,
                questions={s.question_id: _question(s) for s in samples},
            )
        doc.variants[vname] = vdoc
    for comp in crec.comparisons:
        doc.comparisons.append(BaselineComparison(
            baseline=comp.baseline, candidate=comp.candidate, task=comp.task,
            output_match_rate=comp.output_match_rate, compared=comp.compared, matched=comp.matched,
            mismatched=[mm.question_id for mm in comp.mismatches],
        ))
    return doc


def write_baselines(record: RunRecord, run_dir: str | Path, baseline_dir: str | Path
                    ) -> list[tuple[str, Path | None, str]]:
    """Write ``<baseline_dir>/<config>.json`` for every config of the run whose gates
    passed.

    A config is written when no gate failed, nothing errored (no config error, no
    variant whose server failed) and at least one gate passed. Gates that were NOT
    RUN because an optional task had no data or a variant was left out with
    ``--variant`` do not stop it: the baseline holds what ran, and the message names
    what was left out (those variants and tasks are then not in the file, so later
    runs are not gated on them).

    Returns:
        One ``(config, path or None, message)`` per config of the record; path is None
        when the config was skipped, and the message says why.

    Raises:
        BaselineError: a samples file of a passing config cannot be read.
        OSError: the folder or file cannot be written.
    """
    out: list[tuple[str, Path | None, str]] = []
    bdir = Path(baseline_dir)
    for crec in record.configs:
        name = crec.name
        # an XFAIL gate too: a known engine bug's numbers are no last-known-good figure
        bad = [g.id + (" (XFAIL)" if g.verdict == "XFAIL" else "") for g in crec.gates if g.passed is False]
        # a report-only gate (false-alarm budget, harness.analysis.gates) ran: its task is in the baseline
        not_run = [g for g in crec.gates if g.passed is None and not g.detail.startswith("report-only: ")]
        broken = [f"variant {v}: {x.error.splitlines()[0]}" for v, x in crec.variants.items() if x.error]
        if not any(g.passed is True for g in crec.gates) or bad or crec.error or broken:
            why = crec.error or (
                f"gates not passed: {', '.join(bad[:5])}" + (" ..." if len(bad) > 5 else "") if bad
                else "; ".join(broken) if broken else "no gate was judged")
            out.append((name, None, f"baseline of {name} not updated: {why}"))
            continue
        doc = make_baseline(record, run_dir, name)
        bdir.mkdir(parents=True, exist_ok=True)
        path = baseline_path(bdir, name)
        from harness.records.atomic import write_atomic  # noqa: PLC0415 - looked up per call (tests replace it)

        # a good baseline is never half-replaced
        write_atomic(path, doc.model_dump_json(indent=1, by_alias=True) + "\n")
        msg = f"baseline of {name} written to {path} from run {record.run_id}"
        if not_run:
            left = sorted({"/".join(x for x in (g.variant, g.task) if x) for g in not_run})
            reasons = sorted({g.not_run_reason or "" for g in not_run})
            msg += (f"; left out (NOT RUN, so not in the baseline and not gated against it later): "
                    f"{', '.join(left)} ({'; '.join(reasons)})")
        out.append((name, path, msg))
    return out


def load_baseline(path: str | Path) -> BaselineDoc:
    """Read and check a baseline file.

    Raises:
        BaselineError: the file is missing, not JSON, of another schema, or a field
            does not validate (the first one is named).
    """
    p = Path(path)
    try:
        raw = json.loads(read_text(p, MAX_RECORD_BYTES, "baseline"))
    except OSError as e:  # named: missing, not a regular file, too large, not UTF-8
        raise BaselineError(str(e) if isinstance(e, UnreadableFile) else f"{p}: cannot read baseline: "
                            f"{e.strerror}") from e
    except json.JSONDecodeError as e:
        raise BaselineError(f"{p}: not a JSON baseline: {e}") from e
    if not isinstance(raw, dict) or raw.get("schema") not in BASELINE_SCHEMAS:
        got = raw.get("schema") if isinstance(raw, dict) else type(raw).__name__
        raise BaselineError(f"{p}: schema {got!r}, this evalrun reads {' and '.join(map(repr, BASELINE_SCHEMAS))}")
    if raw["schema"] == "evalrun-baseline/1":
        raw = dict(rename_v1_pipelines(raw), schema=BASELINE_SCHEMA)
    raw.pop("_path", None)
    try:
        doc = BaselineDoc.model_validate(raw)
    except ValidationError as e:
        raise BaselineError(f"{p}: not a valid baseline: {_first_error(e)}") from e
    doc._path = p
    return doc
