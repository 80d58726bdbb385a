"""The dry run: the plan for people (``--dry-run``), with the smallest accuracy drops its gates can detect."""

from __future__ import annotations

from pathlib import Path
from statistics import NormalDist
from typing import Any, NotRequired, Sequence, TypedDict

from harness.analysis.gatekinds.sampled_equivalence import SampledEquivalence
from harness.analysis.sampled import detectable_shift
from harness.analysis.stats import floor_margin, min_detectable_drop
from harness.config.expected import gate_matches
from harness.config.gates import plan_gates, sampling_notes
from harness.config.plan import CLI_MODULE, Plan
from harness.config.schema import GateSpec, ModelConfig, TaskSpec
from harness.config.vllm_args import (
    PER_REQUEST_DEST,
    PER_REQUEST_FLAG,
    PER_REQUEST_LEVEL,
    hits_of,
    per_request_missing,
)
from harness.records.numerics_noise import noise_record
from harness.records.run_record import SubsetWarning
from harness.report.budget_plan import budget_plan, render_budget
from harness.report.cost import PlanCost, cost_json, render_cost
from harness.report.dry_run_family import family_false_fail_of, render_family
from harness.report.dry_run_measured import (
    MeasuredFigures,
    assumed,
    discordance_of,
    measured_json,
    render_measured,
)
from harness.tasks import (
    GSM8K_TEST_SIZE,
    DataUnavailableError,
    ShortDataError,
    available_questions,
    check_enough,
    task_size,
)
from harness.tasks.shapes import plan_lengths
from harness.tasks.synthetic import DEFAULT_NUM_TEST

#: Power assumed by :func:`detectable_drops` (docs/gates.md, "Detectable drop in the dry run").
DEFAULT_POWER = 0.8
#: One-sided level of the floor gate's sampling margin (:func:`harness.analysis.stats.floor_margin`).
FLOOR_ALPHA = 0.05

#: One config's entry of ``--dry-run --json``: :meth:`Plan.to_json`'s JSON object with the
#: dry run's additions; printed as JSON, read by people and CI scripts, not by evalrun.
PlanEntryJson = dict[str, Any]


class FloorDrops(TypedDict):
    """The floor gate's detectable drops of one task (:func:`detectable_drops`): accuracy
    fractions; the last three only when the task has an ``accuracy_threshold``."""

    alpha: float
    test_drop: float
    gate_drop: float | None
    tolerance: NotRequired[float]
    margin: NotRequired[float]
    calibration_questions: NotRequired[int | None]


class PairedDrop(TypedDict):
    """The paired McNemar test's detectable drop of one comparison and task
    (:func:`detectable_drops`); ``test_drop`` None when no drop up to the discordance is."""

    baseline: str
    candidate: str
    alpha: float
    expected_discordance: float
    test_drop: float | None
    max_accuracy_drop: float
    discordance: NotRequired[float]  # with calibration figures: the discordance used, and its source
    discordance_source: NotRequired[str]


class SampledShift(TypedDict):
    """The sampled verdict's detectable shift of one comparison on a sampling task
    (:func:`detectable_drops`): nats per token of the target's mean log-probability."""

    baseline: str
    candidate: str
    alpha: float
    expected_logprob_sd: float
    shift: float
    independent: bool
    #: why the gate is planned NOT RUN (dependent draws, too few questions), else None
    not_run_reason: str | None
    logprob_sd_source: NotRequired[str]  # with calibration figures (calibrate does not measure it)


class DetectableDrops(TypedDict):
    """One task's entry of :func:`detectable_drops`: ``n`` questions, accuracy ``p``
    (``p_assumed``: 0.5 taken for want of a threshold) and the wanted ``power``."""

    task: str
    n: int
    p: float
    p_assumed: bool
    power: float
    floor: FloorDrops
    paired: list[PairedDrop]
    sampled: list[SampledShift]


class DataCount(TypedDict):
    """What one task's data holds (:func:`data_counts`)."""

    asked: int | None
    available: int | None
    source: str | None
    refused: str | None
    note: str | None


def detectable_drops(config: ModelConfig, power: float = DEFAULT_POWER, only: Sequence[str] | None = None,
                     measured: MeasuredFigures | None = None) -> list[DetectableDrops]:
    """The smallest accuracy drops the gates of ``config`` can detect, per task.

    For each task with n questions (:func:`task_size`) and p = the config's
    ``accuracy_threshold`` (0.5, the worst case, when there is none):

    * ``floor.test_drop``: :func:`harness.analysis.stats.min_detectable_drop` ``(n, p, alpha,
      power)``: a one-sided level-alpha one-sample test of a proportion detects a true
      drop delta with probability ``power`` when ``delta >= (z_{1-alpha} + z_power)
      sqrt(p(1-p)/n)`` (normal approximation; Chow, Shao & Wang, Sample Size
      Calculations in Clinical Research, sec. 4.1). alpha = :data:`FLOOR_ALPHA`.
    * ``floor.gate_drop`` (with a threshold): the floor gate as configured fails when
      the observed accuracy is below ``threshold - tolerance - margin`` (margin =
      :func:`harness.analysis.stats.floor_margin` for a run smaller than
      ``calibration_questions``); with true accuracy ``threshold - delta`` and
      standard error ``se = sqrt(p(1-p)/n)`` it fails with probability ``power``
      once ``delta >= tolerance + margin + z_power * se``.
    * ``paired[]`` (one per comparison with ``max_accuracy_drop``): the paired
      McNemar test at the comparison's alpha, assuming a share ``psi =
      expected_discordance`` of questions right in exactly one variant:
      :func:`harness.analysis.stats.min_detectable_drop` with ``discordance=psi`` (Connor 1987,
      Biometrics 43:207-211); None when not even delta = psi is detectable.
      The gate also fails whenever the observed drop exceeds ``max_accuracy_drop``.
    * ``sampled[]`` (one per comparison of a task that samples): the shift of the
      target's mean log-probability per token the two-sided sign-flip test detects,
      :func:`harness.analysis.sampled.detectable_shift` with the comparison's
      ``expected_logprob_sd``.

    Args:
        config: a validated config.
        power: wanted probability of detection, in (0.5, 1).
        only: variant names chosen with ``--variant``; comparisons involving others
            are left out (None = all).
        measured: ``--calibration``'s figures (:mod:`harness.report.dry_run_measured`): its
            discordance replaces ``expected_discordance`` where measured; entries name sources.

    Returns:
        ``[{"task", "n", "p", "p_assumed", "power", "floor": {...} , "paired": [...]}]``;
        drops are accuracy fractions.
    """
    out: list[DetectableDrops] = []
    for tname, t in config.tasks.items():
        g = config.gates_for(tname)
        n = task_size(t)
        p = 0.5 if g.accuracy_threshold is None else g.accuracy_threshold
        out.append({"task": tname, "n": n, "p": p, "p_assumed": g.accuracy_threshold is None, "power": power,
                    "floor": _floor_drops(g, n, p, power),
                    "paired": _paired_drops(config, n, p, power, only, tname, measured),
                    "sampled": _sampled_shifts(config, tname, n, power, only, measured)})
    return out


def _sampled_shifts(config: ModelConfig, tname: str, n: int, power: float,
                    only: Sequence[str] | None, measured: MeasuredFigures | None = None) -> list[SampledShift]:
    """The ``sampled`` entries of :func:`detectable_drops` for task ``tname``: one per
    planned ``sampled_equivalence`` gate (among the variants ``only``, when given)."""
    comps = {(c.baseline, c.candidate): c for c in config.comparisons}
    out: list[SampledShift] = []
    for g in plan_gates(config):
        if not isinstance(g, SampledEquivalence) or g.task != tname or g.baseline is None:
            continue
        if only is not None and not {g.baseline, g.variant} <= set(only):
            continue
        sd = comps[(g.baseline, g.variant)].expected_logprob_sd
        out.append({"baseline": g.baseline, "candidate": g.variant, "alpha": g.limit, "expected_logprob_sd": sd,
                    "shift": detectable_shift(n, sd, g.limit, power), "independent": g.independent,
                    "not_run_reason": g.dependence or None})
        if measured is not None:
            out[-1]["logprob_sd_source"] = assumed(comps[(g.baseline, g.variant)], "expected_logprob_sd")
    return out


def _floor_drops(g: GateSpec, n: int, p: float, power: float) -> FloorDrops:
    """The ``floor`` entry of :func:`detectable_drops` for one task (its gates ``g``)."""
    floor: FloorDrops = {
        "alpha": FLOOR_ALPHA,
        "test_drop": min_detectable_drop(n, p, FLOOR_ALPHA, power),
        "gate_drop": None,
    }
    if g.accuracy_threshold is not None:
        cal = g.calibration_questions
        margin = floor_margin(n, cal, p, 1 - FLOOR_ALPHA) if cal is not None and n < cal else 0.0
        z_pow = NormalDist().inv_cdf(power)
        floor["tolerance"], floor["margin"], floor["calibration_questions"] = g.tolerance, margin, cal
        floor["gate_drop"] = g.tolerance + margin + z_pow * (p * (1 - p) / n) ** 0.5
    return floor


def _paired_drops(config: ModelConfig, n: int, p: float, power: float, only: Sequence[str] | None,
                  tname: str = "", measured: MeasuredFigures | None = None) -> list[PairedDrop]:
    """The ``paired`` entries of :func:`detectable_drops` for one task: one per comparison
    with a ``max_accuracy_drop`` (among the variants ``only``, when given)."""
    paired: list[PairedDrop] = []
    for comp in config.comparisons:
        if comp.max_accuracy_drop is None:
            continue
        if only is not None and not {comp.baseline, comp.candidate} <= set(only):
            continue
        psi, src = discordance_of(config, comp, tname, measured)
        paired.append({
            "baseline": comp.baseline, "candidate": comp.candidate, "alpha": comp.alpha,
            "expected_discordance": comp.expected_discordance,
            "test_drop": _finite(min_detectable_drop(n, p, comp.alpha, power, discordance=psi)),
            "max_accuracy_drop": comp.max_accuracy_drop,
        })
        if measured is not None:
            paired[-1]["discordance"], paired[-1]["discordance_source"] = psi, src
    return paired


def full_test_size(spec: TaskSpec) -> int:
    """Questions in the whole test set of a task's kind: GSM8K 1319 (vLLM's default
    ``num_questions``), the synthetic task's :data:`~harness.tasks.synthetic.DEFAULT_NUM_TEST`."""
    if spec.kind == "synthetic":

        return DEFAULT_NUM_TEST
    return GSM8K_TEST_SIZE


def subset_warnings(config: ModelConfig, confidence: float = 1 - FLOOR_ALPHA) -> list[SubsetWarning]:
    """Tasks that ask fewer questions than their threshold was presumably measured on.

    For every task with an ``accuracy_threshold`` and no ``calibration_questions``,
    the threshold is taken to come from the whole test set (N questions,
    :func:`full_test_size`; vLLM's configs are calibrated on all 1319 GSM8K
    questions). A run on n < N of them differs from the threshold by sampling alone
    by up to ``margin = floor_margin(n, N, p)`` (one-sided, ``confidence``;
    :func:`harness.analysis.stats.floor_margin`, p = the threshold), which the floor
    gate does not allow for while ``calibration_questions`` is unset.

    Returns:
        one :class:`~harness.records.run_record.SubsetWarning` per such task: ``floor`` =
        threshold - tolerance (what the gate applies), ``fair_floor`` = floor - margin
        (what the run would need to be fair); accuracy fractions.
    """
    out: list[SubsetWarning] = []
    for tname, spec in config.tasks.items():
        g = config.gates_for(tname)
        if g.accuracy_threshold is None or g.calibration_questions is not None:
            continue
        n, full = task_size(spec), full_test_size(spec)
        if n >= full:
            continue
        margin = floor_margin(n, full, g.accuracy_threshold, confidence)
        floor = round(g.accuracy_threshold - g.tolerance, 6)
        fair = round(floor - margin, 6)
        out.append(SubsetWarning(
            task=tname, questions=n, assumed_calibration_questions=full,
            accuracy_threshold=g.accuracy_threshold, floor=floor, margin=margin, fair_floor=fair,
            message=(
                f"task {tname}: the run asks {n} questions, but accuracy_threshold {g.accuracy_threshold} was "
                f"presumably measured on all {full} (calibration_questions is not set): sampling alone moves a "
                f"{n}-question score by up to {margin:.3f} (one-sided {confidence:.0%}), so the floor {floor:.3f} "
                f"is unfair to this run; a fair floor is {fair:.3f} (set calibration_questions: {full} to apply it)"
            ),
        ))
    return out


def _finite(x: float) -> float | None:
    return None if x == float("inf") else x


def render_detectable_drops(config: ModelConfig, power: float = DEFAULT_POWER, only: Sequence[str] | None = None,
                            measured: MeasuredFigures | None = None) -> list[str]:
    """Lines for ``--dry-run`` stating :func:`detectable_drops` with their assumptions."""
    def pts(x: float | None) -> str:
        return f"{x:.3f}" if x is not None else "none (not even a drop equal to the discordance)"

    lines = []
    for d in detectable_drops(config, power, only, measured):
        f = d["floor"]
        pa = " (no accuracy_threshold: worst case p = 0.5 assumed)" if d["p_assumed"] else ""
        lines.append(
            f"  detectable accuracy drop, task {d['task']}: n={d['n']}, p={d['p']}{pa}, power {d['power']}"
        )
        lines.append(
            f"    floor: a one-sided alpha={f['alpha']} test detects drops >= {pts(f['test_drop'])} "
            f"[(z_(1-alpha) + z_power) * sqrt(p(1-p)/n)]"
        )
        t = config.tasks.get(d["task"])
        if f["gate_drop"] is not None and config.false_alarm_budget is not None and t is not None and not t.vllm_rules:
            lines.append(
                f"    floor gate with the false-alarm budget: fails only when an exact binomial test shows the "
                f"accuracy below accuracy_threshold - tolerance at its share of the budget (no calibration_questions "
                f"widening: the test accounts for the run's {d['n']} questions; docs/gates.md, \"The false-alarm "
                "budget\")"
            )
        elif f["gate_drop"] is not None:
            cal = f["calibration_questions"]
            if cal is None:
                size = "threshold calibration size unknown (set calibration_questions)"
            elif cal > d["n"]:
                size = (f"threshold measured on {cal} questions, this run asks {d['n']}: "
                        f"floor widened by margin {f['margin']:.3f} (finite-population sampling error)")
            else:
                size = f"threshold measured on {cal} questions, this run asks {d['n']}: no margin"
            lines.append(f"    {size}")
            lines.append(
                f"    floor gate as configured: fails with probability {d['power']} only for drops >= "
                f"{pts(f['gate_drop'])} [tolerance {f['tolerance']} + margin {f['margin']:.3f} + z_power * "
                "sqrt(p(1-p)/n)]"
            )
        for q in d["paired"]:
            lines.append(
                f"    paired {q['baseline']} -> {q['candidate']}: one-sided McNemar alpha={q['alpha']} detects "
                + (f"drops >= {q['test_drop']:.3f}" if q["test_drop"] is not None
                   else "no drop (not even one equal to the discordance)")
                + (f" assuming discordance {q['expected_discordance']} (expected_discordance; Connor 1987); "
                   if "discordance_source" not in q else
                   f" assuming discordance {q['discordance']:.4g} ({q['discordance_source']}; Connor 1987); ")
                + (f"the gate also fails above max_accuracy_drop {q['max_accuracy_drop']}"
                   if config.false_alarm_budget is None else
                   f"with the false-alarm budget the gate fails only on a drop shown beyond its margin "
                   f"{q['max_accuracy_drop']} at its share of the budget (power: docs/gates.md, \"Power given up\")")
            )
        for sh in d["sampled"]:
            lines.append(
                f"    sampled {sh['baseline']} -> {sh['candidate']}: two-sided sign-flip test alpha={sh['alpha']} "
                f"detects a shift of the target's mean log-probability per token >= {sh['shift']:.3f} nats "
                f"[(z_(1-alpha/2) + z_power) * sd / sqrt(n)] assuming sd {sh['expected_logprob_sd']} of the "
                "per-question difference (expected_logprob_sd)"
                + (f" ({sh['logprob_sd_source']})" if "logprob_sd_source" in sh else "")
                + ("" if sh["independent"] else f"; NOT RUN as planned: {sh['not_run_reason']}"))
    return lines


#: Port written into the dry run's command lines so they run as pasted; a real run
#: picks a free port at start-up instead.
DRY_RUN_PORT = 8000


def data_counts(plan: Plan, data_dir: Path | None = None) -> dict[str, DataCount]:
    """What each task's data holds, for the dry run (no server): ``{task id:
    {"asked": n or None, "available": count or None, "source": str | None,
    "refused": message or None, "note": str | None}}``; a run refuses a task whose
    data holds fewer than it asks (:func:`harness.tasks.check_enough`)."""
    out: dict[str, DataCount] = {}
    for config_plan in plan.configs:
        for t in config_plan.tasks:
            row: DataCount = {"asked": t.spec.num_questions, "available": None, "source": None,
                                   "refused": None, "note": None}
            try:
                got = available_questions(t.name, t.spec, data_dir)
            except DataUnavailableError as e:
                got, row["note"] = None, f"data not available: {e}"
            if got is None and row["note"] is None:
                row["note"] = "counted when the task is loaded (hub or lm-eval data)"
            if got is not None:
                row["available"], row["source"] = got
                try:
                    check_enough(t.name, t.spec, *got)
                except ShortDataError as e:
                    row["refused"] = str(e)
            out[t.id] = row
    return out


def _data_text(row: DataCount | None) -> str:
    if not row:
        return ""
    if row["available"] is None:
        return f", available: {row['note']}"
    asked = row["asked"]
    used = row["available"] if asked is None else min(asked, row["available"])
    text = f", available: {row['available']} in {row['source']} (asks {used})"
    if row["refused"]:
        text += " -- REFUSED: fewer than num_questions"
    return text


def shape_text(spec: TaskSpec) -> str:
    """A ``kind: shape`` task for the dry run: its kind, requests per variant pass
    (:func:`harness.tasks.task_size`) and, where the kind fixes them, the prompt lengths
    and prompt tokens sent (:func:`harness.tasks.shapes.plan_lengths`; ``prefix_reuse``:
    ``2 x prompts x prompt_tokens``)."""
    shape = spec.shape
    assert shape is not None
    n = task_size(spec)
    if shape.kind == "prompt_edges":
        places = plan_lengths(shape)
        edges = ", ".join(f"{k} {v}" for k, v in shape.edges().items())
        lengths = ", ".join(str(x) for x in sorted({p.length for p in places}))
        return (f"prompt_edges: {n} requests (edges {edges}; lengths {lengths}; {shape.prompts_per_length} "
                f"prompts each; {sum(p.length for p in places):,} prompt tokens)")
    if shape.kind == "prefix_reuse":
        assert shape.prompt_tokens is not None
        return (f"prefix_reuse: {n} requests ({shape.prompts} prompts of {shape.prompt_tokens} tokens sharing the "
                f"first {shape.prefix_tokens}, a cold pass then a warm one; {n * shape.prompt_tokens:,} prompt "
                "tokens; NOT RUN on a variant whose engine has prefix caching off)")
    return f"{shape.kind}: {n} requests"


def render_runner_cost(c: ModelConfig) -> list[str]:
    """What covering both model runners and the on-demand noise reruns cost, in passes
    of every task: one per variant; a V1 variant (``model_runner: v1``) beside
    default-runner variants is the price of running both code paths."""
    runs = {name: v.model_runner for name, v in c.variants.items()}
    v1 = [n for n, r in runs.items() if r == "v1"]
    out = []
    if v1 and len(v1) < len(runs):
        out.append(f"  model runners: {', '.join(n for n in runs if n not in v1)} on vLLM's default, "
                   f"{', '.join(v1)} on V1: {len(v1)} of {len(runs)} passes of every task "
                   f"(+{len(v1) / (len(runs) - len(v1)):.0%} server time) cover the V1 path")
    lazy = sorted({x.baseline for x in c.comparisons if x.noise_runs > 1 and x.noise_runs_when == "unexplained"})
    if lazy:
        out.append(f"  noise reruns of {', '.join(lazy)}: only when divergences are left that no reference "
                   "distribution judges (then one more server start and pass of that task)")
    return out


def per_request_line(argv: Sequence[str]) -> str:
    """The dry run's line on a speculative variant's per-request acceptance: evalrun's
    addition of :data:`harness.config.vllm_args.PER_REQUEST_FLAG`, the config's own setting,
    or why it is missing (:func:`harness.config.vllm_args.per_request_missing`)."""
    if (missing := per_request_missing()) is not None:
        return f"per-request acceptance: not asked: {missing}"
    at = [i for i, a in enumerate(argv) if a == PER_REQUEST_FLAG]
    # evalrun's addition sits right before ``--host`` (harness.config.plan.server_argv)
    if at and list(argv[at[-1] + 1:at[-1] + 3]) == [PER_REQUEST_LEVEL, "--host"] and not hits_of(
            [a for i, a in enumerate(argv) if i not in (at[-1], at[-1] + 1)], PER_REQUEST_DEST):
        return (f"{PER_REQUEST_FLAG} {PER_REQUEST_LEVEL}: evalrun's addition (observability only: each response "
                "carries the request's own acceptance counts, metrics.speculative_decoding)")
    return f"per-request acceptance: as the config sets {PER_REQUEST_FLAG}"


def render_plan(plan: Plan, only: Sequence[str] | None = None,
                counts: dict[str, DataCount] | None = None, measured: MeasuredFigures | None = None) -> str:
    """Human-readable plan for ``--dry-run``: every config, variant command, task and gate.

    Args:
        plan: the plan.
        only: variant names chosen with ``--variant`` (None = all): only these are
            listed, with their gates; the gates of the others are counted as NOT RUN.
        counts: :func:`data_counts` (the questions each task's data holds), or None.
        measured: ``--calibration``'s figures (:mod:`harness.report.dry_run_measured`), or None.

    Returns:
        The text. Commands are shell lines that run as pasted (quoted with
        :func:`shlex.join`), with port :data:`DRY_RUN_PORT` in place of the free port
        a real run picks.
    """
    # long: a renderer, one section of the plan after the other in the order it is printed
    lines: list[str] = []
    lines.append(
        f"(commands use port {DRY_RUN_PORT} so they run as pasted; a run picks a free port at start-up. "
        "A builtin:<name> model becomes the folder of the built model in ~/.cache/evalrun/models.)"
    )
    if plan.list_path:
        lines.append(f"model list read: {plan.list_path}")
    lines.append(f"server_args read with {plan.server_args_read_with}")
    if (noise := noise_record()) is not None:  # the run would start every server with it
        lines.append(f"{noise.describe().split('; seeds')[0]}; a fresh seed per server start")
    lines.append("")
    for config_plan in plan.configs:
        c = config_plan.config
        lines.append(f"config {c.name}  ({c.path}, {c.form} form)")
        lines.append(f"  model: {c.model}")
        for w in c.warnings:
            lines.append(f"  warning: {w.message}")
        if c.trust_remote_code:
            lines.append("  --trust-remote-code: the model's own code from the hub runs, as in vLLM's CI"
                         if c.form == "vllm-gsm8k" else "  --trust-remote-code: asked by the config")
        chosen = [v for v in config_plan.variants if only is None or v.name in only]
        left = [v.name for v in config_plan.variants if v not in chosen]
        for v in chosen:
            if v.not_applicable:
                lines.append(f"  variant {v.name}: NOT APPLICABLE (no server starts; its gates are NOT RUN): "
                             f"{v.not_applicable}")
                lines.append(f"    command it would need: {v.vllm_line(DRY_RUN_PORT)}")
                continue
            lines.append(f"  variant {v.name}:")
            lines.append(f"    command: {v.vllm_line(DRY_RUN_PORT)}")
            if v.speculative_config is not None:
                lines.append("    " + per_request_line(v.argv))
            if v.fault:
                lines.append(f"    fault injected: {v.fault}")
            lines.append(f"    engine build: {v.build} (interpreter {v.python})" if v.build else
                         f"    engine build: the run's ({v.python})")
            lines.append(f"    vllm = {v.python} -m {CLI_MODULE}, the console script's entry point")
            lines.append("    model runner: " + (f"{v.model_runner} "
                                                 f"(VLLM_USE_V2_MODEL_RUNNER={v.env.get('VLLM_USE_V2_MODEL_RUNNER')})"
                                               if v.model_runner else "vLLM's default (V2 on CUDA with Triton, V1 on "
                                               "the CPU)"))
            if v.logprobs:
                lines.append(f"    asks top-{v.logprobs} log-probabilities per generated token "
                             "(the output-match reference: divergences are judged by its distribution)")
        if left:
            lines.append(f"  variants left out (--variant): {', '.join(left)}")
        for t in config_plan.tasks:
            s = t.spec
            if s.shape is not None:  # a traffic shape: its requests, not a data set's questions
                lines.append(f"  task {t.name}: shape {shape_text(s)}, max_tokens={s.max_tokens}, "
                             + ("temperature not sent (server default)" if s.temperature is None
                                else f"temperature={s.temperature}")
                             + (", seed not sent" if s.seed is None else f", seed={s.seed}"))
                continue
            lines.append(
                f"  task {t.name}: {s.kind}, questions={s.num_questions or 'all'}, "
                f"fewshot={s.num_fewshot}, max_tokens={s.max_tokens}, "
                + ("temperature not sent (server default)" if s.temperature is None else f"temperature={s.temperature}")
                + (", seed not sent" if s.seed is None else f", seed={s.seed}")
                + ("" if s.seed_mode != "per_run" else f", seeds per run (from run {s.seed_run}'s id, pinned)"
                   if s.seed_run else ", seeds per run (from the run id, recorded as seed_run)")
                + (", /v1/chat/completions (one user message, vLLM's stop strings)" if s.use_chat_completions else "")
                + (f", gen_prefix={s.gen_prefix!r}" if s.gen_prefix else "")
                + ("" if s.required else ", optional (reported as not run when data is missing)")
                + _data_text((counts or {}).get(t.id))
            )
            row = (counts or {}).get(t.id)
            if row and row["refused"]:
                lines.append(f"    REFUSED: {row['refused']}")
        lines += [f"  note: {n}" for n in sampling_notes(c)]
        lines += render_runner_cost(c)
        lines += render_measured(c, measured) if measured is not None else []
        lines += render_detectable_drops(c, only=only, measured=measured)
        lines += render_budget(c) if c.false_alarm_budget is not None else render_family(c, measured)
        lines.append("  gates:")
        skipped = 0
        na = {v.name for v in config_plan.variants if v.not_applicable}
        for g in config_plan.gates:
            if left and (g.variant in left or g.baseline in left):
                skipped += 1
                continue
            lim = "" if g.limit is None else f" {g.op} {g.limit}"
            tag = " [NOT RUN: variant not applicable]" if g.variant in na or g.baseline in na else ""
            declared = [", ".join(d.builds) + (" strict" if d.strict else "") for d in c.expected_failures
                        if any(gate_matches(p, g.id, c.name) for p in d.gates)]
            tag += f" [expected failure on {declared[0]}]" if declared else ""
            lines.append(f"    {g.id}{lim}: {g.description}{tag}")
        if skipped:
            lines.append(f"    ({skipped} gates of the variants left out will be reported NOT RUN)")
        lines.append("")
    return "\n".join(lines)


def render_schedule(cost: PlanCost) -> str:
    """The dry run's schedule and cost section (:func:`harness.report.cost.render_cost`
    of a :class:`~harness.report.cost.PlanCost`): which variants run together, on which
    devices, estimated wall time and GPU-seconds per config and for the list."""
    return "\n".join(render_cost(cost))


def plan_json(plan: Plan, only: Sequence[str] | None = None, counts: dict[str, DataCount] | None = None,
              cost: PlanCost | None = None, measured: MeasuredFigures | None = None) -> list[PlanEntryJson]:
    """``--dry-run --json``: :meth:`Plan.to_json` plus each config's ``detectable_drops``
    and ``family_false_fail`` (:func:`family_false_fail_of`); with ``cost`` (a
    :class:`~harness.report.cost.PlanCost`) each config's ``cost``: its variants'
    estimates, schedule slots and totals (:func:`harness.report.cost.cost_json`), and
    under ``cost.list`` the whole list's wall time, GPU-seconds, devices and scheduler.

    With ``only`` (``--variant`` names) each config lists only those variants and
    the gates that involve only them; ``argv`` keeps the ``{port}`` placeholder. With
    ``measured`` (``--calibration``) the figures carry their sources and each config gets
    ``measured_figures`` (:func:`harness.report.dry_run_measured.measured_json`).
    """
    out = plan.to_json()
    for entry, config_plan in zip(out, plan.configs):
        entry["detectable_drops"] = detectable_drops(config_plan.config, only=only, measured=measured)
        if measured is not None:
            entry["measured_figures"] = measured_json(config_plan.config, measured)
        entry["family_false_fail"] = {  # the rules without the budget: says whether they are this run's
            **family_false_fail_of(config_plan.config, measured),
            "applies": config_plan.config.false_alarm_budget is None,
            "note": "the estimate of the gates' rules without the false-alarm budget (false_alarm_budget: null); "
                    "with a budget, false_alarm_budget.false_fail_bound is this run's"}
        entry["false_alarm_budget"] = budget_plan(config_plan.config)
        entry["sampling_notes"] = sampling_notes(config_plan.config)
        if counts is not None:
            entry["data"] = {t.id: counts.get(t.id) for t in config_plan.tasks}
        if cost is not None:

            whole = cost_json(cost)
            entry["cost"] = cost_json(cost, config_plan.name)
            entry["cost"]["list"] = {k: whole[k] for k in ("wall_seconds", "gpu_seconds", "devices", "scheduler",
                                                           "notes", "defaults")}
        if only is not None:
            keep = set(only)
            entry["variants"] = [v for v in entry["variants"] if v["name"] in keep]
            entry["gates"] = [g for g in entry["gates"]
                              if g["variant"] in keep and (g["baseline"] is None or g["baseline"] in keep)]
            entry["variants_left_out"] = [v.name for v in config_plan.variants if v.name not in keep]
    return out
