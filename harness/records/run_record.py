"""The run record on disk: one typed, versioned document with provenance, beside its samples and logs.

Layout of one run folder (``results/<run id>/``)::

    run.json                                   the record: a :class:`RunRecord`
    summary.md                                 the report for humans
    samples/<config>/<variant>/<task>.jsonl    one :class:`~harness.records.samples.Sample` per line
    logs/<config>/<variant>.log                the server's stdout and stderr

``run.json`` is written and read only through these pydantic models
(``model_dump_json`` / ``model_validate_json``); every module that reads a record
(report, diff, calibrate, selfcheck, baselines) uses the types, never dict look-ups.
The shape, top down::

    RunRecord            schema_version, run_id, status, passed, exit_code, provenance
    └ configs: [ConfigResult]          name, path, sha256, form, model, pipeline, error
      ├ variants: {name: VariantResult}   argv, env, fault, requested, engine, effective
      │  └ tasks: {name: TaskResult}      accuracy per pipeline, errors, spec_decode, intervals
      ├ comparisons: [ComparisonResult]   output match, first divergences, paired test, noise
      ├ gates: [GateResult]               one verdict per planned gate
      └ baseline: BaselineInfo | None     the stored baseline the config was gated against

Schema versions (:data:`SCHEMA_VERSION`): 1 was written by evalrun 0.1 as an untyped
dict of the same shape; :func:`load_run` migrates it (:func:`_migrate_v1`): every later
field is optional, and evalrun's own answer pipelines, called ``strict-match`` and
``flexible-extract`` in schema 1, are renamed ``strict-numeric`` and ``flexible-numeric``
(:data:`V1_PIPELINE_NAMES`), since schema 2 uses the old names for lm-eval's own filters. Any other version,
or a field this evalrun does not know, is a :class:`RunRecordError` naming the file and
the first bad field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, computed_field, model_validator

from harness.config.schema import ConfigWarning, JsonValue
from harness.records.bounds import Bounded
from harness.records.expected import VERDICTS, ExpectedFailureRecord  # noqa: F401 - re-exported
from harness.records.files import MAX_RECORD_BYTES, UnreadableFile, read_text
from harness.records.measures import (
    AnswerAgreementRecord,
    DivergenceReportRecord,
    EffectivenessRecord,
    EngineCountersRecord,
    EngineFactsRecord,
    Interval,
    ModelRunnerRecord,
    NoiseRecord,
    OutputMatchRecord,
    PairedRecord,
    SpecDecodeCountersRecord,
    SpecDecodeRecord,
)
from harness.records.numerics_noise import NumericsNoiseRecord
from harness.records.provenance import EngineBuild, Provenance
from harness.records.resumed import ResumedRecord
from harness.records.scoring import ScoringRecord
from harness.records.server_records import (  # noqa: F401 - part of the record, re-exported
    LeftoverServerRecord,
    LeftoverVerdict,
    PluginReport,
    PreflightProblemRecord,
    PreflightRecord,
    ServerRecord,
)
from harness.records.shape_proof import ShapeProofRecord
from harness.records.shards import MergedShard, ShardInfo
from harness.records.text import clean_json

SCHEMA_VERSION = 2
RUN_FILE = "run.json"

#: The pipelines' names, as keys of the per-pipeline maps (see :mod:`harness.tasks.pipelines`).
Pipeline = str


class RunRecordError(ValueError):
    """A run folder or record cannot be read; names the path (and the first bad field)."""


class _Model(Bounded, BaseModel):
    """Every run record type (:class:`harness.records.bounds.Bounded`): unknown fields,
    non-finite numbers and out-of-bounds shares and counts are refused, so every reader
    of ``run.json`` refuses an impossible record, naming the field."""


# --------------------------------------------------------------------------- engine


class Requested(_Model):
    """What a variant asked the engine for (the plan's view, before the engine answers)."""

    speculative_config: dict[str, Any] | None = None
    async_scheduling: bool | None = None


class PerRequestTotals(_Model):
    """Sums of the per-request counter shares (sequential requests only), counts."""

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    accepted_per_pos: list[float] = []


# --------------------------------------------------------------------------- comparisons


class TruncatedIds(_Model):
    """Question ids cut by ``max_tokens`` on each side of a comparison."""

    baseline: list[str] = []
    candidate: list[str] = []


class ComparisonResult(OutputMatchRecord):
    """One planned comparison ``baseline -> candidate`` on one task: output match (the
    inherited fields), answer-level agreement, the paired accuracy test under
    ``pipeline``, the noise reference, the divergences judged by the reference's
    distribution (``divergence``, None when not classified) and why the baseline was
    or was not rerun for noise (``rerun_reason``)."""

    model_config = ConfigDict(extra="forbid", frozen=False)  # a record entry, filled in place

    baseline: str
    candidate: str
    task: str
    pipeline: Pipeline
    paired: PairedRecord | None = None
    noise: NoiseRecord | None = None
    truncated: TruncatedIds | None = None
    answer_agreement: AnswerAgreementRecord | None = None
    divergence: DivergenceReportRecord | None = None
    rerun_reason: str | None = None


# --------------------------------------------------------------------------- tasks and variants


class RerunRecord(_Model):
    """A second pass of a task on the same server (``noise_runs: 2``) and its output
    match against the first pass (the noise)."""

    samples: str
    seconds: float
    error_count: int
    spec_decode: SpecDecodeRecord | None = None
    output_match_vs_first: OutputMatchRecord
    samples_sha256: str | None = None


class TaskResult(_Model):
    """What one task measured on one variant.

    Attributes:
        status: ``ran``.
        samples: the JSONL file, relative to the run folder.
        seconds: wall time of the task's requests.
        num_requests, error_count: counts; ``error_rate = error_count / num_requests``.
        accuracy, accuracy_ci, correct, scored, invalid_rate: per pipeline name
            (``strict-numeric``, ``flexible-numeric``): accuracy over scored requests
            with its 95% Wilson interval, counts, share of scored requests with no
            extractable answer.
        finish_reasons: count per finish reason (``stop``, ``length``, ...).
        truncated, truncated_rate, truncated_ids: successful requests cut by
            ``max_tokens`` (``finish_reason: length``): count, share of successful
            requests (None when none succeeded), question ids.
        stop_reasons: what ended each ``stop`` completion -> count (stop string, ``token <id>``, ``eos``).
        spec_decode, spec_decode_counters: acceptance figures and raw counter
            differences (speculative variants), or None with ``spec_decode_error``.
        mean_acceptance_length_ci, acceptance_rate_ci, per_position_acceptance_ci:
            95% bootstrap intervals from per-request counts, or None with
            ``acceptance_ci_reason``; ``acceptance_ci_method`` says how.
        rerun: the noise pass, when the task ran twice.
        samples_sha256: SHA-256 of the bytes of the samples file as written (``merge``
            refuses a shard whose file no longer matches); None in older records.
        engine_counters, engine_counters_error, shape: engine counters (or why not), a shape's proof.
    """

    status: Literal["ran"] = "ran"
    samples: str
    seconds: float
    num_requests: int
    error_count: int
    error_rate: float
    accuracy: dict[Pipeline, float | None]
    accuracy_ci: dict[Pipeline, Interval | None]
    correct: dict[Pipeline, int]
    scored: dict[Pipeline, int]
    invalid_rate: dict[Pipeline, float | None]
    finish_reasons: dict[str, int] = {}
    truncated: int = 0
    truncated_rate: float | None = None
    truncated_ids: list[str] = []
    stop_reasons: dict[str, int] = {}
    spec_decode: SpecDecodeRecord | None = None
    spec_decode_counters: SpecDecodeCountersRecord | None = None
    spec_decode_error: str | None = None
    mean_acceptance_length_ci: Interval | None = None
    acceptance_rate_ci: Interval | None = None
    per_position_acceptance_ci: list[Interval | None] | None = None
    acceptance_ci_method: str | None = None
    acceptance_ci_reason: str | None = None
    acceptance_ci_requests: int = 0
    per_request_totals: PerRequestTotals | None = None
    rerun: RerunRecord | None = None
    lm_eval: "LmEvalTaskRecord | None" = None
    samples_sha256: str | None = None
    engine_counters: EngineCountersRecord | None = None
    engine_counters_error: str | None = None
    shape: ShapeProofRecord | None = None

    _RATES = ("error_rate", "accuracy", "accuracy_ci", "invalid_rate", "truncated_rate")
    _WITHIN = (("error_count", "num_requests"), ("correct", "scored"), ("scored", "num_requests"),
               ("truncated", "num_requests"), ("finish_reasons", "num_requests"))


class LmEvalTaskRecord(_Model):
    """A ``kind: lm_eval`` task as lm-eval ran it (:mod:`harness.tasks.lm_eval_task`):
    the resolved task (name, split, documents, task version, lm-eval version), lm-eval's
    own aggregated results for it, the pipelines mapped to samples, and lm-eval's error."""

    task: dict[str, Any]
    results: dict[str, Any] | None = None
    pipelines: list[str] = []
    error: str | None = None


class StartupCheckRecord(_Model):
    """One start-up check's answer (a config's ``startup_rpc_checks``, called by
    :mod:`harness.engine.rpc_checks`; judged by the gate kind ``startup_rpc_check``).

    ``verdict``: ``passed`` (every worker answered None), ``failed`` (a worker's message),
    ``not_run`` (the worker extension cannot be imported by the servers' interpreter) or
    ``error`` (anything else: no dev mode, an unknown method, a malformed answer);
    ``detail`` one sentence for people; ``results`` what each worker returned."""

    name: str
    verdict: Literal["passed", "failed", "not_run", "error"]
    detail: str
    results: list[JsonValue] = []


class VariantResult(_Model):
    """One variant's server and tasks.

    ``argv`` is the exact server command that ran (model path filled in), ``log`` the
    server log relative to the run folder, ``startup_seconds`` the time to ``/health``;
    ``error`` says why the variant (or part of it) did not run, ``engine_error`` why
    the engine's facts could not be read.

    Cost (None in records written before evalrun kept it): ``evaluation_seconds`` from
    the first request to the last counter snapshot (each task's own is
    :attr:`TaskResult.seconds`), ``teardown_seconds`` the server's stop, ``devices`` the
    CUDA device ids the server was given (``CUDA_VISIBLE_DEVICES`` entries; empty on a
    CPU host); :attr:`gpu_seconds` is derived from them.

    ``build`` is the engine build of the variant's interpreter (package, version, commit;
    beside the run's ``provenance.build``, which names the ``--python`` / ``--build``
    default) and ``build_spec`` the build the variant names (``build:`` as written, None =
    the run's).
    """

    argv: list[str]
    build: EngineBuild | None = None
    build_spec: str | None = None
    env: dict[str, str] = {}
    fault: str | None = None
    requested: Requested = Requested()
    engine: EngineFactsRecord | None = None
    effective: EffectivenessRecord | None = None
    engine_error: str | None = None
    startup_seconds: float | None = None
    server: ServerRecord = ServerRecord()
    log: str | None = None
    error: str | None = None
    tasks: dict[str, TaskResult] = {}
    plugin: PluginReport | None = None
    model_runner: ModelRunnerRecord | None = None
    evaluation_seconds: float | None = None
    teardown_seconds: float | None = None
    devices: list[str] | None = None
    #: the start-up checks' answers, in the config's order; left out of ``run.json`` when
    #: the config names none (a record without checks is unchanged)
    startup_checks: list[StartupCheckRecord] | None = Field(default=None, exclude_if=lambda v: v is None)

    @property
    def gpu_seconds(self) -> float | None:
        """GPU-seconds the server held: (start-up + evaluation + teardown seconds) x
        number of devices; 0.0 on a CPU host; None when start-up, evaluation or devices
        were not recorded (a missing teardown counts as 0 s)."""
        if self.devices is None or self.startup_seconds is None or self.evaluation_seconds is None:
            return None
        held = self.startup_seconds + self.evaluation_seconds + (self.teardown_seconds or 0.0)
        return held * len(self.devices)


#: How a judge begins the detail of a gate it could not judge (NOT RUN): ``not run: <reason>``.
NOT_RUN_PREFIX = "not run: "


class GateResult(_Model):
    """The verdict of one planned gate (:mod:`harness.config.gates`).

    Attributes:
        id, kind, config, variant, task, baseline, op: as in the planned gate.
        observed: the measured value (fraction, tokens, count), or None.
        limit: the limit applied (after any sample-size margin), or None.
        passed: True / False, or None when it could not be judged (``NOT RUN``).
        detail: one sentence with the numbers, for the report.
        questions: question ids that explain a failure (flipped or diverged).
        expected_failure: the declared expected failure that names this gate
            (:class:`ExpectedFailureRecord`, applied or not), or None.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    kind: str
    config: str
    variant: str
    task: str | None = None
    baseline: str | None = None
    op: str
    observed: int | float | None = None  # int for counts (drafts), so they print as integers
    limit: int | float | None = None
    passed: bool | None = None
    detail: str
    questions: tuple[str, ...] = ()
    expected_failure: ExpectedFailureRecord | None = None

    @model_validator(mode="before")
    @classmethod
    def _drop_verdict(cls, data: JsonValue) -> JsonValue:
        """``verdict`` is written (computed from ``passed``) but never read back."""
        if isinstance(data, dict) and "verdict" in data:
            data = {k: v for k, v in data.items() if k != "verdict"}
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def verdict(self) -> str:
        """``PASS``, ``FAIL`` or ``NOT RUN``; for a gate whose declared expected failure
        applies to this build, ``XFAIL`` (it failed) or ``XPASS`` (it passed), as pytest's
        xfail; NOT RUN stays NOT RUN (:data:`VERDICTS`)."""
        if self.passed is not None and self.expected_failure is not None and self.expected_failure.applies:
            return "XPASS" if self.passed else "XFAIL"
        return {True: "PASS", False: "FAIL", None: "NOT RUN"}[self.passed]

    @property
    def not_run_reason(self) -> str | None:
        """Why a NOT RUN gate could not be judged: its detail after :data:`NOT_RUN_PREFIX`
        (every judge writes a NOT RUN detail as ``not run: <reason>``); None for a judged gate."""
        return self.detail.removeprefix(NOT_RUN_PREFIX) if self.passed is None else None

    @property
    def fails_run(self) -> bool:
        """The verdict fails the run (exit code 1), as pytest's rules: FAIL, and XPASS of a
        ``strict`` declaration; XFAIL and a non-strict XPASS do not."""
        v = self.verdict
        return v == "FAIL" or (v == "XPASS" and self.expected_failure is not None and self.expected_failure.strict)


class BaselineInfo(_Model):
    """Which stored baseline a config was gated against (see :mod:`harness.records.baselines`)."""

    path: str
    found: bool
    error: str | None = None
    source_run_id: str | None = None
    written_at: str | None = None
    config_sha256_matches: bool | None = None
    notes: list[str] = []


class SubsetWarning(_Model):
    """A task asking fewer questions than its threshold was presumably measured on (see
    :func:`harness.report.dry_run.subset_warnings`): accuracy fractions, counts."""

    task: str
    questions: int
    assumed_calibration_questions: int
    accuracy_threshold: float
    floor: float
    margin: float
    fair_floor: float
    message: str


class ConfigResult(_Model):
    """One config of the run: what was asked (name, file, model, form), the variants,
    comparisons and gate verdicts. ``pipeline`` is the config-level answer pipeline;
    a task may override it (its gates say which they used). ``config_warnings`` are the
    loader's warnings (:class:`~harness.config.schema.ConfigWarning`); ``list_path`` the
    model list file the config was read from; ``scoring`` the sampled verdict's
    scoring steps, one per scorer (:class:`ScoringRecord`); ``false_alarm_budget`` the config's (None: off)."""

    name: str
    path: str
    sha256: str
    form: str
    model: str
    model_path: str | None = None
    pipeline: Pipeline
    variants: dict[str, VariantResult] = {}
    comparisons: list[ComparisonResult] = []
    gates: list[GateResult] = []
    error: str | None = None
    baseline: BaselineInfo | None = None
    tasks: dict[str, dict[str, Any]] = {}
    subset_warnings: list[SubsetWarning] = []
    config_warnings: list[ConfigWarning] = []
    list_path: str | None = None
    scoring: list[ScoringRecord] = []
    false_alarm_budget: float | None = None

    def comparison(self, baseline: str, candidate: str, task: str) -> ComparisonResult | None:
        """The comparison of ``baseline -> candidate`` on ``task``, or None."""
        return next((c for c in self.comparisons
                     if (c.baseline, c.candidate, c.task) == (baseline, candidate, task)), None)


class RunErrorRecord(_Model):
    """An exception evalrun did not expect, kept in the record (``status: error``).

    Attributes:
        type: the exception's class, qualified (``builtins.TypeError``).
        message: ``str(exception)``.
        traceback: the formatted traceback (also in the run's ``logs/evalrun-error.log``).
        stage: where it happened: ``prepare`` (tasks and data), ``model``, ``server``,
            ``client`` (requests), ``judging``, ``scoring``, ``statistics``
            (comparisons), ``gates``, ``baseline``, ``writing`` (record, samples,
            reports) or ``run`` (outside those).
        config, variant, task: what was running (None when not inside one).
    """

    type: str
    message: str
    traceback: str | None = None
    stage: str | None = None
    config: str | None = None
    variant: str | None = None
    task: str | None = None

    def where(self) -> str:
        """``stage <s>, config <c>, variant <v>, task <t>`` for the parts that are known."""
        parts = [f"{k} {v}" for k, v in (("stage", self.stage), ("config", self.config),
                                          ("variant", self.variant), ("task", self.task)) if v]
        return ", ".join(parts) or "outside any stage"

    def describe(self) -> str:
        """One line for readers of the record: ``status error: <type>: <message> (<where>)``."""
        first = self.message.splitlines()[0][:300] if self.message else ""
        return f"status error: {self.type}: {first} ({self.where()})"
#: A run's outcome (:attr:`RunRecord.outcome`), one word per outcome.
Outcome = Literal["passed", "failed", "incomplete", "error", "interrupted", "running"]
#: Every outcome, and the word reports print for it (upper case).
OUTCOMES: tuple[str, ...] = ("passed", "failed", "incomplete", "error", "interrupted", "running")


def gates_passed(gates: "Iterable[GateResult]") -> bool | None:
    """The gates' joint verdict, as pytest's xfail rules count them: False when one fails the run
    (:attr:`GateResult.fails_run`: FAIL, strict XPASS), else None when one is NOT RUN (a gate the plan
    made report-only under the false-alarm budget aside: it is no gate), else True (PASS, XFAIL, XPASS)."""
    gs = list(gates)
    if any(g.fails_run for g in gs):
        return False
    if any(g.passed is None and not g.detail.startswith("report-only: ") for g in gs):
        return None
    return True


def outcome_word(outcome: str) -> str:
    """The word reports print for an outcome: ``PASSED``, ``FAILED``, ``INCOMPLETE``,
    ``ERROR``, ``INTERRUPTED``, ``RUNNING``."""
    return outcome.upper()


class RunRecord(_Model):
    """A whole run (``run.json``).

    Attributes:
        schema_version: :data:`SCHEMA_VERSION`.
        run_id: the run folder's name.
        status: ``running`` (being written), ``completed``, ``incomplete`` (something
            required could not run), ``interrupted`` (a signal stopped it) or ``error``
            (an exception evalrun did not expect ended it: ``error`` says what and where;
            everything measured before it is kept; exit code 2).
        passed: True when every gate passed, False when one failed, None otherwise.
        exit_code: 0 passed, 1 a gate failed, 2 could not run.
        provenance: :class:`Provenance`.
        configs: one :class:`ConfigResult` per config, in list order.
        preflight: the pre-launch argument check (None when it did not run).
        leftover_servers: servers of earlier runs found still running before this run.
        interrupted_by: the signal that stopped the run (``SIGINT``, ``SIGHUP``, ...).
        error: the unexpected exception of a run with status ``error``
            (:class:`RunErrorRecord`), else None.
        shard, merged_from: ``--shard i/n`` of this run; the shard runs a merged run
            combines (``evalrun merge``).
        merge_warnings: what a merge with ``--allow-mixed`` let through (builds or
            configs that differ between the shards), one sentence each.
        resumed: what this run took from an earlier attempt (``--resume``), else None.
        numerics_noise: the GPU-like logit noise its servers ran with
            (:class:`~harness.records.numerics_noise.NumericsNoiseRecord`); absent from
            ``run.json`` when off (docs/numerics.md).
    """

    schema_version: Literal[2] = SCHEMA_VERSION  # type: ignore[assignment]
    run_id: str
    status: Literal["running", "completed", "incomplete", "interrupted", "error"] = "running"
    passed: bool | None = None
    exit_code: int | None = None
    provenance: Provenance
    configs: list[ConfigResult] = []
    preflight: PreflightRecord | None = None
    leftover_servers: list[LeftoverServerRecord] = []
    interrupted_by: str | None = None
    error: RunErrorRecord | None = None
    shard: ShardInfo | None = None
    merged_from: list[MergedShard] = []
    merge_warnings: list[str] = []
    resumed: ResumedRecord | None = None
    numerics_noise: NumericsNoiseRecord | None = Field(default=None, exclude_if=lambda v: v is None)

    _path: Path | None = PrivateAttr(default=None)

    @property
    def path(self) -> Path | None:
        """The run folder this record was read from or written to (not stored)."""
        return self._path

    def config(self, name: str) -> ConfigResult | None:
        """The config result named ``name``, or None."""
        return next((c for c in self.configs if c.name == name), None)

    @property
    def outcome(self) -> "Outcome":
        """The run's one outcome word (:data:`OUTCOMES`), the single source of the
        verdict every report prints (terminal, Markdown, HTML, JUnit, diff, history):

        * ``running``: the record of a run still going (or killed without a word);
        * ``interrupted``: a stopping signal ended it (exit code 2);
        * ``error``: an unexpected error ended it (exit code 2);
        * ``failed``: a gate failed, or a strict declared expected failure passed (exit code 1);
        * ``passed``: every gate was judged and passed or is a declared expected failure
          (XFAIL, non-strict XPASS: pytest's xfail rules, :func:`gates_passed`) (exit code 0);
        * ``incomplete``: no gate failed, but not every gate could be judged (exit code
          2 when something required could not run; 0 when only optional tasks or
          engine facts declared ``not_reported`` are missing).
        """
        if self.status in ("running", "interrupted", "error"):
            return self.status
        if self.passed is False:
            return "failed"
        if self.passed is True and self.status == "completed":
            return "passed"
        return "incomplete"

    def gates(self) -> list[GateResult]:
        """Every gate verdict of every config, in order."""
        return [g for c in self.configs for g in c.gates]


RunRecord.model_rebuild()
TaskResult.model_rebuild()


# --------------------------------------------------------------------------- helpers


def record_json(record: RunRecord) -> str:
    """``run.json``'s text: the record as indented JSON, every string valid Unicode (a
    lone surrogate from an engine's answer becomes U+FFFD, :func:`harness.records.text.clean_json`;
    pydantic cannot encode it)."""

    return json.dumps(clean_json(record.model_dump(mode="json")), indent=2, ensure_ascii=False)


def write_run(run_dir: Path, record: RunRecord) -> Path:
    """Write ``run.json`` atomically and return its path.

    The JSON goes to a temporary file in the run folder, is flushed and fsynced, then
    renamed over ``run.json`` (:func:`harness.records.atomic.write_atomic`): a reader
    sees the previous record or the new one, never a partial file, and a failed write
    (full disk, read-only folder) leaves the previous record as it was and no
    temporary file.

    Raises:
        OSError: the folder or file cannot be written (the error names the path).
    """
    from harness.records.atomic import write_atomic  # noqa: PLC0415 - looked up per call (tests replace it)

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / RUN_FILE
    write_atomic(path, record_json(record) + "\n")
    record._path = run_dir
    return path


#: Schema 1 -> 2: evalrun's own pipelines were named like lm-eval's filters before 2.
V1_PIPELINE_NAMES = {"strict-match": "strict-numeric", "flexible-extract": "flexible-numeric"}


def rename_v1_pipelines(obj: JsonValue) -> JsonValue:
    """A copy of a schema-1 JSON value with :data:`V1_PIPELINE_NAMES` applied to every
    mapping key and every string value that is exactly a pipeline name (free text,
    such as a gate's detail, is left as written)."""
    if isinstance(obj, dict):
        return {V1_PIPELINE_NAMES.get(k, k): rename_v1_pipelines(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [rename_v1_pipelines(x) for x in obj]
    if isinstance(obj, str):
        return V1_PIPELINE_NAMES.get(obj, obj)
    return obj


def _migrate_v1(doc: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """Schema 1 -> 2: the same shape (written as an untyped dict by evalrun 0.1), with
    evalrun's pipelines renamed (:func:`rename_v1_pipelines`). A ``_path`` key some
    copies carry is dropped."""
    doc = rename_v1_pipelines(dict(doc))
    doc.pop("_path", None)
    doc["schema_version"] = 2
    return doc


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    loc = ".".join(str(x) for x in err["loc"])
    shown = err["type"] != "missing" and not isinstance(err.get("input"), (dict, list))
    return f"field {loc!r}: {err['msg']}" + (f" (got {err['input']!r})" if shown else "")


def parse_run(text: str, source: str | Path) -> RunRecord:
    """Parse the text of a ``run.json``.

    Args:
        text: the file's contents.
        source: the file's path, for error messages.

    Raises:
        RunRecordError: not JSON, not a run record, an unknown schema version, or a
            field that does not validate (the first one is named).
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise RunRecordError(f"{source}: not a JSON run record: {e}") from e
    if not isinstance(doc, dict) or "schema_version" not in doc:
        raise RunRecordError(f"{source}: not an evalrun run record (no schema_version)")
    v = doc["schema_version"]
    if v == 1:
        doc = _migrate_v1(doc)
    elif v != SCHEMA_VERSION:
        raise RunRecordError(f"{source}: schema_version {v!r}; this evalrun reads 1 and {SCHEMA_VERSION}")
    try:
        return RunRecord.model_validate(doc)
    except ValidationError as e:
        raise RunRecordError(f"{source}: not a valid run record: {_first_error(e)}") from e


def run_folders(root: str | Path) -> list[Path]:
    """The run folders directly under a results folder (those holding ``run.json``), each
    once: a symlink is followed, and a folder reached twice (a link beside its target, two
    links to one run) is listed once, by its resolved path, in the order of the first name
    that reaches it (names sorted).

    Returns:
        Resolved folder paths.
    """
    out: dict[Path, None] = {}
    for p in sorted(Path(root).glob(f"*/{RUN_FILE}")):
        out.setdefault(p.resolve().parent, None)  # a linked run.json too: its target's folder
    return list(out)


def load_run(path: str | Path) -> RunRecord:
    """Load a run record from a run folder or a ``run.json`` path.

    Raises:
        RunRecordError: the file is missing or unreadable, or see :func:`parse_run`.
    """
    p = Path(path)
    if p.is_dir():
        p = p / RUN_FILE
    try:
        text = read_text(p, MAX_RECORD_BYTES, "run record")
    except OSError as e:  # named: missing, not a regular file (a pipe never blocks), too large, not UTF-8
        raise RunRecordError(str(e) if isinstance(e, UnreadableFile) else f"{p}: cannot read run record: "
                             f"{e.strerror}") from e
    rec = parse_run(text, p)
    rec._path = p.parent
    return rec
