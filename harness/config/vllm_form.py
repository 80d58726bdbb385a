"""vLLM's GSM8K config form (``tests/evals/gsm8k/configs/*.yaml`` in vLLM), read unchanged
(:class:`VllmGsm8kConfig`, with evalrun's own settings in :class:`EvalrunBlock`), and the
variant matrix derived from it (:func:`from_vllm`): ``reference`` without the
``--speculative-config`` of ``server_args``, ``spec_sync`` (``--no-async-scheduling``) and
``spec_async`` (``--async-scheduling``) with it, and on request their V1-runner twins
(:func:`v1_twins`). An unknown top-level key is a warning
(:class:`~harness.config.schema.ConfigWarning`), as vLLM's test ignores it.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import Field

from harness.config.schema import (
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_NEAR_TIE_NATS,
    DEFAULT_REQUEST_TIMEOUT_SECONDS,
    DEFAULT_STARTUP_MAX_WAIT_SECONDS,
    DEFAULT_TOLERANCE,
    ArgsStr,
    ComparisonSpec,
    ConfigError,
    ConfigWarning,
    EnvDict,
    ExpectedFailureSpec,
    GateSpec,
    JsonValue,
    ModelConfig,
    RawValue,
    RpcCheckNames,
    SpeculativeConfigSpec,
    StrictModel,
    TaskSpec,
    VariantSpec,
)
from harness.config.server_args import (
    doubt_warnings,
    pop_speculative_config,
    refuse_owned_flags,
    speculative_warnings,
    split_args,
    typed_speculative_config,
)
from harness.config.types import Count, PositiveCount, PositiveSeconds, Seed, Temperature, TokenCount
from harness.config.vllm_args import (
    ASYNC_FLAG,
    SPEC_FLAG,
    async_scheduling_refusal,
    drop_bool_flag,
    pinned_async_scheduling,
)
from harness.config.yaml_load import KeyPath

_T = TypeVar("_T")


class EvalrunBlock(StrictModel):
    """evalrun's own settings inside a vLLM-form YAML (top-level key ``evalrun:``;
    vLLM's test ignores top-level keys it does not read). Validated like the native
    form: an unknown key is an error naming file, key path, line and nearest key.

    Attributes:
        max_concurrency: requests in flight per variant; the same as vLLM's top-level
            ``max_concurrency`` (write one of the two; default 100, vLLM's client's).
        request_timeout_seconds: total seconds per request attempt; the same as vLLM's
            top-level ``request_timeout_seconds`` (write one of the two; default 600).
        noise_runs: 2 runs each comparison's baseline variant twice, and
            every derived comparison's output match is judged against that rerun's
            output mismatches (docs/gates.md, "Output match against noise"); 1 = no rerun.
        noise_mismatch_rate: a stored baseline-vs-baseline mismatch rate (fraction of
            questions, e.g. from ``evalrun calibrate``); when set, no rerun is made
            (unless ``noise_runs: 2`` is written) and the rate is the noise.
        min_output_match: output match limit used when the measured noise is 0.
        max_accuracy_drop: largest paired accuracy drop reference -> spec variant.
        max_acceptance_length_drop: largest mean acceptance length drop spec_sync -> spec_async.
        alpha: one-sided significance level of the paired accuracy test.
        output_match_alpha: one-sided level of the output-match test against noise
            (default 0.001: a broken build's excess of mismatches is large, while a
            correct build with 9 such gates false-fails with probability at most
            1 - 0.999^9, about 0.9%).
        expected_discordance: assumed discordance for the dry run's power statement
            and family-wise false-fail probability.
        multiple_testing: ``holm`` or ``none`` (see :class:`GateSpec`).
        near_tie_nats: see :class:`ComparisonSpec` (default :data:`DEFAULT_NEAR_TIE_NATS`).
            With ``noise_runs`` not written, the reference is rerun only when divergences
            are left that its distribution cannot judge.
        v1_runner_variants: also run ``reference_v1``, ``spec_sync_v1`` and
            ``spec_async_v1`` on vLLM's V1 model runner (``model_runner: v1``) with the
            same three comparisons among them, beside the default-runner variants (on
            CUDA vLLM defaults to V2): covers the V1 path where it remains in use, at
            the cost of three more passes of every task.
        position_acceptance_rtol, position_acceptance_alpha: the per-position acceptance
            gates' relative tolerance (default 0.05; None: off) and level (see
            :class:`GateSpec`).
        model_runner: ``v1`` / ``v2`` for every derived variant (see
            :class:`VariantSpec`): e.g. ``v1`` where vLLM's V2 runner lacks the drafter
            (``ngram`` on vLLM's main branch), so that the reference does not run V2
            while the speculative variants fall back to V1. None: vLLM's default.
        expected_failures: known engine bugs declared as expected failures (see
            :class:`~harness.config.schema.ExpectedFailureSpec`).
        tasks: more tasks, written as the native form's ``tasks`` (task name ->
            :class:`~harness.config.schema.TaskSpec`, e.g. a traffic shape,
            ``kind: shape``), planned beside the form's GSM8K task (named ``gsm8k``, so
            that name is refused here) on every derived variant, and gated by the
            derived comparisons as the GSM8K task is. vLLM's test ignores them.
        false_alarm_budget: see :class:`~harness.config.schema.ModelConfig` (default 0.01).
    """

    max_concurrency: PositiveCount | None = None
    request_timeout_seconds: PositiveSeconds | None = None
    noise_runs: int | None = Field(default=None, ge=1, le=2)
    noise_mismatch_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    min_output_match: float | None = Field(default=1.0, ge=0.0, le=1.0)
    max_accuracy_drop: float | None = Field(default=0.05, ge=0.0, le=1.0)
    max_acceptance_length_drop: float | None = Field(default=0.1, ge=0.0)
    alpha: float = Field(default=0.05, gt=0.0, lt=1.0)
    output_match_alpha: float = Field(default=0.001, gt=0.0, lt=1.0)
    expected_discordance: float = Field(default=0.05, gt=0.0, le=1.0)
    multiple_testing: Literal["none", "holm"] = "none"
    near_tie_nats: float | None = Field(default=DEFAULT_NEAR_TIE_NATS, ge=0.0)
    v1_runner_variants: bool = False
    model_runner: Literal["v1", "v2"] | None = None
    position_acceptance_rtol: float | None = Field(default=0.05, ge=0.0, lt=1.0)
    position_acceptance_alpha: float = Field(default=0.05, gt=0.0, lt=1.0)
    expected_failures: list[ExpectedFailureSpec] = Field(default_factory=list)
    tasks: dict[str, TaskSpec] = Field(default_factory=dict)
    false_alarm_budget: float | None = Field(default=0.01, gt=0.0, lt=1.0)

    def effective_noise_runs(self) -> int:
        """2 unless a stored ``noise_mismatch_rate`` replaces the rerun (or 1 is written)."""
        if self.noise_runs is not None:
            return self.noise_runs
        return 1 if self.noise_mismatch_rate is not None else 2


class VllmGsm8kConfig(StrictModel):
    """vLLM's GSM8K config form (``tests/evals/gsm8k/configs/*.yaml``), read unchanged.

    Every key vLLM's current ``test_gsm8k_correctness.py`` reads, with its defaults:
    tolerance 0.08 (absolute), max_tokens 256, temperature 0, seed 42 (``seed: null``: no
    per-request seed is sent; ``temperature: null``: none is sent, the server's default applies),
    ``use_chat_completions`` false, ``gen_prefix`` "", ``max_concurrency`` none (aiohttp's
    limit of 100), ``request_timeout_seconds`` 600, ``rocm_request_timeout_seconds``
    (used instead on ROCm only, as vLLM's test does), ``startup_max_wait_seconds`` 1200
    (also sent to the server as ``VLLM_ENGINE_READY_TIMEOUT_S``), ``min_acceptance_length``,
    ``startup_rpc_checks`` (the worker extension's checks, judged by the gate ``startup_rpc_check``).
    vLLM requires ``num_questions`` and ``num_fewshot``; evalrun defaults them to 1319 and 5.
    A top-level key not listed is a warning (:func:`vllm_form_warnings`), never an error,
    because vLLM's test reads the YAML as a plain dict and ignores it.
    """

    model_name: str
    accuracy_threshold: float = Field(ge=0.0, le=1.0)
    tolerance: float = Field(default=DEFAULT_TOLERANCE, ge=0.0, le=1.0)
    num_questions: PositiveCount = 1319
    num_fewshot: Count = 5
    server_args: ArgsStr = ""
    env: EnvDict = Field(default_factory=dict)
    startup_max_wait_seconds: PositiveSeconds = DEFAULT_STARTUP_MAX_WAIT_SECONDS
    min_acceptance_length: float | None = Field(default=None, ge=1.0)
    max_tokens: TokenCount = 256
    temperature: Temperature | None = 0.0
    seed: Seed | None = 42
    use_chat_completions: bool = False
    gen_prefix: str = ""
    max_concurrency: PositiveCount | None = None
    request_timeout_seconds: PositiveSeconds | None = None
    rocm_request_timeout_seconds: PositiveSeconds | None = None
    calibration_questions: PositiveCount | None = None
    startup_rpc_checks: RpcCheckNames = Field(default_factory=list)
    evalrun: EvalrunBlock = Field(default_factory=EvalrunBlock)



def vllm_form_warnings(data: dict[str, RawValue], path: Path, lines: dict[KeyPath, int]
                       ) -> tuple[dict[str, RawValue], list[ConfigWarning]]:
    """Split a vLLM-form mapping into the keys evalrun reads and warnings for the rest.

    vLLM's test reads the YAML as a plain dict and ignores keys it does not use (e.g.
    ``max_model_len`` in two configs of its default list), so evalrun does the same and
    says so.

    Returns:
        (the mapping without unknown top-level keys, one :class:`ConfigWarning` per
        unknown key naming the file, the line, the key and the nearest known key).
    """
    known = list(VllmGsm8kConfig.model_fields)
    kept: dict[str, RawValue] = {}
    warns: list[ConfigWarning] = []
    for k, v in data.items():
        if k in known:
            kept[k] = v
            continue
        near = difflib.get_close_matches(str(k), known, n=1, cutoff=0.6)
        line = lines.get((k,))
        where = f"{path}:{line}" if line else f"{path}"
        hint = f"; did you mean '{near[0]}'?" if near else ""
        warns.append(ConfigWarning(
            file=str(path), line=line, key=str(k), nearest=near[0] if near else None,
            message=f"{where}: unknown key '{k}' ignored, as vLLM's GSM8K test ignores it{hint}",
        ))
    return kept, warns



def _one_of(c: VllmGsm8kConfig, key: Literal["request_timeout_seconds", "max_concurrency"], default: _T,
            path: Path, lines: dict[KeyPath, int]) -> _T:
    """A setting written at top level (vLLM's key) or in the ``evalrun:`` block, not both."""
    top, ev = getattr(c, key), getattr(c.evalrun, key)
    if top is not None and ev is not None:
        raise ConfigError(
            f"{path}:{lines.get((key,), '?')}: key '{key}' is also written as 'evalrun.{key}' "
            f"(line {lines.get(('evalrun', key), '?')}); keep one (the top-level key is vLLM's)"
        )
    return top if top is not None else ev if ev is not None else default


def _vllm_variants(c: VllmGsm8kConfig, argv: list[str], spec: SpeculativeConfigSpec | None,
                   raw_spec: dict[str, JsonValue] | None, path: Path, line: int | None,
                   warns: list[ConfigWarning]) -> tuple[list[str], dict[str, VariantSpec], tuple[ComparisonSpec, ...]]:
    """The variants and comparisons derived from a vLLM-form config: the reference alone
    without a speculative config; else reference, spec_sync and spec_async (fewer when
    ``server_args`` pins the async scheduling, with a warning appended to ``warns``), and
    their V1-runner twins when asked. Returns the server arguments (the pin removed),
    the variants and the comparisons."""
    at = f"{path}:{line}" if line else f"{path}"
    pin, pin_items = pinned_async_scheduling(argv)
    ev = c.evalrun
    if spec is None:
        variants = {"reference": VariantSpec()}
        comparisons: tuple[ComparisonSpec, ...] = ()
    else:
        # a pin written in server_args moves to the variants: the reference keeps it, and
        # only the speculative variant consistent with it is derived
        argv = drop_bool_flag(argv, ASYNC_FLAG)
        refusal = async_scheduling_refusal(raw_spec or {})
        variants = {"reference": VariantSpec(async_scheduling=pin)}
        if pin is not True:
            variants["spec_sync"] = VariantSpec(speculative_config=spec, async_scheduling=False)
        if pin is not False:
            variants["spec_async"] = VariantSpec(speculative_config=spec, async_scheduling=True,
                                                 not_applicable=refusal)
        if pin is not None:
            kept = "spec_async" if pin else "spec_sync"
            dropped = "spec_sync" if pin else "spec_async"
            warns.append(ConfigWarning(
                file=str(path), line=line, key="server_args." + pin_items[-1], nearest=None,
                message=(f"{at}: server_args pins {' '.join(pin_items)}: only {kept} is derived beside "
                         f"reference (no {dropped}, and no comparison with it); the reference keeps the pin"),
            ))
        common: dict[str, Any] = dict(
            min_output_match=ev.min_output_match, alpha=ev.alpha, output_match_alpha=ev.output_match_alpha,
            expected_discordance=ev.expected_discordance,
            noise_runs=ev.effective_noise_runs(), noise_mismatch_rate=ev.noise_mismatch_rate,
            near_tie_nats=ev.near_tie_nats, noise_runs_when="always" if ev.noise_runs is not None else "unexplained",
        )
        comps = [
            ComparisonSpec(baseline="reference", candidate="spec_async", max_accuracy_drop=ev.max_accuracy_drop,
                           **common),
            ComparisonSpec(baseline="reference", candidate="spec_sync", max_accuracy_drop=ev.max_accuracy_drop,
                           **common),
            ComparisonSpec(
                baseline="spec_sync",
                candidate="spec_async",
                max_accuracy_drop=None,
                max_acceptance_length_drop=ev.max_acceptance_length_drop,
                **common,
            ),
        ]
        comparisons = tuple(x for x in comps if x.baseline in variants and x.candidate in variants)
        if ev.model_runner is not None:
            variants = {k: v.model_copy(update={"model_runner": ev.model_runner}) for k, v in variants.items()}
        if ev.v1_runner_variants:  # the same variants and comparisons on vLLM's V1 model runner
            variants, comparisons = v1_twins(variants, comparisons)
    return argv, variants, comparisons


#: Suffix of a variant's V1-runner twin (:func:`v1_twins`).
V1_TWIN_SUFFIX = "_v1"


def v1_twins(variants: dict[str, VariantSpec], comparisons: tuple[ComparisonSpec, ...]
             ) -> tuple[dict[str, VariantSpec], tuple[ComparisonSpec, ...]]:
    """``variants`` and ``comparisons`` plus the V1-runner twin of every variant that does
    not already ask for V1 (``<name>_v1``, ``model_runner: v1``, otherwise the same) and
    of every comparison between two twinned variants (between their twins). A variant
    that already has a twin of that name keeps it."""
    out = dict(variants)
    twinned = [n for n, v in variants.items() if v.model_runner != "v1" and n + V1_TWIN_SUFFIX not in variants]
    for name in twinned:
        out[name + V1_TWIN_SUFFIX] = variants[name].model_copy(update={"model_runner": "v1"})
    extra = tuple(x.model_copy(update={"baseline": x.baseline + V1_TWIN_SUFFIX,
                                       "candidate": x.candidate + V1_TWIN_SUFFIX})
                  for x in comparisons if x.baseline in twinned and x.candidate in twinned)
    return out, comparisons + extra


def with_v1_runner_variants(config: ModelConfig) -> ModelConfig:
    """``config`` with the V1-runner twins of :func:`v1_twins` (``--v1-runner-variants``):
    the nightly runs the engine's default model runner, and covering vLLM's V1 runner too
    is an opt-in that costs one more pass of every task per twin."""
    variants, comparisons = v1_twins(dict(config.variants), config.comparisons)
    return config.model_copy(update={"variants": variants, "comparisons": comparisons})


#: The name of the GSM8K task a vLLM-form config plans (its ``evalrun.tasks`` come after it).
GSM8K_TASK = "gsm8k"


def from_vllm(c: VllmGsm8kConfig, path: Path, sha: str, lines: dict[KeyPath, int] | None = None,
               warnings: list[ConfigWarning] | None = None) -> ModelConfig:
    """A vLLM-form config (``c``, read from ``path``) as a :class:`ModelConfig`: the
    server arguments without the speculative config, the GSM8K task (then the
    ``evalrun.tasks``), the gates, and the variants and comparisons of :func:`_vllm_variants`.

    Raises:
        ConfigError: an owned flag, a speculative config that cannot be read, or an
            ``evalrun.tasks`` entry named ``gsm8k``.
    """
    lines = lines or {}
    warns = list(warnings or [])
    line = lines.get(("server_args",))
    at = f"{path}:{line}" if line else f"{path}"
    argv = split_args(c.server_args, f"{path}: server_args")
    refuse_owned_flags(argv, f"{at}: server_args")
    argv, raw_spec = pop_speculative_config(argv, f"{at}: server_args")
    warns += doubt_warnings(argv, path, line)
    spec = typed_speculative_config(raw_spec, f"{at}: server_args") if raw_spec is not None else None
    if spec is not None:
        warns += speculative_warnings(spec, path, line, f"server_args.{SPEC_FLAG}")
    task = TaskSpec(
        kind="gsm8k",
        num_questions=c.num_questions,
        num_fewshot=c.num_fewshot,
        max_tokens=c.max_tokens,
        temperature=c.temperature,
        seed=c.seed,
        gen_prefix=c.gen_prefix,
        use_chat_completions=c.use_chat_completions,
        vllm_rules=True,  # vLLM's stop strings, answer rule and client for its own floor (docs/vllm-parity.md)
    )
    ev = c.evalrun
    if GSM8K_TASK in ev.tasks:
        raise ConfigError(f"{path}:{lines.get(('evalrun', 'tasks', GSM8K_TASK), '?')}: key "
                          f"'evalrun.tasks.{GSM8K_TASK}': that is the name of the GSM8K task the vLLM form "
                          "plans from its top-level keys; give the extra task another name")
    gates = GateSpec(
        accuracy_threshold=c.accuracy_threshold,
        tolerance=c.tolerance,
        calibration_questions=c.calibration_questions,
        min_acceptance_length=c.min_acceptance_length,
        multiple_testing=ev.multiple_testing,
        position_acceptance_rtol=ev.position_acceptance_rtol,
        position_acceptance_alpha=ev.position_acceptance_alpha,
    )
    argv, variants, comparisons = _vllm_variants(c, argv, spec, raw_spec, path, line, warns)
    return ModelConfig(
        name=path.stem,
        path=path.resolve(),
        sha256=sha,
        form="vllm-gsm8k",
        model=c.model_name,
        server_args=tuple(argv),
        env=dict(c.env),
        startup_max_wait_seconds=c.startup_max_wait_seconds,
        request_timeout_seconds=_one_of(c, "request_timeout_seconds", DEFAULT_REQUEST_TIMEOUT_SECONDS, path, lines),
        rocm_request_timeout_seconds=c.rocm_request_timeout_seconds,
        max_concurrency=_one_of(c, "max_concurrency", DEFAULT_MAX_CONCURRENCY, path, lines),
        trust_remote_code=True,
        warnings=tuple(warns),
        variants=variants,
        tasks={GSM8K_TASK: task, **ev.tasks},
        gates=gates,
        comparisons=comparisons, expected_failures=tuple(c.evalrun.expected_failures),
        startup_rpc_checks=tuple(c.startup_rpc_checks), false_alarm_budget=ev.false_alarm_budget,
    )

