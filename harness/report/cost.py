"""The cost of a model list before it runs: per variant start-up, evaluation and teardown
seconds, the devices it holds, wall time and GPU-seconds, from earlier run records.

Where the numbers come from (:func:`estimate_plan`), per config x variant, newest first
among the run records of the results folder (read as ``evalrun history`` reads them,
:func:`harness.report.history.load_records`):

1. ``history (same config)``: earlier runs of a config with the same name and the same
   config SHA-256;
2. ``history (same name)``: else earlier runs of a config with that name (the file changed);
3. ``defaults``: else :data:`DEFAULT_STARTUP_SECONDS` + questions x
   :data:`DEFAULT_SECONDS_PER_QUESTION` (x 2 for a variant that is run twice for the noise
   bound) + :data:`DEFAULT_TEARDOWN_SECONDS`. These constants are guesses, not
   measurements; the dry run says when it used them.

From history the estimate is the median over the last :data:`HISTORY_RUNS` variant results
that recorded a start-up and an evaluation time; the evaluation seconds are scaled by
planned questions / questions asked in that run (a run of a 100-question subset predicts a
1319-question run 13.19x as long). Older records without ``evaluation_seconds`` use the
sum of their tasks' ``seconds``.

Devices: a variant needs tensor x pipeline x data parallel size devices (from its server
command, as vLLM multiplies them); on a CPU host (no devices) it needs none and GPU-seconds
are 0. GPU-seconds of a variant = its seconds x the devices it is given by the schedule
(:func:`schedule`: :func:`harness.config.schedule.simulate`, longest first on disjoint
device sets; one at a time on a CPU host).
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from harness.config.plan import ConfigPlan, Plan, VariantPlan
from harness.config.schedule import Item, simulate
from harness.engine.devices import planned_devices, variant_need
from harness.records.run_record import RunRecord, VariantResult
from harness.tasks import task_size

__all__ = [
    "DEFAULT_SECONDS_PER_QUESTION",
    "DEFAULT_STARTUP_SECONDS",
    "DEFAULT_TEARDOWN_SECONDS",
    "HISTORY_RUNS",
    "PlanCost",
    "Slot",
    "VariantCost",
    "config_cost_weights",
    "cost_json",
    "estimate_plan",
    "plan_cost",
    "render_cost",
    "schedule",
]

#: Guess: seconds from launch to ``/health`` when no earlier run of the config is known.
DEFAULT_STARTUP_SECONDS = 120.0
#: Guess: evaluation seconds per question (all requests in flight, as the client sends them).
DEFAULT_SECONDS_PER_QUESTION = 0.1
#: Guess: seconds to stop a server.
DEFAULT_TEARDOWN_SECONDS = 5.0
#: Earlier variant results the median is taken over.
HISTORY_RUNS = 5

SOURCE_SAME_CONFIG = "history (same config)"
SOURCE_SAME_NAME = "history (same name)"
SOURCE_DEFAULTS = "defaults"


@dataclass(frozen=True)
class VariantCost:
    """The estimate for one variant (seconds; ``need`` in devices).

    Attributes:
        config, variant: names.
        need: devices its server needs (:func:`harness.engine.devices.variant_need`; 0 on a CPU host).
        startup, evaluation, teardown: estimated seconds.
        source: ``history (same config)``, ``history (same name)`` or ``defaults``.
        runs: earlier variant results the estimate is the median of (0 for defaults).
    """
    config: str
    variant: str
    need: int
    startup: float
    evaluation: float
    teardown: float
    source: str
    runs: int = 0

    @property
    def seconds(self) -> float:
        """Server lifetime: start-up + evaluation + teardown seconds."""
        return self.startup + self.evaluation + self.teardown


@dataclass(frozen=True)
class Slot:
    """One server in the schedule: the devices it is given and its start/end (seconds
    from the start of the run)."""
    config: str
    variant: str
    devices: tuple[str, ...]
    start: float
    end: float

    @property
    def gpu_seconds(self) -> float:
        """(end - start) x devices given."""
        return (self.end - self.start) * len(self.devices)


@dataclass(frozen=True)
class PlanCost:
    """A list's estimate: the variant estimates, the schedule, the devices and what
    scheduled it (``sequential`` or the scheduler's name); ``task_requests``: per config,
    task -> requests of one variant pass (:func:`harness.tasks.task_size`)."""
    variants: tuple[VariantCost, ...]
    slots: tuple[Slot, ...]
    devices: tuple[str, ...]
    scheduler: str
    notes: tuple[str, ...] = field(default=())
    task_requests: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def wall_seconds(self) -> float:
        """Estimated wall time of the list (the last server's end)."""
        return max((s.end for s in self.slots), default=0.0)

    @property
    def gpu_seconds(self) -> float:
        """Estimated GPU-seconds of the list (sum over servers)."""
        return sum(s.gpu_seconds for s in self.slots)

    def config_totals(self) -> dict[str, dict[str, float]]:
        """Per config: ``wall_seconds`` (first start to last end of its servers),
        ``server_seconds`` (sum of its servers' lifetimes) and ``gpu_seconds``."""
        out: dict[str, dict[str, float]] = {}
        for name in dict.fromkeys(v.config for v in self.variants):
            mine = [s for s in self.slots if s.config == name]
            out[name] = {
                "wall_seconds": (max(s.end for s in mine) - min(s.start for s in mine)) if mine else 0.0,
                "server_seconds": sum(s.end - s.start for s in mine),
                "gpu_seconds": sum(s.gpu_seconds for s in mine),
            }
        return out


def _questions(config_plan: ConfigPlan) -> int:
    return sum(task_size(t.spec) for t in config_plan.tasks)


def _asked(v: VariantResult) -> int:
    return sum(t.num_requests for t in v.tasks.values())


def _evaluation(v: VariantResult) -> float | None:
    if v.evaluation_seconds is not None:
        return v.evaluation_seconds
    secs = [t.seconds for t in v.tasks.values()]
    return sum(secs) if secs else None


def _passes(config_plan: ConfigPlan, variant_plan: VariantPlan) -> int:
    """2 for a variant run twice for the noise bound (``noise_runs_when: always``), else 1."""
    twice = {c.baseline for c in config_plan.config.comparisons if c.noise_runs > 1 and c.noise_runs_when == "always"}
    return 2 if variant_plan.name in twice else 1


def _from_history(config_plan: ConfigPlan, variant_plan: VariantPlan, need: int,
                  records: Sequence[RunRecord]) -> VariantCost | None:
    for source, same_sha in ((SOURCE_SAME_CONFIG, True), (SOURCE_SAME_NAME, False)):
        found: list[tuple[float, float, float]] = []
        for rec in reversed(records):  # newest first
            c = rec.config(config_plan.name)
            if c is None or (same_sha and c.sha256 != config_plan.config.sha256):
                continue
            v = c.variants.get(variant_plan.name)
            if v is None or v.startup_seconds is None or v.error:
                continue
            ev = _evaluation(v)
            asked = _asked(v)
            if ev is None or not asked:
                continue
            found.append((v.startup_seconds, ev * _questions(config_plan) / asked,
                          v.teardown_seconds if v.teardown_seconds is not None else DEFAULT_TEARDOWN_SECONDS))
            if len(found) == HISTORY_RUNS:
                break
        if found:
            return VariantCost(config_plan.name, variant_plan.name, need, statistics.median(f[0] for f in found),
                               statistics.median(f[1] for f in found), statistics.median(f[2] for f in found),
                               source, len(found))
    return None


def estimate_plan(plan: Plan, records: Sequence[RunRecord], gpus: bool,
                  only: Sequence[str] | None = None) -> list[VariantCost]:
    """One :class:`VariantCost` per variant that would start a server, in plan order.

    Args:
        plan: the plan (``--shard`` already applied).
        records: earlier run records, oldest first (:func:`harness.report.history.load_records`).
        gpus: whether the host has devices (else every ``need`` is 0).
        only: ``--variant`` names, or None for all.

    Raises:
        ValueError: a variant's parallel size is not a positive integer (names the variant).
    """
    out = []
    for config_plan in plan.configs:
        for variant_plan in config_plan.variants:
            if (only is not None and variant_plan.name not in only) or variant_plan.not_applicable:
                continue
            need = variant_need(variant_plan.argv, variant_plan.id) if gpus else 0
            est = _from_history(config_plan, variant_plan, need, records)
            if est is None:
                evaluation = _questions(config_plan) * DEFAULT_SECONDS_PER_QUESTION * _passes(config_plan, variant_plan)
                est = VariantCost(config_plan.name, variant_plan.name, need, DEFAULT_STARTUP_SECONDS, evaluation,
                                  DEFAULT_TEARDOWN_SECONDS, SOURCE_DEFAULTS)
            out.append(est)
    return out


def schedule(costs: Sequence[VariantCost], devices: Sequence[str],
             max_servers: int | None = None) -> tuple[list[Slot], str]:
    """Where and when each variant's server runs, and the scheduler's name, from
    :func:`harness.config.schedule.simulate` (longest first on disjoint device sets,
    ``packed``; one at a time in plan order on a CPU host, ``sequential``).

    Returns:
        ``(slots, scheduler)``; slots in start order.

    Raises:
        ValueError: (``ScheduleError``) a variant needs more devices than there are (names it).
    """
    by_key = {f"{c.config}/{c.variant}": c for c in costs}
    sim = simulate([Item(k, max(1, c.need), c.seconds) for k, c in by_key.items()], tuple(devices), max_servers)
    slots = [Slot(by_key[s.key].config, by_key[s.key].variant, s.devices, s.start, s.end) for s in sim.slots]
    return slots, ("packed" if devices else "sequential")


def plan_cost(plan: Plan, results_dir: str | Path | None, env: Mapping[str, str] | None = None,
              only: Sequence[str] | None = None, gpus: str | None = None,
              max_servers: int | None = None, assume_devices: bool = False) -> PlanCost:
    """The list's estimate: variant costs from ``results_dir``'s records, scheduled
    (:func:`schedule`) on the devices evalrun may use
    (:func:`harness.engine.devices.planned_devices` of ``env``, default ``os.environ``,
    capped by ``gpus``, the ``--gpus`` option) with at most ``max_servers`` alive. With
    ``assume_devices`` (the dry run only) a ``--gpus`` count above the devices found
    plans that many devices that are not there, and a note says so.

    Raises:
        ValueError: a bad ``--gpus``, a malformed parallel size, or a variant needing more
            devices than there are (each names it).

    A missing or unreadable results folder means no history (said in ``notes``), never an
    error: the estimate then comes from the defaults.
    """
    devices, assumed = planned_devices(os.environ if env is None else env, plan.python, gpus, assume_devices)
    records: list[RunRecord] = []
    notes: list[str] = [assumed] if assumed else []
    if results_dir is not None and Path(results_dir).is_dir():
        from harness.report.history import load_records  # noqa: PLC0415 - history loads pandas

        records, problems = load_records(results_dir)
        if problems:
            notes.append(f"{len(problems)} run record(s) under {results_dir} could not be read and are not used")
    else:
        notes.append(f"no results folder {results_dir}: no earlier runs")
    costs = estimate_plan(plan, records, bool(devices), only)
    slots, name = schedule(costs, devices, max_servers)
    requests = {
        config_plan.name: {t.name: task_size(t.spec) for t in config_plan.tasks} for config_plan in plan.configs
    }
    return PlanCost(tuple(costs), tuple(slots), tuple(devices), name, tuple(notes), requests)


def task_share_line(requests: dict[str, int]) -> str:
    """Each task's requests per variant pass and share of the evaluation estimate (which
    is per request: history scales by requests, defaults are per question)."""
    total = sum(requests.values()) or 1
    return "    per task (requests of one variant pass, share of its evaluation estimate): " + ", ".join(
        f"{t} {n:,} ({n / total:.1%})" for t, n in requests.items())


def _s(x: float) -> str:
    return f"{x:,.0f} s" if x >= 10 else f"{x:.1f} s"


def render_cost(pc: PlanCost) -> list[str]:
    """The dry run's schedule and cost section, as lines."""
    host = f"{len(pc.devices)} device(s) ({','.join(pc.devices)})" if pc.devices else "CPU host (no devices)"
    lines = ["", f"Schedule and cost ({host}; {pc.scheduler}"
             + (": one server at a time)" if pc.scheduler == "sequential"
               else ": longest first, side by side on disjoint devices)")]
    by_key = {(v.config, v.variant): v for v in pc.variants}
    starts = sorted({s.start for s in pc.slots})
    for k, t0 in enumerate(starts, 1):
        group = [s for s in pc.slots if s.start == t0]
        lines.append(f"  step {k} (at {_s(t0)}): " + "; ".join(
            f"{s.config}/{s.variant} on " + (f"devices {','.join(s.devices)}" if s.devices else "CPU")
            + f" until {_s(s.end)}" for s in group))
    totals = pc.config_totals()
    for name, tot in totals.items():
        mine = [v for v in pc.variants if v.config == name]
        lines.append(f"  {name}: wall {_s(tot['wall_seconds'])}, GPU-seconds {tot['gpu_seconds']:,.0f}")
        if len(pc.task_requests.get(name, {})) > 1:
            lines.append(task_share_line(pc.task_requests[name]))
        for v in mine:
            lines.append(f"    {v.variant}: start-up {_s(v.startup)} + evaluation {_s(v.evaluation)} + teardown "
                         f"{_s(v.teardown)}, needs {v.need} device(s); "
                         + (f"from {v.source}, median of {v.runs} run(s)" if v.runs else "estimate from defaults"))
        if all(by_key[(name, v.variant)].source == SOURCE_DEFAULTS for v in mine):
            lines.append(f"    no earlier runs of this config: estimate from defaults (start-up "
                         f"{DEFAULT_STARTUP_SECONDS:g} s, {DEFAULT_SECONDS_PER_QUESTION:g} s per question, "
                         f"teardown {DEFAULT_TEARDOWN_SECONDS:g} s; guesses)")
    lines.append(f"  list: wall {_s(pc.wall_seconds)}, GPU-seconds {pc.gpu_seconds:,.0f}")
    lines += [f"  note: {n}" for n in pc.notes]
    return lines


def cost_json(pc: PlanCost, config: str | None = None) -> dict[str, Any]:
    """The estimate as JSON: for one ``config`` its variants, slots and totals; for None
    the list's (every variant and slot, ``wall_seconds``, ``gpu_seconds``, devices,
    scheduler, defaults used, notes)."""
    def keep(name: str) -> bool:
        return config is None or name == config

    out: dict[str, Any] = {
        "variants": [{"config": v.config, "variant": v.variant, "need": v.need, "startup_seconds": v.startup,
                      "evaluation_seconds": v.evaluation, "teardown_seconds": v.teardown, "seconds": v.seconds,
                      "source": v.source, "runs": v.runs} for v in pc.variants if keep(v.config)],
        "schedule": [{"config": s.config, "variant": s.variant, "devices": list(s.devices), "start": s.start,
                      "end": s.end, "gpu_seconds": s.gpu_seconds} for s in pc.slots if keep(s.config)],
    }
    if config is not None:
        out.update(pc.config_totals().get(config, {"wall_seconds": 0.0, "server_seconds": 0.0, "gpu_seconds": 0.0}))
        out["from_defaults"] = all(v["source"] == SOURCE_DEFAULTS for v in out["variants"])
    else:
        out.update({"wall_seconds": pc.wall_seconds, "gpu_seconds": pc.gpu_seconds, "devices": list(pc.devices),
                    "scheduler": pc.scheduler, "notes": list(pc.notes),
                    "defaults": {"startup_seconds": DEFAULT_STARTUP_SECONDS,
                                 "seconds_per_question": DEFAULT_SECONDS_PER_QUESTION,
                                 "teardown_seconds": DEFAULT_TEARDOWN_SECONDS}})
    return out


def config_cost_weights(configs: Iterable[ConfigPlan], records: Sequence[RunRecord]) -> dict[str, int]:
    """Shard weight of each config: estimated device-seconds, sum over its variants of
    seconds x max(1, devices needed) (GPU-seconds when each server gets what it needs;
    server seconds on a CPU host), rounded up to whole seconds, at least 1.

    Raises:
        ValueError: a variant's parallel size is not a positive integer.
    """
    plan = Plan(configs=tuple(configs))
    totals = {config_plan.name: 0.0 for config_plan in plan.configs}
    for v in estimate_plan(plan, records, gpus=True):
        totals[v.config] += v.seconds * max(1, v.need)
    return {name: max(1, math.ceil(w)) for name, w in totals.items()}


class TwinCost(TypedDict):
    """What the V1-runner twins add to a list (:func:`twin_cost`; the dry run's JSON
    ``v1_runner_twins``): the twins' variant ids, their count (``passes``), and the extra
    wall time and GPU-seconds (estimates)."""

    variants: list[str]
    passes: int
    wall_seconds: float
    gpu_seconds: float


def twin_cost(default: PlanCost, with_twins: PlanCost) -> TwinCost:
    """What the V1-runner twins (``--v1-runner-variants``) add to a list (:class:`TwinCost`:
    estimates, the difference of the two schedules)."""
    have = {(v.config, v.variant) for v in default.variants}
    added = [f"{v.config}/{v.variant}" for v in with_twins.variants if (v.config, v.variant) not in have]
    return {"variants": added, "passes": len(added),
            "wall_seconds": with_twins.wall_seconds - default.wall_seconds,
            "gpu_seconds": with_twins.gpu_seconds - default.gpu_seconds}


def render_twin_cost(t: TwinCost) -> str:
    """The dry run's line on the V1-runner twins that are not run (:func:`twin_cost`)."""
    return (f"  V1-runner twins: not run (every variant runs the engine's default model runner); "
            f"--v1-runner-variants adds {t['passes']} variant(s) ({', '.join(t['variants'])}): "
            f"+{_s(t['wall_seconds'])} wall, +{t['gpu_seconds']:,.0f} GPU-seconds (estimated)")
