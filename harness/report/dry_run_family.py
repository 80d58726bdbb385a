"""The dry run's family-wise false-fail estimate of a config's in-run gates on an unchanged
build, as the rules are without the false-alarm budget (docs/gates.md, "Family-wise false
fail"); with the budget the bound is the budget itself (:mod:`harness.report.budget_plan`)."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from harness.analysis.familywise import family_false_fail
from harness.analysis.gatekinds.max_position_acceptance_drop import MaxPositionAcceptanceDrop
from harness.analysis.gatekinds.sampled_equivalence import SampledEquivalence
from harness.config.gates import plan_gates
from harness.config.schema import ModelConfig
from harness.report.dry_run_measured import MeasuredFigures, discordance_of, family_discordance
from harness.tasks import task_size

__all__ = ["FamilyFalseFail", "family_false_fail_of", "render_family"]


class FamilyFalseFail(TypedDict):
    """:func:`family_false_fail_of`: gate counts and false-fail probabilities."""

    accuracy_drop_gates: int
    holm: bool
    accuracy_drop_false_fail: float
    output_match_gates: int
    output_match_alpha_sum_bound: float
    position_gates: int
    position_alpha_sum_bound: float
    sampled_gates: int
    sampled_alpha_sum_bound: float
    false_fail: float
    discordance_sources: NotRequired[list[dict[str, str | float]]]  # with calibration figures


def family_false_fail_of(config: ModelConfig, measured: MeasuredFigures | None = None) -> FamilyFalseFail:
    """The family-wise false-fail probability of ``config``'s in-run gates that test
    for a difference, on an unchanged build.

    The family: every ``max_accuracy_drop`` gate (per comparison and task; n = the
    task's questions, discordance = the comparison's ``expected_discordance``, its
    limit and alpha; Holm when the task's gates ask for ``multiple_testing: holm``),
    computed exactly by :func:`harness.analysis.familywise.family_false_fail`; and
    every ``min_output_match`` gate judged against noise, whose exact test fails a
    build with noise-level mismatches with probability at most its alpha; and every
    ``max_position_acceptance_drop`` gate, which fails an unchanged build with
    probability at most its alpha (its positions are Holm-corrected, and a failure also
    needs a drop beyond the relative tolerance; under the binomial model of the counts).
    Gates against a stored baseline (``--baseline``) are not in the plan and not counted.
    ``measured`` (``--calibration``): the calibrated discordance where measured, named in ``discordance_sources``.

    Returns:
        ``{"accuracy_drop_gates": int, "holm": bool, "accuracy_drop_false_fail": float,
        "output_match_gates": int, "output_match_alpha_sum_bound": float,
        "position_gates": int, "position_alpha_sum_bound": float, "sampled_gates": int,
        "sampled_alpha_sum_bound": float, "false_fail": float}``; ``false_fail`` = 1 - (1 -
        accuracy-drop part) * prod(1 - alpha_i) over the output-match, position and sampled
        gates (independence).
    """
    drops: list[tuple[int, float, float | None, float]] = []
    sources: list[dict[str, str | float]] = []
    holm = False
    om_alphas: list[float] = []
    for comp in config.comparisons:
        for tname in comp.tasks or config.tasks:
            n = task_size(config.tasks[tname])
            if comp.max_accuracy_drop is not None:
                psi, src = discordance_of(config, comp, tname, measured)
                drops.append((n, psi, comp.max_accuracy_drop, comp.alpha))
                sources.append({"baseline": comp.baseline, "candidate": comp.candidate, "task": tname,
                                "discordance": psi, "source": src})
                holm |= config.gates_for(tname).multiple_testing == "holm"
            if (comp.min_output_match is not None and not config.tasks[tname].samples
                    and (comp.noise_runs > 1 or comp.noise_mismatch_rate is not None)):
                om_alphas.append(comp.output_match_alpha or comp.alpha)
    off = plan_gates(config.model_copy(update={"false_alarm_budget": None}))  # the rules without the budget
    pos_alphas = [g.alpha for g in off if isinstance(g, MaxPositionAcceptanceDrop)]
    sampled_alphas = [g.limit for g in off if isinstance(g, SampledEquivalence) and g.independent]
    acc = family_false_fail(drops, holm=holm) if drops else 0.0
    keep = 1.0 - acc
    for a in om_alphas + pos_alphas + sampled_alphas:
        keep *= 1.0 - a
    out: FamilyFalseFail = {"accuracy_drop_gates": len(drops), "holm": holm, "accuracy_drop_false_fail": acc,
                            "output_match_gates": len(om_alphas), "output_match_alpha_sum_bound": sum(om_alphas),
                            "position_gates": len(pos_alphas), "position_alpha_sum_bound": sum(pos_alphas),
                            "sampled_gates": len(sampled_alphas), "sampled_alpha_sum_bound": sum(sampled_alphas),
                            "false_fail": 1.0 - keep}
    return out if measured is None else {**out, "discordance_sources": sources}


def render_family(config: ModelConfig, measured: MeasuredFigures | None = None) -> list[str]:
    """Lines for ``--dry-run`` stating :func:`family_false_fail_of` (with ``measured``: the
    calibrated discordance where measured, and how many gates it covers)."""
    f = family_false_fail_of(config, measured)
    if not f["accuracy_drop_gates"] and not f["output_match_gates"] and not f["position_gates"] \
            and not f["sampled_gates"]:
        return []
    disc = sorted({c.expected_discordance for c in config.comparisons if c.max_accuracy_drop is not None})
    why = "expected_discordance: questions flipping run to run"
    if measured is not None:
        disc, why = family_discordance(f.get("discordance_sources", []), measured)
    return [
        f"  family-wise false-fail probability on an unchanged build: {f['false_fail']:.3f}",
        f"    {f['accuracy_drop_gates']} accuracy-drop gate(s) "
        f"{'with Holm correction' if f['holm'] else 'each at its own alpha (set multiple_testing: holm to correct)'}: "
        f"{f['accuracy_drop_false_fail']:.3f}, assuming discordance {', '.join(map(str, disc)) or '-'} "
        f"({why}) and independent gates",
        f"    {f['output_match_gates']} output-match gate(s): where a question falls to the noise rule "
        f"(no reference distribution judges it), at most {f['output_match_alpha_sum_bound']:.3f} together "
        "(each at most its alpha); a divergence the reference was confident about fails by design",
        f"    {f['position_gates']} per-position acceptance gate(s) between variants: at most "
        f"{f['position_alpha_sum_bound']:.3f} together (each at most its alpha: Holm across its positions, and a "
        "failure also needs a drop beyond the relative tolerance; drafts taken as independent)",
        f"    {f['sampled_gates']} sampled-equivalence gate(s): at most {f['sampled_alpha_sum_bound']:.3f} together "
        "(each exactly at most its alpha: the sign-flip test is exact when questions are independent draws)",
    ]
