"""Configs: YAML files validated into frozen, typed objects; model lists of configs.

Two forms are read (see docs/configuration.md):

* **vLLM's GSM8K form**, unchanged (``tests/evals/gsm8k/configs/*.yaml`` in vLLM):
  ``model_name``, ``accuracy_threshold``, ``server_args``, ... When ``server_args``
  holds ``--speculative-config``, the variant matrix is derived: ``reference``
  (without it), ``spec_sync`` (``--no-async-scheduling``), ``spec_async``
  (``--async-scheduling``).
* **the native form**, recognised by a top-level ``variants`` key, with explicit
  variants, tasks, comparisons and gates.

Both load into :class:`ModelConfig`. Every error is a :class:`ConfigError` that names
the file, the key path, the line (from the YAML node marks) and, for unknown keys,
the nearest valid key.
"""

from __future__ import annotations

import difflib
import hashlib
import shlex
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from harness.config.checks import ConfigCheckError, check_config  # names that become paths, limits that cannot fail
from harness.config.yaml_load import YamlCostError, load_yaml
from harness.config.vllm_args import (
    ASYNC_FLAG,
    ArgsError,
    async_scheduling_refusal,
    drop_bool_flag,
    hits_of,
    pinned_async_scheduling,
    pop_json_flag,
)
from harness.config.vllm_parser import current_table, speculative_doubts
from harness.faults.plugin import known_faults  # standard library only

_M = TypeVar("_M", bound=BaseModel)

#: Folder of the repository that holds ``configs/`` and ``model_lists/``.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
CONFIGS_DIR = PROJECT_ROOT / "configs"
MODEL_LISTS_DIR = PROJECT_ROOT / "model_lists"

#: Default of vLLM's GSM8K test (``tests/evals/gsm8k/test_gsm8k_correctness.py``):
#: absolute tolerance below ``accuracy_threshold``.
DEFAULT_TOLERANCE = 0.08
#: Default start-up wait of vLLM's GSM8K test (``DEFAULT_STARTUP_MAX_WAIT_SECONDS`` in
#: ``tests/evals/gsm8k/test_gsm8k_correctness.py``), in seconds.
DEFAULT_STARTUP_MAX_WAIT_SECONDS = 1200
#: Default request timeout of vLLM's GSM8K test and evalrun, in seconds.
DEFAULT_REQUEST_TIMEOUT_SECONDS = 600
#: Requests in flight per variant by default: vLLM's gsm8k_eval.py without
#: ``--max-concurrency`` is bounded only by aiohttp's ``TCPConnector`` limit of 100.
DEFAULT_MAX_CONCURRENCY = 100
#: Largest log-probability gap (nats) between the reference's own token and the candidate's
#: at a first divergence that is still a benign near-tie (harness.analysis.divergence).
#: 0.5: above the 0.19-nat tie the trained tiny model flips between reference and MTP in
#: bf16 on the CPU (gsm8k/test/2), with margin below the >= 1.75-nat gaps at every other
#: position of that completion; a 0.5-nat gap is a probability ratio of e^0.5 = 1.65
#: between the two tokens, which a kernel's rounding can cross, while a wrong state puts
#: the candidate's token several nats down. Measure it on a known-good build with
#: ``evalrun calibrate`` and set ``near_tie_nats`` per comparison.
DEFAULT_NEAR_TIE_NATS = 0.5


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _env_to_str(v: Any) -> Any:
    """Environment values are strings: an integer (YAML's plain ``1``) becomes its text;
    any other non-string (a list, a mapping, a float, a boolean, null) is left for the
    ``str`` type to refuse, naming the key (:func:`check_yaml` refuses them first, with
    their line)."""
    if isinstance(v, dict):
        return {str(k): str(x) if _is_int(x) else x for k, x in v.items()}
    return v


#: An environment mapping of strings; values written as plain decimal integers in YAML
#: become their text (other non-strings are refused).
EnvDict = Annotated[dict[str, str], BeforeValidator(_env_to_str)]


def _args_to_str(v: Any) -> Any:
    """``server_args`` may be a shell-like string or a list of arguments; a list is
    joined with :func:`shlex.join`, so it splits back into exactly its items. An item
    must be a string or an integer (its text).

    Raises:
        ValueError: an item of another type (a list, a mapping, a float, a boolean, null).
    """
    if isinstance(v, list):
        bad = [(i, x) for i, x in enumerate(v) if not (isinstance(x, str) or _is_int(x))]
        if bad:
            i, x = bad[0]
            raise ValueError(f"item {i} is {type(x).__name__} {x!r}: each argument must be a string or an integer")
        return shlex.join(str(x) for x in v)
    return v


#: Server arguments: a string split like a shell, or a YAML list of arguments.
ArgsStr = Annotated[str, BeforeValidator(_args_to_str)]


class ConfigError(ValueError):
    """A config, model list or key is invalid. The message names file, key and line."""


class _Frozen(BaseModel):
    """Frozen, unknown keys refused, and strict: a value of the wrong type is refused, never
    converted (``accuracy_threshold: "0.9"`` or ``true``, ``num_questions: 5.5``); an integer
    is accepted where a float is asked."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


# --------------------------------------------------------------------------- native form


class TaskSpec(_Frozen):
    """One task of a config.

    Attributes:
        kind: task implementation; ``gsm8k`` (real GSM8K, test split with few-shot
            examples from train) or ``synthetic`` (evalrun's generated arithmetic set).
        num_questions: questions taken from the start of the test split (None = all).
            Data holding fewer is refused before any server starts, unless
            ``num_questions_up_to`` is true ("up to N": then all there are are asked).
        num_questions_up_to: ``num_questions`` is a maximum, not a count.
        num_fewshot: few-shot examples prepended to each prompt.
        max_tokens: completion budget per request, in tokens.
        temperature: sampling temperature (0 = greedy). None: not sent, the server's
            default applies (the model's generation config; vLLM's ``gsm8k_eval.py``
            omits a None temperature). A task that samples (temperature > 0 or None,
            :attr:`samples`) gets no token-sequence output-match gate.
        seed: per-request sampling seed sent to the server (``seed`` of the request
            body); None: no seed is sent, as vLLM's ``gsm8k_eval.py`` does for
            ``seed: null`` (for engines that refuse per-request seeds).
        required: when False, a task whose data cannot be had is reported as
            ``not run`` (loudly, and never as passed) instead of stopping the run.
        lm_eval_task: kind ``lm_eval`` only: the lm-eval task name (``gsm8k_cot``,
            ``mmlu``, or one defined in ``lm_eval_include_path``); see
            :mod:`harness.tasks.lm_eval_task`. ``num_questions`` is lm-eval's ``limit``,
            ``num_fewshot`` its ``num_fewshot``, ``max_tokens`` its ``max_gen_toks``.
        lm_eval_include_path: kind ``lm_eval`` only: a folder of lm-eval task YAMLs
            (relative to the config file), searched instead of lm-eval's own tasks.
        gates: per-task overrides of the config's ``gates`` (only the keys written
            here change; e.g. ``{accuracy_threshold: null}`` drops the floor for this
            task). See :meth:`ModelConfig.gates_for`.
        gen_prefix: kind ``gsm8k`` only: text written right after ``Answer:`` in every
            few-shot example and in the question (vLLM's ``gen_prefix``, e.g. an empty
            thinking block to skip reasoning); default none.
        use_chat_completions: kind ``gsm8k`` only: send the same few-shot prompt as one
            user message to ``/v1/chat/completions`` with vLLM's stop strings
            (``Question``, ``Assistant:``, ``<|separator|>``), as vLLM's ``gsm8k_eval.py``
            does; default ``/v1/completions`` with evalrun's few-shot delimiter.
    """

    kind: Literal["gsm8k", "synthetic", "lm_eval"] = "gsm8k"
    num_questions: int | None = Field(default=None, ge=1)
    num_questions_up_to: bool = False
    num_fewshot: int = Field(default=5, ge=0)
    max_tokens: int = Field(default=256, ge=1)
    temperature: float | None = Field(default=0.0, ge=0.0)
    seed: int | None = 42
    required: bool = True
    gates: "GateSpec | None" = None
    lm_eval_task: str | None = None
    lm_eval_include_path: str | None = None
    gen_prefix: str = ""
    use_chat_completions: bool = False

    @model_validator(mode="after")
    def _lm_eval_needs_a_task(self) -> "TaskSpec":
        if self.kind != "gsm8k" and (self.gen_prefix or self.use_chat_completions):
            raise ValueError("gen_prefix / use_chat_completions are only for kind gsm8k")
        if self.kind == "lm_eval" and (self.seed is None or self.temperature is None):
            raise ValueError("kind lm_eval needs a seed and a temperature (lm-eval seeds its own sampling "
                             "with them); seed: null / temperature: null are for kinds gsm8k and synthetic")
        if self.kind == "lm_eval" and not self.lm_eval_task:
            raise ValueError("kind lm_eval needs lm_eval_task (an lm-eval task name, e.g. gsm8k_cot)")
        if self.kind != "lm_eval" and (self.lm_eval_task or self.lm_eval_include_path):
            raise ValueError("lm_eval_task / lm_eval_include_path are only for kind lm_eval")
        return self

    @property
    def samples(self) -> bool:
        """The task samples: temperature above 0, or not sent (None: the server's default,
        which may sample). Two correct samplers draw different tokens, so a sampling task
        gets no token-sequence output-match gate (:func:`harness.config.gates.plan_gates`)."""
        return self.temperature is None or self.temperature > 0


class GateSpec(_Frozen):
    """Per-variant absolute gates (they apply to every variant of the config).

    Attributes:
        accuracy_threshold: expected accuracy (fraction); floor = threshold - tolerance.
            None disables the floor gate.
        tolerance: absolute allowance below the threshold (vLLM default 0.08).
        calibration_questions: number of questions the threshold was measured on
            (None = unknown); used by the statistics to widen the floor for smaller runs.
        accuracy_pipeline: which answer pipeline the accuracy gates read: evalrun's
            number-aware ``strict-numeric`` / ``flexible-numeric`` (default), or
            lm-eval's exact ``strict-match`` / ``flexible-extract`` (needs lm-eval), or for
            a ``kind: lm_eval`` task one of its pipelines (``acc``, ``strict-match``, ...,
            see :mod:`harness.tasks.lm_eval_task`). A pipeline a task does not compute
            makes its accuracy gates NOT RUN (never passed).
        min_acceptance_length: floor of mean acceptance length for speculative
            variants (None disables).
        max_error_rate: largest allowed share of failed requests (default 0).
        baseline_max_accuracy_drop: largest allowed accuracy drop of a variant since
            the stored baseline (``--baseline``; fraction); None disables.
        baseline_max_acceptance_length_drop: largest allowed drop of mean acceptance
            length since the stored baseline (tokens); None disables.
        baseline_alpha: significance level of the one-sided test (paired McNemar, or
            Fisher's exact test without per-question data) against the baseline.
        multiple_testing: ``holm`` judges the significance part of the config's
            ``max_accuracy_drop`` gates with Holm's step-down correction (Holm 1979,
            Scand. J. Statist. 6:65-70), so that their family-wise false-fail
            probability is at most alpha; ``none`` (default) tests each at its alpha.
        max_truncation_rate: largest allowed share of successful completions cut by
            ``max_tokens`` (``finish_reason: length``), per variant and task; None
            (default) disables the gate (the share is recorded and shown either way).
        position_acceptance_rtol: relative tolerance of the per-position acceptance
            gates (``max_position_acceptance_drop`` between two speculative variants with
            the same speculative config, ``baseline_position_acceptance_drop`` against the
            stored baseline): a draft position fails when its acceptance rate
            (accepted_per_pos[i] / drafts) is below ``(1 - rtol)`` times the other side's
            and the drop is significant; default 0.05, vLLM's own spec-decode acceptance
            tests' ``DEFAULT_RTOL``. None disables both gates.
        position_acceptance_alpha: one-sided level of the per-position test (pooled
            two-proportion z test on the counts, Holm-corrected across the positions of
            one gate).
    """

    accuracy_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    tolerance: float = Field(default=DEFAULT_TOLERANCE, ge=0.0, le=1.0)
    calibration_questions: int | None = Field(default=None, ge=1)
    accuracy_pipeline: str = Field(default="flexible-numeric", min_length=1)
    min_acceptance_length: float | None = Field(default=None, ge=1.0)
    max_error_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    baseline_max_accuracy_drop: float | None = Field(default=0.05, ge=0.0, le=1.0)
    baseline_max_acceptance_length_drop: float | None = Field(default=0.1, ge=0.0)
    baseline_alpha: float = Field(default=0.05, gt=0.0, lt=1.0)
    multiple_testing: Literal["none", "holm"] = "none"
    max_truncation_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    position_acceptance_rtol: float | None = Field(default=0.05, ge=0.0, lt=1.0)
    position_acceptance_alpha: float = Field(default=0.05, gt=0.0, lt=1.0)


TaskSpec.model_rebuild()


class ComparisonSpec(_Frozen):
    """A gated comparison of a candidate variant against a baseline variant.

    Attributes:
        baseline: name of the variant compared against (usually ``reference``).
        candidate: name of the variant under test.
        tasks: the tasks whose comparison is gated (None = every task); the
            comparison is recorded for every task either way.
        max_accuracy_drop: largest allowed accuracy drop (fraction, baseline minus
            candidate) on the paired questions; None disables.
        min_output_match: smallest allowed share of questions with identical completion
            token ids; None disables.
        max_acceptance_length_drop: largest allowed drop of mean acceptance length
            (tokens); only for two speculative variants; None disables.
        alpha: significance level of the one-sided paired test (McNemar) that also
            fails the accuracy gate when the candidate is significantly worse.
        expected_discordance: assumed share of questions answered right by exactly
            one of the two variants, used only by ``--dry-run`` to state the smallest
            accuracy drop the paired test detects (:func:`harness.analysis.stats.min_detectable_drop`).
        noise_runs: 2 runs the baseline variant's tasks twice on the same server; the
            baseline-vs-baseline output mismatches are the noise the candidate's
            output mismatches are judged against (docs/gates.md). 1 = no rerun.
        noise_mismatch_rate: a stored baseline-vs-baseline output mismatch rate
            (fraction of questions, e.g. from ``evalrun calibrate``) used as the noise
            when the baseline is not rerun in this run; None = none.
        output_match_alpha: significance level of the output-match test against noise
            (None = ``alpha``).
        near_tie_nats: a divergence is explained when the reference ranks the
            candidate's token at most this many nats below its own
            (:data:`DEFAULT_NEAR_TIE_NATS`); the output-match gate counts the
            unexplained ones. None: no classification (every mismatch counts).
        noise_runs_when: ``always`` reruns the baseline (``noise_runs: 2``) in any case;
            ``unexplained`` only when divergences are left that the reference's
            distribution cannot judge (docs/gates.md, "Near ties").
        allow_mixed_runners: the two variants may run different model runners (V1 /
            V2); otherwise that fails ``variant_effective``.
    """

    baseline: str
    candidate: str
    tasks: list[str] | None = None
    max_accuracy_drop: float | None = Field(default=0.05, ge=0.0, le=1.0)
    min_output_match: float | None = Field(default=1.0, ge=0.0, le=1.0)
    max_acceptance_length_drop: float | None = Field(default=None, ge=0.0)
    alpha: float = Field(default=0.05, gt=0.0, lt=1.0)
    expected_discordance: float = Field(default=0.05, gt=0.0, le=1.0)
    noise_runs: int = Field(default=1, ge=1, le=2)
    noise_mismatch_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    output_match_alpha: float | None = Field(default=None, gt=0.0, lt=1.0)
    near_tie_nats: float | None = Field(default=DEFAULT_NEAR_TIE_NATS, ge=0.0)
    noise_runs_when: Literal["always", "unexplained"] = "always"
    allow_mixed_runners: bool = False


class SpeculativeConfigSpec(BaseModel):
    """A variant's speculative config: the keys of vLLM's ``SpeculativeConfig``
    (``vllm/config/speculative.py``, vLLM 0.32) that a user sets, typed.

    Sent to the server as ``--speculative-config '<JSON>'`` with only the keys written
    in the config (:meth:`as_dict`). A key not typed here (vLLM adds fields between
    releases, e.g. ``dspark_budget_frac``) is passed to vLLM unchanged and checked by
    vLLM's own parser before launch (:mod:`harness.engine.preflight`); the loader
    records a warning naming it and the nearest typed key (``methd`` -> ``method``).
    evalrun itself reads only ``method``, ``model`` and ``num_speculative_tokens``
    (attributes); the mapping as written is :meth:`as_dict`.

    Attributes (units as in vLLM):
        method: speculative method, e.g. ``mtp``, ``qwen3_next_mtp``, ``eagle``,
            ``eagle3``, ``ngram``, ``draft_model``, ``suffix``, ``medusa``; a string,
            not an enum here, because vLLM adds methods between releases (the engine
            rejects an unknown one at start-up, and the effective method is checked
            against ``/server_info``).
        num_speculative_tokens: draft tokens proposed per step (>= 1).
        model: draft model (hub id or path) for ``draft_model`` / EAGLE / Medusa.
        prompt_lookup_min, prompt_lookup_max: n-gram window bounds of ``ngram``
            (>= 1; min <= max).
        draft_tensor_parallel_size, tensor_parallel_size: draft model parallelism.
        quantization, revision, code_revision, max_model_len, enforce_eager,
        kv_cache_dtype, attention_backend, moe_backend: draft-model settings.
        disable_padded_drafter_batch, disable_eagle_block_drop, parallel_drafting,
        use_local_argmax_reduction, use_heterogeneous_vocab,
        index_share_for_mtp_iteration, enable_adaptive_verification: EAGLE/MTP
            switches.
        suffix_decoding_max_tree_depth, suffix_decoding_max_cached_requests,
        suffix_decoding_max_spec_factor, suffix_decoding_min_token_prob: ``suffix``.
        num_speculative_tokens_per_batch_size: ``[[min_bs, max_bs, k], ...]``.
        rejection_sample_method, draft_sample_method, dspark_draft_topk,
        synthetic_acceptance_rates, synthetic_acceptance_length: sampling of drafts.
    """

    # lax as vLLM's own pydantic SpeculativeConfig, which receives this JSON unchanged
    model_config = ConfigDict(extra="allow", frozen=True, strict=False)

    method: str | None = None
    num_speculative_tokens: int | None = Field(default=None, ge=1)
    model: str | None = None
    prompt_lookup_min: int | None = Field(default=None, ge=1)
    prompt_lookup_max: int | None = Field(default=None, ge=1)
    draft_tensor_parallel_size: int | None = Field(default=None, ge=1)
    tensor_parallel_size: int | None = Field(default=None, ge=1)
    quantization: str | None = None
    revision: str | None = None
    code_revision: str | None = None
    max_model_len: int | None = Field(default=None, ge=1)
    enforce_eager: bool | None = None
    kv_cache_dtype: str | None = None
    attention_backend: str | None = None
    moe_backend: str | None = None
    disable_padded_drafter_batch: bool | None = None
    disable_eagle_block_drop: bool | None = None
    parallel_drafting: bool | None = None
    use_local_argmax_reduction: bool | None = None
    use_heterogeneous_vocab: bool | None = None
    index_share_for_mtp_iteration: bool | None = None
    enable_adaptive_verification: bool | None = None
    suffix_decoding_max_tree_depth: int | None = Field(default=None, ge=1)
    suffix_decoding_max_cached_requests: int | None = Field(default=None, ge=0)
    suffix_decoding_max_spec_factor: float | None = Field(default=None, ge=0.0)
    suffix_decoding_min_token_prob: float | None = Field(default=None, ge=0.0, le=1.0)
    num_speculative_tokens_per_batch_size: list[tuple[int, int, int]] | None = None
    rejection_sample_method: Literal["standard", "synthetic", "block"] | None = None
    draft_sample_method: Literal["greedy", "probabilistic"] | None = None
    dspark_draft_topk: int | None = Field(default=None, ge=1)
    synthetic_acceptance_rates: list[float] | None = None
    synthetic_acceptance_length: float | None = None

    @model_validator(mode="after")
    def _check(self) -> "SpeculativeConfigSpec":
        if self.method is None and self.model is None:
            near = [k for k in self.untyped_keys()
                    if difflib.get_close_matches(k, ["method", "model"], n=1, cutoff=0.6)]
            hint = "".join(f"; '{k}' is not a key: did you mean "
                           f"'{difflib.get_close_matches(k, ['method', 'model'], n=1, cutoff=0.6)[0]}'?"
                           for k in near)
            raise ValueError(f"set 'method' (e.g. mtp, ngram, eagle) or a draft 'model'{hint}")
        lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"prompt_lookup_min ({lo}) is larger than prompt_lookup_max ({hi})")
        return self

    def as_dict(self) -> dict[str, Any]:
        """The keys written in the config, as the JSON mapping for ``--speculative-config``
        (keys evalrun does not type included, unchanged)."""
        return self.model_dump(mode="json", exclude_unset=True)

    def untyped_keys(self) -> list[str]:
        """The keys written that evalrun does not type (passed to vLLM unchanged)."""
        return sorted(self.model_extra or {})



class VariantSpec(_Frozen):
    """One way to run the model.

    Attributes:
        speculative_config: the ``--speculative-config`` settings
            (:class:`SpeculativeConfigSpec`), or None (no speculative decoding).
        async_scheduling: True adds ``--async-scheduling``, False adds
            ``--no-async-scheduling``, None leaves the engine default.
        server_args: extra server arguments for this variant (a shell-like string,
            split with :func:`shlex.split`, never run through a shell).
        env: extra environment for this variant's server.
        fault: name of a fault to inject with evalrun's vLLM plugin (None = clean).
        expected_effective: per platform (``cpu``, ``cuda``, ...), settings the engine
            is known to override there, e.g. ``{"cpu": {"async_scheduling": false}}``:
            the variant is still reported as not effective, but its gate passes.
        engine_facts: ``required`` (default): the engine's effective configuration
            (``/server_info``, ``/version``) must be readable, else ``variant_effective``
            fails; ``not_reported``: this engine cannot report it, so the gate is NOT
            RUN instead (never passed).
        not_applicable: a reason this variant cannot run on the engine (e.g. vLLM refuses
            async scheduling with the config's drafter): the plan shows it, no server
            starts, and every gate of the variant is NOT RUN with this reason (never
            passed). Derived by the loader for vLLM-form configs; None = runs.
        model_runner: ``v1`` / ``v2`` sets ``VLLM_USE_V2_MODEL_RUNNER`` (0 / 1) for this
            variant's server, and ``variant_effective`` checks the runner the engine
            used; None leaves vLLM's default (V2 on CUDA with Triton, V1 on the CPU).
    """

    speculative_config: SpeculativeConfigSpec | None = None
    async_scheduling: bool | None = None
    server_args: ArgsStr = ""
    env: EnvDict = Field(default_factory=dict)
    fault: str | None = None
    expected_effective: dict[str, dict[str, Any]] = Field(default_factory=dict)
    engine_facts: Literal["required", "not_reported"] = "required"
    not_applicable: str | None = None
    model_runner: Literal["v1", "v2"] | None = None


class NativeConfig(_Frozen):
    """The native YAML form (recognised by its ``variants`` key).

    ``per_request_metrics: true`` sends a task's requests one at a time and reads the
    cumulative ``/metrics`` counters around each, so every sample carries its own
    draft / accepted counts and acceptance figures get per-request bootstrap intervals
    (slower: no concurrency). Default False.

    ``trust_remote_code: true`` adds ``--trust-remote-code`` to every variant's command,
    as vLLM's GSM8K test does for every config of its form (default False: a native
    config runs no model code from the hub unless it says so).
    """

    name: str | None = None
    model: str
    server_args: ArgsStr = ""
    env: EnvDict = Field(default_factory=dict)
    startup_max_wait_seconds: float = Field(default=600, gt=0)
    request_timeout_seconds: float = Field(default=600, gt=0)
    max_concurrency: int = Field(default=DEFAULT_MAX_CONCURRENCY, ge=1)
    per_request_metrics: bool = False
    trust_remote_code: bool = False
    variants: dict[str, VariantSpec]
    tasks: dict[str, TaskSpec]
    gates: GateSpec = Field(default_factory=GateSpec)
    comparisons: list[ComparisonSpec] = Field(default_factory=list)


# --------------------------------------------------------------------------- vLLM form


class EvalrunBlock(_Frozen):
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
    """

    max_concurrency: int | None = Field(default=None, ge=1)
    request_timeout_seconds: float | None = Field(default=None, gt=0)
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

    def effective_noise_runs(self) -> int:
        """2 unless a stored ``noise_mismatch_rate`` replaces the rerun (or 1 is written)."""
        if self.noise_runs is not None:
            return self.noise_runs
        return 1 if self.noise_mismatch_rate is not None else 2


class VllmGsm8kConfig(_Frozen):
    """vLLM's GSM8K config form (``tests/evals/gsm8k/configs/*.yaml``), read unchanged.

    Every key vLLM's current ``test_gsm8k_correctness.py`` reads, with its defaults:
    tolerance 0.08 (absolute), max_tokens 256, temperature 0, seed 42 (``seed: null``: no
    per-request seed is sent; ``temperature: null``: none is sent, the server's default applies),
    ``use_chat_completions`` false, ``gen_prefix`` "", ``max_concurrency`` none (aiohttp's
    limit of 100), ``request_timeout_seconds`` 600, ``rocm_request_timeout_seconds``
    (used instead on ROCm only, as vLLM's test does), ``startup_max_wait_seconds`` 1200
    (also sent to the server as ``VLLM_ENGINE_READY_TIMEOUT_S``), ``min_acceptance_length``.
    vLLM requires ``num_questions`` and ``num_fewshot``; evalrun defaults them to 1319 and 5.
    A top-level key not listed is a warning (:func:`vllm_form_warnings`), never an error,
    because vLLM's test reads the YAML as a plain dict and ignores it.
    """

    model_name: str
    accuracy_threshold: float = Field(ge=0.0, le=1.0)
    tolerance: float = Field(default=DEFAULT_TOLERANCE, ge=0.0, le=1.0)
    num_questions: int = Field(default=1319, ge=1)
    num_fewshot: int = Field(default=5, ge=0)
    server_args: ArgsStr = ""
    env: EnvDict = Field(default_factory=dict)
    startup_max_wait_seconds: float = Field(default=DEFAULT_STARTUP_MAX_WAIT_SECONDS, gt=0)
    min_acceptance_length: float | None = Field(default=None, ge=1.0)
    max_tokens: int = Field(default=256, ge=1)
    temperature: float | None = Field(default=0.0, ge=0.0)
    seed: int | None = 42
    use_chat_completions: bool = False
    gen_prefix: str = ""
    max_concurrency: int | None = Field(default=None, ge=1)
    request_timeout_seconds: float | None = Field(default=None, gt=0)
    rocm_request_timeout_seconds: float | None = Field(default=None, gt=0)
    calibration_questions: int | None = Field(default=None, ge=1)
    evalrun: EvalrunBlock = Field(default_factory=EvalrunBlock)


# --------------------------------------------------------------------------- the result


class ConfigWarning(_Frozen):
    """Something in a config that evalrun reads but does not refuse (vLLM's form only:
    its test never refuses a key), recorded in the plan and the run record.

    Attributes:
        file: the config file.
        line: 1-based line of the key (None when unknown).
        key: dotted key path, e.g. ``max_model_len`` or ``server_args.--speculative-config.foo``.
        nearest: the nearest key evalrun knows there (None when nothing is close).
        message: one sentence naming the file, line, key, nearest key and what evalrun does.
    """

    file: str
    line: int | None = None
    key: str
    nearest: str | None = None
    message: str


class ModelConfig(_Frozen):
    """A validated config, whichever form it came from.

    Attributes:
        name: config name (the file stem unless the native form sets ``name``).
        path: the YAML file it came from.
        sha256: hex SHA-256 of the file's bytes (provenance).
        form: ``vllm-gsm8k`` or ``native``.
        model: model id, local path, or ``builtin:<name>`` (a model evalrun builds).
        server_args: common server arguments, already split (list of argv items).
        env: common server environment.
        variants: variant name -> spec, in run order (``reference`` first).
        tasks: task name -> spec.
        gates: absolute per-variant gates.
        comparisons: gated pairs of variants.
        per_request_metrics: send requests one at a time and record per-request
            speculative-decoding counts on each sample (native form only).
        trust_remote_code: add ``--trust-remote-code`` to every command (always for the
            vLLM form, as vLLM's test does; the native form opts in).
        rocm_request_timeout_seconds: request timeout used instead of
            ``request_timeout_seconds`` when the engine runs on ROCm (vLLM form only,
            as vLLM's test reads it); None = the same timeout everywhere.
        warnings: what the loader accepted but flagged (:class:`ConfigWarning`).
    """

    name: str
    path: Path
    sha256: str
    form: Literal["vllm-gsm8k", "native"]
    model: str
    server_args: tuple[str, ...]
    env: dict[str, str]
    startup_max_wait_seconds: float
    request_timeout_seconds: float = 600
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    per_request_metrics: bool = False
    trust_remote_code: bool = False
    rocm_request_timeout_seconds: float | None = None
    warnings: tuple[ConfigWarning, ...] = ()
    variants: dict[str, VariantSpec]
    tasks: dict[str, TaskSpec]
    gates: GateSpec
    comparisons: tuple[ComparisonSpec, ...]

    def gates_for(self, task: str) -> GateSpec:
        """The gates of one task: the config's ``gates`` with the keys the task's own
        ``gates`` sets written over them."""
        over = self.tasks[task].gates
        if over is None:
            return self.gates
        return self.gates.model_copy(update={k: getattr(over, k) for k in over.model_fields_set})


SPEC_FLAG = "--speculative-config"


def split_args(text: str, where: str) -> list[str]:
    """Split a server-args string like a shell would (never running one).

    Raises:
        ConfigError: naming ``where`` when quotes are unbalanced.
    """
    try:
        return shlex.split(text or "")
    except ValueError as e:
        raise ConfigError(f"{where}: cannot split server_args: {e}") from e


#: Server settings evalrun sets itself (it picks a free port and binds to loopback, where
#: the dev endpoint ``/server_info`` is safe), as destinations of vLLM's parser; a config
#: may not set them. ``uds`` (a Unix socket instead of host and port) would leave evalrun
#: no address to reach.
OWNED_DESTS = ("port", "host", "uds")
OWNED_FLAGS = ("--port", "--host")


def refuse_owned_flags(argv: list[str], where: str) -> None:
    """Refuse server arguments that evalrun owns (:data:`OWNED_DESTS`).

    Args:
        argv: split server arguments.
        where: ``<file>: <key>`` for the message.

    Raises:
        ConfigError: naming the file, key and flag, when a flag that sets ``port``,
            ``host`` or ``uds`` is present in any spelling vLLM's parser accepts
            (``--port=N``, ``--po 8000`` as an unambiguous prefix; see
            :mod:`harness.config.vllm_parser`). vLLM's own test refuses a ``--port`` too
            (``RemoteOpenAIServer`` picks the port).
    """
    for dest in OWNED_DESTS:
        for h in hits_of(argv, dest):
            raise ConfigError(
                f"{where}: remove {h.spelled}: evalrun sets {' and '.join(OWNED_FLAGS)} itself "
                "(a free port on 127.0.0.1 for each server)"
            )


def doubt_warnings(argv: list[str], path: Path, line: int | None) -> list[ConfigWarning]:
    """One warning per item of ``argv`` that may change speculation but that evalrun cannot
    read (:func:`harness.config.vllm_parser.speculative_doubts`): never a silent pass-through
    into a variant planned without speculation; the pre-launch check parses the commands
    with the installed vLLM and refuses a reference that speculates."""
    where = f"{path}:{line}" if line else f"{path}"
    table = current_table()
    return [ConfigWarning(
        file=str(path), line=line, key="server_args", nearest=None,
        message=(f"{where}: server_args: {d}: evalrun cannot tell whether it changes speculation "
                 f"({table.source} of vLLM {table.vllm_version}'s parser); every variant keeps it, and the "
                 "pre-launch check refuses a variant planned without speculation whose arguments "
                 "speculate under the installed vLLM"),
    ) for d in speculative_doubts(argv, table)]


def pop_speculative_config(argv: list[str], where: str) -> tuple[list[str], dict | None]:
    """Remove the speculative config from ``argv`` in every spelling vLLM's parser
    accepts (every option string of its ``speculative_config`` action, e.g. ``-sc``, with
    ``=``, ``_`` for ``-``, prefixes and dotted sub-keys, and the shorthands that feed it,
    ``--spec-method`` / ``--spec-model`` / ``--spec-tokens``;
    :func:`harness.config.vllm_args.pop_json_flag`).

    Returns:
        (argv without the flag, the JSON mapping vLLM would receive, or None when absent).

    Raises:
        ConfigError: when a value is missing or the whole-JSON value is not a JSON object.
    """
    try:
        out, spec, _ = pop_json_flag(argv, SPEC_FLAG, where)
    except ArgsError as e:
        raise ConfigError(str(e)) from None
    return out, spec


# --------------------------------------------------------------------------- loading


_STR_TAG = "tag:yaml.org,2002:str"
_INT_TAG = "tag:yaml.org,2002:int"

#: Keys whose values are strings to the engine (shell arguments, environment
#: values, model ids): a plain YAML 1.1 scalar there that PyYAML would turn into a
#: bool, null, float, date or a re-based integer is an error (:func:`check_yaml`).
#: ``*`` matches any key (a variant name, an environment variable).
STRING_PATHS: tuple[tuple[str, ...], ...] = (
    ("model_name",), ("model",), ("name",),
    ("server_args",), ("variants", "*", "server_args"),
    ("env", "*"), ("variants", "*", "env", "*"),
)
#: Of those, where a plain decimal integer (``VLLM_CPU_KVCACHE_SPACE: 1``,
#: ``[--max-model-len, 4096]``) is accepted and kept as the text written: its text
#: and its value print the same.
_INT_OK_PATHS: tuple[tuple[str, ...], ...] = (
    ("server_args", "#"), ("variants", "*", "server_args", "#"),
    ("env", "*"), ("variants", "*", "env", "*"),
)


def _path_matches(path: tuple, patterns: tuple[tuple[str, ...], ...]) -> bool:
    """True when ``path`` (keys and list indices) fits a pattern; ``*`` = any key,
    ``#`` = any list index."""
    for pat in patterns:
        if len(pat) != len(path):
            continue
        if all(p == "*" and not isinstance(x, int) or p == "#" and isinstance(x, int) or p == x
               for p, x in zip(pat, path)):
            return True
    return False


def _quoted_hint(key: Any, text: str) -> str:
    return f'{key}: "{text}"'


def check_yaml(node: yaml.Node | None, path: Path) -> None:
    """YAML pitfalls the loader refuses, found on the composed node tree.

    * A key written twice in one mapping (PyYAML keeps the last silently): the
      error names the key path and both lines.
    * In places that are strings to the engine (:data:`STRING_PATHS`: ``env``
      values, ``server_args`` and its list items, ``model_name`` / ``model`` /
      ``name``), an unquoted scalar that YAML 1.1 reads as something else: ``yes`` /
      ``no`` / ``on`` / ``off`` / ``true`` (bool), an empty value or ``~`` (null),
      ``1.0`` / ``1e3`` / ``.5`` (float), ``0755`` / ``0x1F`` / ``1_000`` /
      ``1:30`` (octal, hex, underscored or base-60 integer), ``2024-01-01`` (date).
      The error names the file, key path and line and shows the quoted form to
      write. A plain decimal integer (``1``, ``4096``) is accepted in ``env`` and
      in ``server_args`` list items: it reads back as the same text.

    Raises:
        ConfigError: on the first pitfall, ``"<file>:<line>: ..."``.
    """
    if node is None:
        return
    _walk_yaml(node, (), path)


def _check_string_shape(node: yaml.Node, path: tuple, file: Path) -> None:
    """Where the engine takes a string (:data:`STRING_PATHS`), a mapping is refused, and
    a list everywhere except as ``server_args`` itself (a list of arguments, whose items
    are scalars); the message names the file, line and key path."""
    if isinstance(node, yaml.ScalarNode):
        return
    arg_item = bool(path) and isinstance(path[-1], int) and path[-2:-1] == ("server_args",)
    if not (_path_matches(path, STRING_PATHS) or arg_item):
        return
    if isinstance(node, yaml.SequenceNode) and path[-1] == "server_args":
        return
    shape = "a mapping" if isinstance(node, yaml.MappingNode) else "a list"
    dotted = ".".join(str(x) for x in path)
    takes = ("one argument (a string or a plain integer) per list item" if arg_item
             else "a string or a plain integer" if "env" in path else "a string")
    raise ConfigError(
        f"{file}:{node.start_mark.line + 1}: key '{dotted}': {shape} is not a value the engine can take "
        f"here; write {takes}"
    )


def _walk_yaml(node: yaml.Node, prefix: tuple, file: Path) -> None:
    _check_string_shape(node, prefix, file)
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for k, v in node.value:
            kv = k.value if isinstance(k, yaml.ScalarNode) else None
            line = k.start_mark.line + 1
            if kv is not None and kv in seen:
                dotted = ".".join(str(x) for x in prefix + (kv,))
                raise ConfigError(
                    f"{file}:{line}: duplicate key '{dotted}': first written at line {seen[kv]}, "
                    f"again at line {line} (YAML would silently keep only the second); keep one"
                )
            if kv is not None:
                seen[kv] = line
            _walk_yaml(v, prefix + (kv,), file)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _walk_yaml(v, prefix + (i,), file)
    elif isinstance(node, yaml.ScalarNode):
        _check_string_scalar(node, prefix, file)


def _check_string_scalar(node: yaml.ScalarNode, path: tuple, file: Path) -> None:
    in_list = bool(path) and isinstance(path[-1], int)
    if not (_path_matches(path, STRING_PATHS) or (in_list and _path_matches(path[:-1], STRING_PATHS))):
        return
    if node.style is not None or node.tag == _STR_TAG:
        return  # quoted, or a plain scalar that is a string anyway
    text = node.value
    if node.tag == _INT_TAG and _path_matches(path, _INT_OK_PATHS):
        try:
            if str(int(text)) == text:
                return
        except ValueError:
            pass
    kind = {
        "tag:yaml.org,2002:bool": "a boolean",
        "tag:yaml.org,2002:null": "null (no value)",
        "tag:yaml.org,2002:float": "a float",
        "tag:yaml.org,2002:int": "an integer",
        "tag:yaml.org,2002:timestamp": "a date",
    }.get(node.tag, node.tag)
    key = path[-2] if in_list else path[-1]
    dotted = ".".join(str(x) for x in path)
    shown = f"- \"{text}\"" if in_list else _quoted_hint(key, text)
    value = "an empty value" if text in ("", "~") and kind.startswith("null") else f"unquoted {text!r}"
    raise ConfigError(
        f"{file}:{node.start_mark.line + 1}: key '{dotted}': {value} is read by YAML 1.1 as "
        f"{kind}, but the engine takes a string here; quote it: {shown}"
    )


def _key_lines(node: yaml.Node, prefix: tuple = ()) -> dict[tuple, int]:
    """Map key paths (tuples of keys / indices) to 1-based line numbers."""
    lines: dict[tuple, int] = {}
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            path = prefix + (k.value,)
            lines[path] = k.start_mark.line + 1
            lines.update(_key_lines(v, path))
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            path = prefix + (i,)
            lines[path] = v.start_mark.line + 1
            lines.update(_key_lines(v, path))
    return lines


def _valid_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    """The field names valid at ``loc`` (the parent of an offending key)."""
    cur: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(cur, type) and issubclass(cur, BaseModel)):
            return []
        field = cur.model_fields.get(part)
        if field is None:
            return []
        ann = field.annotation
        cur = _inner_model(ann)
    if isinstance(cur, type) and issubclass(cur, BaseModel):
        return list(cur.model_fields)
    return []


def _inner_model(ann: Any) -> Any:
    """The BaseModel inside an annotation like ``dict[str, X]``, ``list[X]``, ``X | None``."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in getattr(ann, "__args__", ()) or ():
        m = _inner_model(arg)
        if m is not None:
            return m
    return None


def _format_validation_error(
    e: ValidationError, model: type[BaseModel], path: Path, lines: dict[tuple, int]
) -> str:
    msgs = []
    for err in e.errors():
        loc = tuple(err["loc"])
        # dict[str, Model] entries put the dict key in loc; keep it for the path.
        dotted = ".".join(str(p) for p in loc) or "(top level)"
        line = None
        for n in range(len(loc), 0, -1):
            if loc[:n] in lines:
                line = lines[loc[:n]]
                break
        where = f"{path}:{line}" if line else f"{path}"
        if err["type"] == "extra_forbidden":
            key = str(loc[-1])
            parent = [p for p in loc[:-1] if not isinstance(p, int)]
            valid = _valid_keys(model, tuple(_strip_dict_keys(model, parent)))
            near = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
            hint = f"; did you mean '{near[0]}'?" if near else ""
            msgs.append(
                f"{where}: unknown key '{dotted}'{hint} (valid keys here: {', '.join(valid)})"
            )
        elif err["type"] == "missing":
            msgs.append(f"{where}: missing required key '{dotted}'")
        else:
            msgs.append(f"{where}: key '{dotted}': {err['msg']} (got {err.get('input')!r})")
    return "\n".join(msgs)


def _strip_dict_keys(model: type[BaseModel], parts: list) -> list:
    """Drop user-chosen dict keys (variant / task names) from a location path."""
    out = []
    cur: Any = model
    skip_next = False
    for p in parts:
        if skip_next:
            skip_next = False
            continue
        out.append(p)
        if isinstance(cur, type) and issubclass(cur, BaseModel) and p in cur.model_fields:
            ann = cur.model_fields[p].annotation
            origin = getattr(ann, "__origin__", None)
            if origin is dict:
                skip_next = True
            cur = _inner_model(ann)
    return out


def _validate(model: type[_M], data: dict, path: Path, lines: dict) -> _M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_validation_error(e, model, path, lines)) from None


def load_config(path: str | Path) -> ModelConfig:
    """Load and validate one config YAML (either form).

    Args:
        path: the YAML file.

    Returns:
        The validated :class:`ModelConfig`.

    Raises:
        ConfigError: the file is missing or unreadable, is not a YAML mapping, has an
            unknown key, a wrong type or a missing required key, names a variant that
            does not exist in a comparison, or has unbalanced quotes in server args.
    """
    path = Path(path)
    try:
        raw_bytes = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config: {e.strerror}") from e
    text = raw_bytes.decode("utf-8", errors="replace")
    try:
        loaded = load_yaml(text, str(path))  # aliases expanded beyond a bound are refused here
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    except YamlCostError as e:
        raise ConfigError(str(e)) from None
    node, data = loaded.node, loaded.data
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a YAML mapping of keys, got {type(data).__name__}")
    check_yaml(node, path)
    lines = _key_lines(node) if node is not None else {}
    sha = hashlib.sha256(raw_bytes).hexdigest()
    if "variants" in data:
        native = _validate(NativeConfig, data, path, lines)
        cfg = _from_native(native, path, sha, lines)
    else:
        kept, warns = vllm_form_warnings(data, path, lines)
        try:
            vcfg = _validate(VllmGsm8kConfig, kept, path, lines)
        except ConfigError as e:
            # a required key missing next to an unknown key close to it: name the typo
            near = [w.message for w in warns if w.nearest and w.nearest not in kept]
            raise ConfigError("\n".join([str(e), *near])) from None
        cfg = _from_vllm(vcfg, path, sha, lines, warns)
    check_acceptance_floor(cfg, lines)

    try:
        check_config(cfg, lines)
    except ConfigCheckError as e:
        raise ConfigError(str(e)) from None
    return cfg


def check_acceptance_floor(cfg: "ModelConfig", lines: dict[tuple, int] | None = None) -> None:
    """Refuse a ``min_acceptance_length`` no speculative variant can reach.

    Mean acceptance length = 1 + accepted tokens / drafts, and a draft has at most
    ``num_speculative_tokens`` (k) tokens, so it is at most ``1 + k`` (vLLM's
    spec-decode metrics, ``vllm/v1/spec_decode/metrics.py``). A floor above
    that fails on every run, whatever the build.

    Raises:
        ConfigError: naming the file, the line of the floor, the floor and ``1 + k``.
    """
    lines = lines or {}
    for vname, v in cfg.variants.items():
        k = v.speculative_config.num_speculative_tokens if v.speculative_config else None
        if k is None:
            continue
        for tname in cfg.tasks:
            floor = cfg.gates_for(tname).min_acceptance_length
            if floor is None or floor <= 1 + k:
                continue
            over = cfg.tasks[tname].gates
            keypath = (("tasks", tname, "gates", "min_acceptance_length")
                       if over is not None and "min_acceptance_length" in over.model_fields_set
                       else ("gates", "min_acceptance_length") if cfg.form == "native"
                       else ("min_acceptance_length",))
            line = lines.get(keypath)
            where = f"{cfg.path}:{line}" if line else f"{cfg.path}"
            raise ConfigError(
                f"{where}: key '{'.'.join(keypath)}': min_acceptance_length {floor} is above "
                f"1 + num_speculative_tokens = {1 + k} (variant {vname}, task {tname}); a mean "
                f"acceptance length can never exceed 1 + {k}, so this gate could never pass"
            )


def _check_native_names(c: NativeConfig, path: Path) -> None:
    """Every comparison of a native config names variants and tasks it defines.

    Raises:
        ConfigError: no variant or no task, or a comparison naming an unknown one (with
            the nearest variant name).
    """
    if not c.variants:
        raise ConfigError(f"{path}: 'variants' must name at least one variant")
    if not c.tasks:
        raise ConfigError(f"{path}: 'tasks' must name at least one task")
    for i, comp in enumerate(c.comparisons):
        for role in ("baseline", "candidate"):
            v = getattr(comp, role)
            if v not in c.variants:
                near = difflib.get_close_matches(v, list(c.variants), n=1)
                hint = f"; did you mean '{near[0]}'?" if near else ""
                raise ConfigError(
                    f"{path}: comparisons.{i}.{role}: no variant named '{v}'{hint} "
                    f"(variants: {', '.join(c.variants)})"
                )
    for i, comp in enumerate(c.comparisons):
        for t in comp.tasks or []:
            if t not in c.tasks:
                raise ConfigError(
                    f"{path}: comparisons.{i}.tasks: no task named '{t}' (tasks: {', '.join(c.tasks)})"
                )


def _native_variant_warnings(c: NativeConfig, path: Path, lines: dict | None) -> list[ConfigWarning]:
    """Check each variant of a native config (its server arguments, its fault) and
    return the warnings of its speculative config.

    Raises:
        ConfigError: an owned flag or ``--speculative-config`` in a variant's server_args,
            or an unknown fault (with the nearest name).
    """
    warns: list[ConfigWarning] = []
    for name, v in c.variants.items():
        if v.speculative_config is not None:
            warns += speculative_warnings(v.speculative_config, path,
                                          (lines or {}).get(("variants", name, "speculative_config")),
                                          f"variants.{name}.speculative_config")
        vargs = _native_server_args(v.server_args, f"{path}: variants.{name}.server_args",
                                    "the variant's 'speculative_config' mapping (it is typed and checked "
                                    "there), not in server_args")
        warns += doubt_warnings(vargs, path, (lines or {}).get(("variants", name, "server_args")))
        if v.fault is not None and v.fault not in known_faults():
            near = difflib.get_close_matches(v.fault, known_faults(), n=1)
            hint = f"; did you mean '{near[0]}'?" if near else ""
            raise ConfigError(
                f"{path}: variants.{name}.fault: unknown fault '{v.fault}'{hint} "
                f"(known: {', '.join(known_faults())})"
            )
    return warns


def _native_server_args(raw: Any, where: str, put_it: str) -> list[str]:
    """A native config's ``server_args`` (common or a variant's, at ``where``) split into argv.

    Raises:
        ConfigError: a flag evalrun sets itself (:func:`refuse_owned_flags`), or
            ``--speculative-config`` (the message says to put it in ``put_it``).
    """
    args = split_args(raw, where)
    refuse_owned_flags(args, where)
    _, spec = pop_speculative_config(args, where)
    if spec is not None:
        raise ConfigError(f"{where}: put --speculative-config (or its shorthands) in {put_it}")
    return args


def _from_native(c: NativeConfig, path: Path, sha: str, lines: dict | None = None) -> ModelConfig:
    """A native-form config (``c``, read from ``path``) as a :class:`ModelConfig`.

    Raises:
        ConfigError: see :func:`_check_native_names` and :func:`_native_variant_warnings`;
            also ``--speculative-config`` in the common server_args.
    """
    _check_native_names(c, path)
    common = _native_server_args(c.server_args, f"{path}: server_args",
                                 "a variant's 'speculative_config', not in the common server_args")
    warns = doubt_warnings(common, path, (lines or {}).get(("server_args",)))
    warns += _native_variant_warnings(c, path, lines)
    return ModelConfig(
        name=c.name or path.stem,
        path=path.resolve(),
        sha256=sha,
        form="native",
        model=c.model,
        server_args=tuple(common),
        env=dict(c.env),
        startup_max_wait_seconds=c.startup_max_wait_seconds,
        request_timeout_seconds=c.request_timeout_seconds,
        max_concurrency=c.max_concurrency,
        per_request_metrics=c.per_request_metrics,
        trust_remote_code=c.trust_remote_code,
        warnings=tuple(warns),
        variants=dict(c.variants),
        tasks=dict(c.tasks),
        gates=c.gates,
        comparisons=tuple(c.comparisons),
    )


def typed_speculative_config(spec: dict, where: str) -> SpeculativeConfigSpec:
    """Validate a ``--speculative-config`` JSON mapping into :class:`SpeculativeConfigSpec`.

    Args:
        spec: the parsed JSON object.
        where: ``"<file>:<line>: server_args"``, put in front of every message.

    Raises:
        ConfigError: a wrong type or a value out of range of a typed key, named by its
            key inside the JSON (a key evalrun does not type is passed through; see
            :func:`speculative_warnings`).
    """
    try:
        return SpeculativeConfigSpec.model_validate(spec)  # untyped keys pass through
    except ValidationError as e:
        valid = list(SpeculativeConfigSpec.model_fields)
        msgs = []
        for err in e.errors():
            key = ".".join(str(x) for x in err["loc"]) or "(the object)"
            if err["type"] == "extra_forbidden":
                near = difflib.get_close_matches(str(err["loc"][-1]), valid, n=1, cutoff=0.5)
                hint = f"; did you mean '{near[0]}'?" if near else ""
                msgs.append(f"{where}: {SPEC_FLAG}: unknown key '{key}'{hint} (valid keys: {', '.join(valid)})")
            else:
                msgs.append(f"{where}: {SPEC_FLAG}: key '{key}': {err['msg']} (got {err.get('input')!r})")
        raise ConfigError("\n".join(msgs)) from None


def vllm_form_warnings(data: dict, path: Path, lines: dict[tuple, int]) -> tuple[dict, list[ConfigWarning]]:
    """Split a vLLM-form mapping into the keys evalrun reads and warnings for the rest.

    vLLM's test reads the YAML as a plain dict and ignores keys it does not use (e.g.
    ``max_model_len`` in two configs of its default list), so evalrun does the same and
    says so.

    Returns:
        (the mapping without unknown top-level keys, one :class:`ConfigWarning` per
        unknown key naming the file, the line, the key and the nearest known key).
    """
    known = list(VllmGsm8kConfig.model_fields)
    kept, warns = {}, []
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


def speculative_warnings(spec: SpeculativeConfigSpec, path: Path, line: int | None, key: str) -> list[ConfigWarning]:
    """One warning per speculative-config key evalrun does not type: passed to vLLM
    unchanged, checked by vLLM's own parser before launch."""
    known = [k for k in SpeculativeConfigSpec.model_fields]
    out = []
    where = f"{path}:{line}" if line else f"{path}"
    for k in spec.untyped_keys():
        near = difflib.get_close_matches(k, known, n=1, cutoff=0.75)
        hint = f"; did you mean '{near[0]}'?" if near else ""
        out.append(ConfigWarning(
            file=str(path), line=line, key=f"{key}.{k}", nearest=near[0] if near else None,
            message=(f"{where}: {key}: key '{k}' is not one evalrun knows; passed to vLLM unchanged "
                     f"(vLLM's parser checks it before launch){hint}"),
        ))
    return out


def _one_of(c: VllmGsm8kConfig, key: str, default: Any, path: Path, lines: dict) -> Any:
    """A setting written at top level (vLLM's key) or in the ``evalrun:`` block, not both."""
    top, ev = getattr(c, key), getattr(c.evalrun, key)
    if top is not None and ev is not None:
        raise ConfigError(
            f"{path}:{lines.get((key,), '?')}: key '{key}' is also written as 'evalrun.{key}' "
            f"(line {lines.get(('evalrun', key), '?')}); keep one (the top-level key is vLLM's)"
        )
    return top if top is not None else ev if ev is not None else default


def _vllm_variants(c: VllmGsm8kConfig, argv: list[str], spec: SpeculativeConfigSpec | None,
                   raw_spec: dict | None, path: Path, line: int | None,
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


def _from_vllm(c: VllmGsm8kConfig, path: Path, sha: str, lines: dict | None = None,
               warnings: list[ConfigWarning] | None = None) -> ModelConfig:
    """A vLLM-form config (``c``, read from ``path``) as a :class:`ModelConfig`: the
    server arguments without the speculative config, the one GSM8K task, the gates, and
    the variants and comparisons of :func:`_vllm_variants`.

    Raises:
        ConfigError: an owned flag, or a speculative config that cannot be read.
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
    )
    ev = c.evalrun
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
        tasks={"gsm8k": task},
        gates=gates,
        comparisons=comparisons,
    )


def nearest_names(name: str, candidates: list[str], n: int = 3) -> list[str]:
    """The candidates closest to ``name``: those whose stem starts with or contains
    the name's stem first, then :func:`difflib.get_close_matches` (ratio >= 0.6) on
    the stems, case-insensitive; at most ``n``, no repeats.

    Args:
        name: what the user typed (a file name or stem).
        candidates: file names to choose from (e.g. ``Model-MTP.yaml``).

    Returns:
        Candidate names in order of closeness.
    """
    def stem(x: str) -> str:
        return Path(x).stem.lower() if Path(x).suffix in (".yaml", ".yml", ".txt") else x.lower()

    key = stem(Path(name).name)
    stems = {stem(c): c for c in candidates}
    out = [c for c in candidates if key and stem(c).startswith(key)]
    out += [c for c in candidates if key and key in stem(c) and c not in out]
    out += [stems[x] for x in difflib.get_close_matches(key, list(stems), n=n) if stems[x] not in out]
    return out[:n]


def _known_files() -> list[str]:
    return sorted([x.name for x in MODEL_LISTS_DIR.glob("*.txt")]
                  + [x.name for x in CONFIGS_DIR.glob("*.y*ml")])


def resolve_list_path(name: str | Path) -> Path:
    """Find a model list or a config: as given (absolute or relative to the cwd), else
    by name in ``model_lists/``, else in ``configs/`` (a name without suffix also
    tries ``.txt`` and ``.yaml``). A file that exists relative to the working
    directory always wins over evalrun's built-in list of the same name, so
    ``--config models-h200.txt`` run inside vLLM's ``tests/evals/gsm8k/configs/`` reads
    vLLM's list. The path returned is absolute (the plan and the run record name it).

    Raises:
        ConfigError: naming every place looked in and the nearest list and config
            names (:func:`nearest_names`) when nothing is found.
    """
    p = Path(name)
    tried = [p]
    if p.is_file():
        return p.resolve()
    if not p.is_absolute():
        # a list by name in model_lists/, or a single config by name in configs/
        names = [p] if p.suffix else [p, p.with_name(p.name + ".txt"), p.with_name(p.name + ".yaml")]
        for q in [d / x for x in names for d in (MODEL_LISTS_DIR, CONFIGS_DIR)]:
            tried.append(q)
            if q.is_file():
                return q.resolve()
    near = nearest_names(str(name), _known_files())
    hint = f"; nearest names: {', '.join(near)}" if near else ""
    raise ConfigError(
        f"model list or config '{name}' not found (looked in: {', '.join(str(t) for t in tried)}){hint}; "
        f"available lists: {', '.join(sorted(x.name for x in MODEL_LISTS_DIR.glob('*.txt'))) or 'none'}"
    )


def read_model_list(path: str | Path) -> list[Path]:
    """Read a model list: one config per line, ``#`` comments and blank lines ignored.

    An entry resolves against the list's own folder first (vLLM keeps configs beside
    its lists), then against ``configs/``. A ``.yaml``/``.yml`` given as the list is
    taken as a one-entry list.

    Returns:
        The config paths, in list order.

    Raises:
        ConfigError: the list is missing or empty, or names files that do not exist
            (every missing entry is named, with its line number).
    """
    path = resolve_list_path(path)
    if path.suffix in (".yaml", ".yml"):
        return [path]
    entries: list[Path] = []
    missing: list[str] = []
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        cands = [path.parent / line, CONFIGS_DIR / line]
        if Path(line).is_absolute():
            cands = [Path(line)]
        found = next((c for c in cands if c.is_file()), None)
        if found is None:
            pool = sorted({x.name for d in {c.parent for c in cands} if d.is_dir() for x in d.glob("*.y*ml")})
            near = nearest_names(line, pool)
            missing.append(
                f"  {path}:{lineno}: '{line}' (looked in {', '.join(str(c.parent) for c in cands)})"
                + (f"; nearest names: {', '.join(near)}" if near else "")
            )
        else:
            entries.append(found)
    if missing:
        raise ConfigError(f"{path}: {len(missing)} missing config(s):\n" + "\n".join(missing))
    if not entries:
        raise ConfigError(f"{path}: the model list names no config (only comments or blank lines)")
    return entries


def load_model_list(path: str | Path) -> list[ModelConfig]:
    """Read a model list and load every config in it.

    Raises:
        ConfigError: from :func:`read_model_list` or :func:`load_config`; all
            config errors of the list are collected into one message.
    """
    return load_configs(read_model_list(path), path)


def load_configs(paths: list[Path], list_path: str | Path) -> list[ModelConfig]:
    """Load the configs at ``paths`` (entries of the model list ``list_path``).

    Raises:
        ConfigError: every config error collected into one message, or two configs
            with the same name (naming the list).
    """
    configs: list[ModelConfig] = []
    errors: list[str] = []
    for p in paths:
        try:
            configs.append(load_config(p))
        except ConfigError as e:
            errors.append(str(e))
    if errors:
        raise ConfigError("\n".join(errors))
    names = [c.name for c in configs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"{list_path}: config names appear twice: {', '.join(dupes)}")
    return configs
