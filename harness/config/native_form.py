"""The native config form (recognised by a top-level ``variants`` key): explicit
variants, tasks, comparisons and gates, validated strictly (:class:`NativeConfig`) and
turned into a :class:`~harness.config.schema.ModelConfig` (:func:`from_native`).
"""

from __future__ import annotations

import difflib
from pathlib import Path

from pydantic import Field

from harness.config.ab import BuildsSpec, expand_builds
from harness.config.schema import (
    DEFAULT_MAX_CONCURRENCY,
    ArgsStr,
    ComparisonSpec,
    ConfigError,
    ConfigWarning,
    EnvDict,
    ExpectedFailureSpec,
    GateSpec,
    ModelConfig,
    RpcCheckNames,
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
)
from harness.config.types import Alpha, PositiveCount, PositiveSeconds
from harness.config.yaml_load import KeyPath
from harness.faults.plugin import known_faults  # standard library only


class NativeConfig(StrictModel):
    """The native YAML form (recognised by its ``variants`` key).

    ``per_request_metrics: true`` sends a task's requests one at a time and reads the
    cumulative ``/metrics`` counters around each, so every sample carries its own
    draft / accepted counts and acceptance figures get per-request bootstrap intervals
    (slower: no concurrency). Default False.

    ``trust_remote_code: true`` adds ``--trust-remote-code`` to every variant's command,
    as vLLM's GSM8K test does for every config of its form (default False: a native
    config runs no model code from the hub unless it says so).

    ``builds: {baseline: X, candidate: Y}`` runs every variant on both engine builds and
    compares each with itself across them (:mod:`harness.config.ab`).

    ``false_alarm_budget: 0.01`` (default; null: off): the probability that an unchanged build
    fails any gate of the config in one night (docs/gates.md, "The false-alarm budget").

    ``startup_rpc_checks: [NAME, ...]``: methods of the server's worker extension called once
    each variant's server is ready, as vLLM's form reads the key (gate ``startup_rpc_check``).
    """

    name: str | None = None
    model: str
    server_args: ArgsStr = ""
    env: EnvDict = Field(default_factory=dict)
    startup_max_wait_seconds: PositiveSeconds = 600
    request_timeout_seconds: PositiveSeconds = 600
    max_concurrency: PositiveCount = DEFAULT_MAX_CONCURRENCY
    per_request_metrics: bool = False
    trust_remote_code: bool = False
    variants: dict[str, VariantSpec]
    tasks: dict[str, TaskSpec]
    gates: GateSpec = Field(default_factory=GateSpec)
    comparisons: list[ComparisonSpec] = Field(default_factory=list)
    expected_failures: list[ExpectedFailureSpec] = Field(default_factory=list)
    builds: BuildsSpec | None = None
    startup_rpc_checks: RpcCheckNames = Field(default_factory=list)
    false_alarm_budget: Alpha | None = 0.01


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


def _native_variant_warnings(c: NativeConfig, path: Path, lines: dict[KeyPath, int] | None) -> list[ConfigWarning]:
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


def _native_server_args(raw: str, where: str, put_it: str) -> list[str]:
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


def from_native(c: NativeConfig, path: Path, sha: str, lines: dict[KeyPath, int] | None = None) -> ModelConfig:
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
    variants, comparisons = dict(c.variants), list(c.comparisons)
    if c.builds is not None:
        for t in c.builds.tasks or []:
            if t not in c.tasks:
                raise ConfigError(f"{path}: builds.tasks: no task named '{t}' (tasks: {', '.join(c.tasks)})")
        variants, comparisons = expand_builds(variants, comparisons, c.builds, path)
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
        variants=variants,
        tasks=dict(c.tasks),
        gates=c.gates,
        comparisons=tuple(comparisons),
        expected_failures=tuple(c.expected_failures),
        startup_rpc_checks=tuple(c.startup_rpc_checks),
        false_alarm_budget=c.false_alarm_budget,
    )

