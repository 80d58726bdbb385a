"""Planned gates: one typed class per gate kind, all derived from a config here and nowhere else.

The plan (:func:`plan_gates`, :func:`plan_baseline_gates`) is the single source of
every gate: the evaluator (:mod:`harness.analysis.gates`) reads only a planned gate
and the measurements, never the config. Per-task settings (``tasks.<name>.gates``:
pipeline, thresholds, limits) reach every gate of that task because every gate of a
task is built from :meth:`~harness.config.schema.ModelConfig.gates_for` of that task.

Every gate has a stable ``id`` (``<config>/<variant or baseline->candidate>/<task>/<kind>``),
the variant it judges (the candidate for comparisons), its task (None for per-variant
gates), the ``baseline`` variant for comparisons, a ``limit`` and an ``op`` (the value
must be ``>=`` or ``<=`` the limit; ``==`` for yes/no checks), and a sentence for people.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from harness.config.schema import ComparisonSpec, ModelConfig


class GateKind(str, Enum):
    """Every kind of gate evalrun judges (docs/gates.md)."""

    VARIANT_EFFECTIVE = "variant_effective"
    ACCURACY_FLOOR = "accuracy_floor"
    MAX_ERROR_RATE = "max_error_rate"
    MAX_TRUNCATION_RATE = "max_truncation_rate"
    DRAFTS_OBSERVED = "drafts_observed"
    MIN_ACCEPTANCE_LENGTH = "min_acceptance_length"
    MAX_ACCURACY_DROP = "max_accuracy_drop"
    MIN_OUTPUT_MATCH = "min_output_match"
    MAX_ACCEPTANCE_LENGTH_DROP = "max_acceptance_length_drop"
    BASELINE_ACCURACY_DROP = "baseline_accuracy_drop"
    BASELINE_ACCEPTANCE_LENGTH_DROP = "baseline_acceptance_length_drop"
    BASELINE_READABLE = "baseline_readable"
    MAX_POSITION_ACCEPTANCE_DROP = "max_position_acceptance_drop"
    BASELINE_POSITION_ACCEPTANCE_DROP = "baseline_position_acceptance_drop"
    SHAPE_PROVEN = "shape_proven"
    SAMPLED_EQUIVALENCE = "sampled_equivalence"


class _GateBase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    config: str
    variant: str
    task: str | None = None
    baseline: str | None = None
    limit: float | None = None
    op: Literal[">=", "<=", "=="]
    description: str = ""


class VariantEffective(_GateBase):
    """The engine's effective configuration matches what the variant asked for;
    ``expected_effective`` lists settings a platform is known to override (declared
    in the config), which then pass with a note. Facts that cannot be read fail it,
    unless ``engine_facts`` is ``not_reported`` (the config declares the engine cannot
    report them): then it is NOT RUN."""

    kind: Literal[GateKind.VARIANT_EFFECTIVE] = GateKind.VARIANT_EFFECTIVE
    op: Literal["=="] = "=="
    expected_effective: dict[str, Any] | None = None
    engine_facts: Literal["required", "not_reported"] = "required"
    #: ``v1`` / ``v2`` when the variant asks for a model runner, else None.
    model_runner: Literal["v1", "v2"] | None = None
    #: the variants it is compared with that must have run the same model runner (a
    #: comparison with ``allow_mixed_runners`` leaves its pair out).
    same_runner_as: tuple[str, ...] = ()


class AccuracyFloor(_GateBase):
    """``pipeline`` accuracy >= ``limit`` = accuracy_threshold - tolerance (fractions),
    widened by :func:`harness.analysis.stats.floor_margin` when the run has fewer
    scored questions than ``calibration_questions``."""

    kind: Literal[GateKind.ACCURACY_FLOOR] = GateKind.ACCURACY_FLOOR
    op: Literal[">="] = ">="
    limit: float
    pipeline: str
    accuracy_threshold: float
    tolerance: float
    calibration_questions: int | None = None


class MaxErrorRate(_GateBase):
    """Failed requests / requests <= ``limit`` (a failed request is never a wrong answer)."""

    kind: Literal[GateKind.MAX_ERROR_RATE] = GateKind.MAX_ERROR_RATE
    op: Literal["<="] = "<="
    limit: float


class MaxTruncationRate(_GateBase):
    """Completions cut by ``max_tokens`` (``finish_reason: length``) / successful
    completions <= ``limit`` (fraction); set ``gates.max_truncation_rate`` (off by default)."""

    kind: Literal[GateKind.MAX_TRUNCATION_RATE] = GateKind.MAX_TRUNCATION_RATE
    op: Literal["<="] = "<="
    limit: float


class DraftsObserved(_GateBase):
    """A speculative variant reported at least ``limit`` (1) draft."""

    kind: Literal[GateKind.DRAFTS_OBSERVED] = GateKind.DRAFTS_OBSERVED
    op: Literal[">="] = ">="
    limit: int = 1


class MinAcceptanceLength(_GateBase):
    """Mean acceptance length (1 + accepted tokens / drafts, tokens) >= ``limit``."""

    kind: Literal[GateKind.MIN_ACCEPTANCE_LENGTH] = GateKind.MIN_ACCEPTANCE_LENGTH
    op: Literal[">="] = ">="
    limit: float


class ShapeProven(_GateBase):
    """A traffic shape (``kind: shape`` task) happened, by the engine's own counters
    (:func:`harness.tasks.shapes.shape_proof`): a shape without its proof fails closed."""

    kind: Literal[GateKind.SHAPE_PROVEN] = GateKind.SHAPE_PROVEN
    op: Literal["=="] = "=="


class MaxAccuracyDrop(_GateBase):
    """Paired ``pipeline`` accuracy drop baseline - candidate <= ``limit`` (fraction) and
    not significantly worse (one-sided exact McNemar p >= ``alpha``; with
    ``multiple_testing`` ``holm``, the Holm-adjusted p-value over the config's
    accuracy-drop gates that ask for it)."""

    kind: Literal[GateKind.MAX_ACCURACY_DROP] = GateKind.MAX_ACCURACY_DROP
    op: Literal["<="] = "<="
    limit: float
    pipeline: str
    alpha: float = 0.05
    multiple_testing: Literal["none", "holm"] = "none"


class MinOutputMatch(_GateBase):
    """Share of questions with identical completion token ids >= ``limit``, or, when a
    noise reference (rerun: ``noise_runs`` 2, or a stored ``noise_mismatch_rate``)
    shows noise above zero, not significantly more mismatches than the noise at ``alpha``.

    With ``near_tie_nats`` set and a reference whose top-k log-probabilities were
    recorded, each divergence is judged by the reference's distribution
    (:mod:`harness.analysis.divergence`): the share of questions WITHOUT an unexplained
    divergence must be >= ``limit``; explained near-ties are reported beside it."""

    kind: Literal[GateKind.MIN_OUTPUT_MATCH] = GateKind.MIN_OUTPUT_MATCH
    op: Literal[">="] = ">="
    limit: float
    alpha: float = 0.05
    noise_runs: int = 1
    noise_mismatch_rate: float | None = None
    near_tie_nats: float | None = None


class MaxAcceptanceLengthDrop(_GateBase):
    """Mean acceptance length baseline - candidate <= ``limit`` (tokens)."""

    kind: Literal[GateKind.MAX_ACCEPTANCE_LENGTH_DROP] = GateKind.MAX_ACCEPTANCE_LENGTH_DROP
    op: Literal["<="] = "<="
    limit: float


class BaselineAccuracyDrop(_GateBase):
    """``pipeline`` accuracy drop since the stored baseline <= ``limit`` and not
    significantly lower at ``alpha`` (paired McNemar, else Fisher's exact test).
    ``baseline`` is filled with ``baseline:<run id>`` when judged."""

    kind: Literal[GateKind.BASELINE_ACCURACY_DROP] = GateKind.BASELINE_ACCURACY_DROP
    op: Literal["<="] = "<="
    limit: float
    pipeline: str
    alpha: float = 0.05


class BaselineAcceptanceLengthDrop(_GateBase):
    """Mean acceptance length drop since the stored baseline <= ``limit`` (tokens)."""

    kind: Literal[GateKind.BASELINE_ACCEPTANCE_LENGTH_DROP] = GateKind.BASELINE_ACCEPTANCE_LENGTH_DROP
    op: Literal["<="] = "<="
    limit: float


class MaxPositionAcceptanceDrop(_GateBase):
    """Per draft position i, between two speculative variants with the same speculative
    config (they must accept alike): the candidate's acceptance rate accepted_per_pos[i] /
    drafts must not be below ``(1 - limit)`` times the baseline's while significantly
    lower (one-sided pooled two-proportion z test on the counts, Holm across the
    positions, at ``alpha``); a failure names the position and both rates. A position
    that rose beyond the band is reported beside, not failed. ``limit`` is the relative
    tolerance (vLLM's spec-decode tests: 0.05)."""

    kind: Literal[GateKind.MAX_POSITION_ACCEPTANCE_DROP] = GateKind.MAX_POSITION_ACCEPTANCE_DROP
    op: Literal["<="] = "<="
    limit: float
    alpha: float = 0.05


class BaselinePositionAcceptanceDrop(_GateBase):
    """:class:`MaxPositionAcceptanceDrop` of one speculative variant against its stored
    baseline (the baseline's drafts and per-position rates). ``baseline`` is filled with
    ``baseline:<run id>`` when judged."""

    kind: Literal[GateKind.BASELINE_POSITION_ACCEPTANCE_DROP] = GateKind.BASELINE_POSITION_ACCEPTANCE_DROP
    op: Literal["<="] = "<="
    limit: float
    alpha: float = 0.05


class SampledEquivalence(_GateBase):
    """The distribution-level verdict of a comparison on a task that samples, in place of
    token-sequence output match: the target model's mean log-probability per token of
    both variants' sampled completions, scored on the non-speculative ``scorer``
    variant's server, compared paired by question with a two-sided sign-flip permutation
    test (:func:`harness.analysis.sampled.sampled_test`). H0: both sample from the
    target's distribution. Observed is the p-value; it must be >= ``limit`` (= alpha;
    with ``multiple_testing`` ``holm``, the Holm-adjusted p-value over the config's
    family). ``independent`` is False when the task's seeding makes the draws dependent
    (one seed for every request, or the same seeds on both sides): then NOT RUN with
    ``dependence``, as the test's false-alarm rate would not hold."""

    kind: Literal[GateKind.SAMPLED_EQUIVALENCE] = GateKind.SAMPLED_EQUIVALENCE
    op: Literal[">="] = ">="
    limit: float
    scorer: str | None
    multiple_testing: Literal["none", "holm"] = "none"
    independent: bool = True
    dependence: str = ""


class BaselineReadable(_GateBase):
    """The config's stored baseline file exists but cannot be read: a failing gate, so a
    corrupt baseline never passes silently (reported only when that happens)."""

    kind: Literal[GateKind.BASELINE_READABLE] = GateKind.BASELINE_READABLE
    op: Literal["=="] = "=="


#: Any planned gate; ``kind`` selects the class (a pydantic discriminated union).
Gate = Annotated[
    Union[
        VariantEffective, AccuracyFloor, MaxErrorRate, MaxTruncationRate, DraftsObserved, MinAcceptanceLength,
        MaxAccuracyDrop, MinOutputMatch, MaxAcceptanceLengthDrop,
        BaselineAccuracyDrop, BaselineAcceptanceLengthDrop, BaselineReadable,
        MaxPositionAcceptanceDrop, BaselinePositionAcceptanceDrop, ShapeProven, SampledEquivalence,
    ],
    Field(discriminator="kind"),
]


def plan_gates(config: ModelConfig) -> list[Gate]:
    """Every in-run gate of ``config``, in a stable order: per variant (effective, then
    per task floor, error rate, drafts, acceptance), then per comparison and task."""
    out: list[Gate] = []
    for vname in config.variants:
        out += _variant_gates(config, vname)
    for comp in config.comparisons:
        out += _comparison_gates(config, comp)
    return out


def _variant_gates(config: ModelConfig, vname: str) -> list[Gate]:
    """``variant_effective`` of variant ``vname``, then its per-task gates."""
    c, v = config.name, config.variants[vname]
    peers = [x for comp in config.comparisons if not comp.allow_mixed_runners
             for x in ((comp.candidate,) if comp.baseline == vname else (comp.baseline,
                                                                         ) if comp.candidate == vname else ())]
    out: list[Gate] = [VariantEffective(
        id=f"{c}/{vname}/variant_effective", config=c, variant=vname,
        expected_effective=v.expected_effective, engine_facts=v.engine_facts,
        model_runner=v.model_runner, same_runner_as=tuple(dict.fromkeys(peers)),
        description="the engine's effective configuration matches what the variant asked for",
    )]
    for tname in config.tasks:
        out += _task_gates(config, vname, tname)
    return out


def _task_gates(config: ModelConfig, vname: str, tname: str) -> list[Gate]:
    """Variant ``vname``'s gates on task ``tname``: floor, error rate, truncation, and for a
    speculative variant drafts and acceptance length; each from the task's own settings."""
    c, v, g = config.name, config.variants[vname], config.gates_for(tname)
    base: dict[str, Any] = {"config": c, "variant": vname, "task": tname}
    out: list[Gate] = []
    if g.accuracy_threshold is not None:
        out.append(AccuracyFloor(
            id=f"{c}/{vname}/{tname}/accuracy_floor", **base,
            limit=round(g.accuracy_threshold - g.tolerance, 6),
            pipeline=g.accuracy_pipeline, accuracy_threshold=g.accuracy_threshold,
            tolerance=g.tolerance, calibration_questions=g.calibration_questions,
            description=(f"{g.accuracy_pipeline} accuracy >= accuracy_threshold - tolerance "
                         f"= {g.accuracy_threshold} - {g.tolerance}"),
        ))
    out.append(MaxErrorRate(
        id=f"{c}/{vname}/{tname}/max_error_rate", **base, limit=g.max_error_rate,
        description="share of failed requests (never scored as wrong answers)",
    ))
    if g.max_truncation_rate is not None:
        out.append(MaxTruncationRate(
            id=f"{c}/{vname}/{tname}/max_truncation_rate", **base, limit=g.max_truncation_rate,
            description="share of completions cut by max_tokens (finish_reason length)",
        ))
    if config.tasks[tname].kind == "shape":
        out.append(ShapeProven(
            id=f"{c}/{vname}/{tname}/shape_proven", **base,
            description="the engine's counters prove the traffic shape happened",
        ))
    if v.speculative_config is not None:
        out.append(DraftsObserved(
            id=f"{c}/{vname}/{tname}/drafts_observed", **base,
            description="a speculative variant must report drafts (no drafts observed = fail)",
        ))
        if g.min_acceptance_length is not None:
            out.append(MinAcceptanceLength(
                id=f"{c}/{vname}/{tname}/min_acceptance_length", **base,
                limit=g.min_acceptance_length,
                description="mean acceptance length = 1 + accepted tokens / drafts",
            ))
    return out


def _comparison_gates(config: ModelConfig, comp: ComparisonSpec) -> list[Gate]:
    """One comparison's gates per task (its ``tasks``, else every task): accuracy drop,
    output match, and between two speculative variants the acceptance-length drop."""
    c = config.name
    pair = f"{comp.baseline}->{comp.candidate}"
    spec_a = config.variants[comp.baseline].speculative_config
    spec_b = config.variants[comp.candidate].speculative_config
    spec_pair = spec_a is not None and spec_b is not None
    alike = spec_pair and spec_a == spec_b  # the same drafter: must accept alike, position by position
    out: list[Gate] = []
    for tname in comp.tasks or config.tasks:
        g = config.gates_for(tname)
        base: dict[str, Any] = {"config": c, "variant": comp.candidate, "task": tname, "baseline": comp.baseline}
        if comp.max_accuracy_drop is not None:
            out.append(MaxAccuracyDrop(
                id=f"{c}/{pair}/{tname}/max_accuracy_drop", **base,
                limit=comp.max_accuracy_drop, pipeline=g.accuracy_pipeline, alpha=comp.alpha,
                multiple_testing=g.multiple_testing,
                description=(f"paired {g.accuracy_pipeline} accuracy drop {comp.baseline} - {comp.candidate} "
                             f"<= {comp.max_accuracy_drop}, and not significantly worse "
                             f"(one-sided McNemar, alpha {comp.alpha}"
                             + (", Holm-corrected across the config's accuracy-drop gates)"
                                if g.multiple_testing == "holm" else ")")),
            ))
        if comp.min_output_match is not None and not config.tasks[tname].samples:
            out.append(_output_match_gate(comp, comp.min_output_match, f"{c}/{pair}/{tname}/min_output_match", base))
        if config.tasks[tname].samples:
            out.append(_sampled_gate(config, comp, tname, f"{c}/{pair}/{tname}/sampled_equivalence", base))
        if comp.max_acceptance_length_drop is not None and spec_pair:
            out.append(MaxAcceptanceLengthDrop(
                id=f"{c}/{pair}/{tname}/max_acceptance_length_drop", **base,
                limit=comp.max_acceptance_length_drop,
                description="drop of mean acceptance length from baseline to candidate (a rise beyond the same "
                            "band is reported beside it)",
            ))
        if alike and g.position_acceptance_rtol is not None:
            out.append(MaxPositionAcceptanceDrop(
                id=f"{c}/{pair}/{tname}/max_position_acceptance_drop", **base,
                limit=g.position_acceptance_rtol, alpha=g.position_acceptance_alpha,
                description=(f"per draft position: acceptance rate not below (1 - {g.position_acceptance_rtol:g}) "
                             f"x {comp.baseline}'s while significantly lower (one-sided two-proportion z test, "
                             f"Holm across positions, alpha {g.position_acceptance_alpha:g})"),
            ))
    return out


def scorer_variant(config: ModelConfig, comp: ComparisonSpec) -> str | None:
    """The non-speculative variant whose server scores a comparison's sampled completions:
    its baseline when that does not speculate, else the config's first variant without
    speculation, fault or ``not_applicable``; None when there is none."""
    if config.variants[comp.baseline].speculative_config is None:
        return comp.baseline
    return next((n for n, v in config.variants.items()
                 if v.speculative_config is None and v.fault is None and v.not_applicable is None), None)


def _sampled_gate(config: ModelConfig, comp: ComparisonSpec, tname: str, gate_id: str,
                  base: dict[str, Any]) -> SampledEquivalence:
    """The ``sampled_equivalence`` gate of comparison ``comp`` on sampling task ``tname``."""
    t = config.tasks[tname]
    va, vb = config.variants[comp.baseline], config.variants[comp.candidate]
    why = ""
    if not t.independent_draws():
        why = (f"task {tname} sends seed {t.seed} (plus the variant's seed_offset) with every request: every "
               "question draws the same random numbers, so questions are not independent draws and the test's "
               "false-alarm rate does not hold (docs/gates.md, \"Seeds\"); set seed_mode: per_question (or seed: null; "
               "vLLM's form: seed: null)")
    elif t.seed is not None and va.seed_offset == vb.seed_offset:
        why = (f"{comp.baseline} and {comp.candidate} send the same seeds (seed_offset {va.seed_offset}): their "
               "draws are coupled, not independent; give one of them another seed_offset")
    alpha = comp.sampled_alpha or comp.alpha
    g = config.gates_for(tname)
    scorer = scorer_variant(config, comp)
    return SampledEquivalence(
        id=gate_id, **base, limit=alpha, scorer=scorer, multiple_testing=g.multiple_testing,
        independent=not why, dependence=why,
        description=(f"the target's mean log-probability per token of both variants' sampled completions (scored "
                     f"on {scorer or 'no non-speculative variant'}'s server), paired by question: not significantly "
                     f"different (two-sided sign-flip permutation test, alpha {alpha:g}"
                     + (", Holm-corrected across the config's family)" if g.multiple_testing == "holm" else ")")
                     + "; H0: both sample from the target's distribution"),
    )


def sampling_notes(config: ModelConfig) -> list[str]:
    """Why the plan has no output-match gate for a task that samples (temperature > 0, or
    none sent: :attr:`~harness.config.schema.TaskSpec.samples`) although a comparison asks
    for one, and what judges it instead (``sampled_equivalence``); one sentence per such
    task, for the dry run and the record."""
    out = []
    for tname, t in config.tasks.items():
        comps = [f"{x.baseline}->{x.candidate}" for x in config.comparisons
                 if x.min_output_match is not None and (not x.tasks or tname in x.tasks)]
        if not t.samples or not comps:
            continue
        temp = "not sent (the server's default)" if t.temperature is None else f"{t.temperature:g}"
        out.append(
            f"task {tname} samples (temperature {temp}, seed {'none sent' if t.seed is None else t.seed}, "
            f"seed_mode {t.seed_mode}): no min_output_match gate (nor its noise rerun or divergence judging) for "
            f"{', '.join(comps)}: two correct samplers draw different tokens, so a token-sequence match would fail "
            "a correct engine by construction; these comparisons are judged by the sampled_equivalence gate "
            "(distribution level), accuracy (paired) and acceptance")
    return out


def greedy_output_match(config: ModelConfig, comp: ComparisonSpec) -> bool:
    """``comp`` asks for output match and gates at least one greedy task (so its noise
    rerun and the reference's log-probabilities are worth their cost)."""
    return comp.min_output_match is not None and any(
        not config.tasks[t].samples for t in (comp.tasks or config.tasks))


def _output_match_gate(comp: ComparisonSpec, limit: float, gate_id: str, base: dict[str, Any]) -> MinOutputMatch:
    """The ``min_output_match`` gate of a comparison, its description naming the noise
    reference (rerun always / only when divergences are left unjudged / stored rate)."""
    noise = (
        f"; judged against {comp.baseline}-vs-{comp.baseline} noise (rerun) when that noise is > 0"
        if comp.noise_runs > 1 and comp.noise_runs_when == "always" else
        f"; {comp.baseline} rerun for noise only when divergences are left that no reference "
        "distribution judges"
        if comp.noise_runs > 1 else
        f"; judged against the stored noise rate {comp.noise_mismatch_rate} when > 0"
        if comp.noise_mismatch_rate is not None else ""
    )
    return MinOutputMatch(
        id=gate_id, **base,
        limit=limit, alpha=comp.output_match_alpha or comp.alpha,
        noise_runs=comp.noise_runs,
        noise_mismatch_rate=comp.noise_mismatch_rate, near_tie_nats=comp.near_tie_nats,
        description=("share of questions with identical completion token ids" if comp.near_tie_nats is None
                     else "share of questions without an unexplained divergence (divergences at a "
                          f"near-tie of the reference, gap <= {comp.near_tie_nats:g} nats, are explained)")
                    + noise,
    )


def plan_baseline_gates(config: ModelConfig) -> list[Gate]:
    """The gates against a stored baseline (judged only when ``<baseline dir>/<config>.json``
    exists): per variant and task the accuracy drop, per speculative variant and task the
    mean-acceptance-length drop; each from the task's own settings."""
    c = config.name
    out: list[Gate] = [BaselineReadable(
        id=f"{c}/baseline_readable", config=c, variant="-",
        description="the stored baseline file can be read (reported only when it cannot)",
    )]
    for vname, v in config.variants.items():
        for tname in config.tasks:
            g = config.gates_for(tname)
            base: dict[str, Any] = {"config": c, "variant": vname, "task": tname}
            if g.baseline_max_accuracy_drop is not None:
                out.append(BaselineAccuracyDrop(
                    id=f"{c}/{vname}/{tname}/baseline_accuracy_drop", **base,
                    limit=g.baseline_max_accuracy_drop, pipeline=g.accuracy_pipeline, alpha=g.baseline_alpha,
                    description=(f"{g.accuracy_pipeline} accuracy drop since the stored baseline "
                                 f"<= {g.baseline_max_accuracy_drop}, not significantly lower (alpha "
                                 f"{g.baseline_alpha})"),
                ))
            if v.speculative_config is not None and g.baseline_max_acceptance_length_drop is not None:
                out.append(BaselineAcceptanceLengthDrop(
                    id=f"{c}/{vname}/{tname}/baseline_acceptance_length_drop", **base,
                    limit=g.baseline_max_acceptance_length_drop,
                    description="mean acceptance length drop since the stored baseline (a rise beyond the same "
                                "band is reported beside it)",
                ))
            if v.speculative_config is not None and g.position_acceptance_rtol is not None:
                out.append(BaselinePositionAcceptanceDrop(
                    id=f"{c}/{vname}/{tname}/baseline_position_acceptance_drop", **base,
                    limit=g.position_acceptance_rtol, alpha=g.position_acceptance_alpha,
                    description=(f"per draft position: acceptance rate not below (1 - "
                                 f"{g.position_acceptance_rtol:g}) x the stored baseline's while significantly "
                                 f"lower (one-sided two-proportion z test, Holm across positions, alpha "
                                 f"{g.position_acceptance_alpha:g})"),
                ))
    return out
