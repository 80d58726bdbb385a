"""Comparisons between variants: output match, answer agreement, paired tests, noise
and divergences per comparison and task, and which baseline reruns for noise are needed
and why. Pure functions over :class:`harness.analysis.measurements.Measurements`; each
comparison's values are written once, into its record entry (:func:`compare` returns them;
the gates read them back through the measurements' view of the record). The rerun itself
is a step of the runner."""

from __future__ import annotations

from typing import Callable, Sequence

from harness.analysis.divergence import UNEXPLAINED, carries_logprobs, classify_divergences, near_tie_bound
from harness.analysis.measurements import Measurements
from harness.analysis.noise import output_noise_rerun, output_noise_stored
from harness.analysis.scoring import answer_agreement, is_truncated, output_match
from harness.config.gates import greedy_output_match
from harness.config.plan import ConfigPlan
from harness.config.schema import ComparisonSpec, ModelConfig
from harness.records.measures import DivergenceReportRecord, OutputMatchRecord
from harness.records.results import ComparisonMeasured, comparison_result
from harness.records.run_record import ComparisonResult, TruncatedIds
from harness.records.samples import Sample

#: ``(variant, task)`` -> the samples of that variant's noise rerun of the task.
Reruns = dict[tuple[str, str], tuple[Sample, ...]]


def noise_variants(config_plan: ConfigPlan) -> set[str]:
    """Variants run twice in their own server session because a comparison judges
    output match against their rerun in any case (``noise_runs: 2`` with
    ``noise_runs_when: always`` on a comparison whose baseline they are); a comparison
    with ``noise_runs_when: unexplained`` reruns its baseline later, only when needed
    (:func:`rerun_needs`)."""
    return {comp.baseline for comp in config_plan.config.comparisons
            if comp.noise_runs > 1 and comp.noise_runs_when == "always"
            and greedy_output_match(config_plan.config, comp)}


def reference_variant(config: ModelConfig, m: Measurements, baseline: str, task: str) -> str | None:
    """The variant whose top-k log-probabilities judge a comparison's divergences on
    ``task``: the baseline when its samples carry them, else a variant of the config
    without speculative decoding whose samples do, one asking for the baseline's
    ``model_runner`` first (then config order); None when none does."""
    if carries_logprobs(m.task(baseline, task).samples):
        return baseline
    runner = config.variants[baseline].model_runner
    refs = [v for v, spec in config.variants.items()
            if spec.speculative_config is None and carries_logprobs(m.task(v, task).samples)]
    return min(refs, key=lambda v: config.variants[v].model_runner != runner) if refs else None


def rerun_needs(config: ModelConfig, m: Measurements, reruns: Reruns) -> dict[str, list[str]]:
    """Baseline variant -> tasks to rerun for noise because a comparison with
    ``noise_runs: 2`` and ``noise_runs_when: unexplained`` has divergences left that
    the reference's distribution cannot judge (or, without any reference
    distribution, mismatches at all). Reruns already made are not asked again."""
    out: dict[str, list[str]] = {}
    for comp in config.comparisons:
        if comp.noise_runs < 2 or comp.noise_runs_when != "unexplained":
            continue
        for tname in comp.tasks or config.tasks:
            measured = m.comparison(comp.baseline, comp.candidate, tname)
            match = measured.match
            if (match is None or (comp.baseline, tname) in reruns or tname in m.prompt_only
                    or config.tasks[tname].samples):
                continue
            divergence = measured.divergences
            left = (len(match.mismatches) if divergence is None else
                    sum(1 for d in divergence.divergences if d.verdict == UNEXPLAINED and d.source == "none"))
            if left and tname not in out.setdefault(comp.baseline, []):
                out[comp.baseline].append(tname)
    return {k: v for k, v in out.items() if v}


def rerun_reason(comp: ComparisonSpec, key: tuple[str, str, str], match: OutputMatchRecord | None,
                 divergence: DivergenceReportRecord | None, reruns: Reruns,
                 asked: dict[str, list[str]] | None) -> str:
    """Why the baseline was (not) rerun for this comparison and task, for the record.

    Args:
        comp: the config's comparison.
        key: ``(baseline, candidate, task)``.
        match, divergence: the comparison's output match and judged divergences on the
            task (None when not measured).
        reruns: the noise reruns made (``(variant, task)`` -> samples).
        asked: baseline variant -> tasks rerun on demand (:func:`rerun_needs`), or None.
    """
    base, _, tname = key
    if comp.noise_runs < 2:
        return "not run: not asked (noise_runs 1)"
    if comp.tasks and tname not in comp.tasks and (base, tname) not in reruns:
        return f"not run: this comparison does not gate task {tname}"
    if comp.noise_runs_when == "always":
        return ("ran: asked by the config (noise_runs 2, noise_runs_when always)" if (base, tname) in reruns
                else "not run: asked by the config, but the rerun did not take place (server gone or lm_eval task)")
    if asked is not None and tname in asked.get(base, []):
        if (base, tname) not in reruns:
            return "needed but not run: the baseline's server could not be started again (see the variant's error)"
        return ("ran: divergences were left that no reference distribution judges"
                if divergence is not None else "ran: mismatches and no reference distribution to judge them")
    if match is None or not match.mismatches:
        return "not run: no divergence"
    return (f"not run: every divergence was judged by {divergence.reference}'s distribution "
            f"({len(divergence.unexplained)} unexplained, {len(divergence.explained)} explained)"
            if divergence is not None else "not run: not needed")


def compare(config: ModelConfig, m: Measurements, reruns: Reruns, asked: dict[str, list[str]] | None = None,
            at: Callable[..., None] | None = None) -> list[ComparisonResult]:
    """The record's comparisons: output match, answer agreement, paired test, noise and
    divergences of every comparison on every task both sides ran (recomputed after
    reruns made on demand). Each value is written once, into the returned entries (the
    runner stores them in the config's record; ``m``, viewing the record, reads them back).

    Args:
        config: the loaded config (its comparisons, tasks, variants).
        m: the config's measurements (samples read).
        reruns: ``(variant, task) -> samples`` of the noise reruns made.
        asked: baseline variant -> tasks rerun on demand (:func:`rerun_needs`), or None.
        at: called as ``at("statistics", config=, variant="<a>-><b>", task=)`` before
            each comparison (the runner's place, for error records).
    """
    out: list[ComparisonResult] = []
    for comp in config.comparisons:
        for tname in config.tasks:
            if at is not None:
                at("statistics", config=config.name, variant=f"{comp.baseline}->{comp.candidate}", task=tname)
            a = m.task(comp.baseline, tname).samples
            b = m.task(comp.candidate, tname).samples
            if a is None or b is None:
                continue
            key = (comp.baseline, comp.candidate, tname)
            pipeline = config.gates_for(tname).accuracy_pipeline
            match = output_match(a, b)
            rerun = reruns.get((comp.baseline, tname)) if comp.noise_runs > 1 else None
            noise = (output_noise_rerun(a, rerun, b) if rerun is not None else
                     # with the false-alarm budget the stored rate carries its uncertainty: taken as
                     # measured on as many questions as this comparison compares (docs/gates.md)
                     output_noise_stored(match, comp.noise_mismatch_rate,
                                         match.compared or None if config.false_alarm_budget is not None else None)
                     if comp.noise_mismatch_rate is not None
                     else None)
            divergence = None
            nats = comp.near_tie_nats
            ref = reference_variant(config, m, comp.baseline, tname) if nats is not None else None
            if ref is not None and nats is not None:
                noise_ids = None if rerun is None else {q for q, _ in output_match_noise(a, rerun)}
                bound = near_tie_bound(nats)  # widened under the run's numerics noise (docs/gates.md, "Near ties")
                divergence = classify_divergences(a, b, m.task(ref, tname).samples, ref, bound.nats,
                                                  baseline_is_reference=(ref == comp.baseline), noise_ids=noise_ids,
                                                  widening_nats=bound.widening_nats or None)
            measured = ComparisonMeasured(
                output_match=match, paired=m.paired(comp.baseline, comp.candidate, tname, pipeline), noise=noise,
                answer_agreement=answer_agreement(a, b, pipeline), divergence=divergence,
                truncated=TruncatedIds(baseline=[x.question_id for x in a if is_truncated(x)],
                                       candidate=[x.question_id for x in b if is_truncated(x)]))
            out.append(comparison_result(comp, tname, pipeline, measured,
                                         rerun_reason(comp, key, match, divergence, reruns, asked)))
    return out


def output_match_noise(first: Sequence[Sample], rerun: Sequence[Sample]) -> list[tuple[str, int]]:
    """``(question id, first divergence)`` of the questions whose rerun differs from the first pass."""
    return [(x.question_id, x.first_divergence) for x in output_match(first, rerun).mismatches]
