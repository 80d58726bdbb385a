"""Comparisons between variants: output match, answer agreement, paired tests, noise
and divergences per comparison and task, and which baseline reruns for noise are needed
and why. Pure functions over :class:`harness.analysis.measurements.Measurements`; the rerun
itself is a step of the runner."""

from __future__ import annotations

from typing import Callable, Sequence

from harness.analysis.divergence import UNEXPLAINED, carries_logprobs, classify_divergences
from harness.analysis.measurements import Measurements
from harness.analysis.noise import output_noise_rerun, output_noise_stored
from harness.analysis.scoring import answer_agreement, is_truncated, output_match
from harness.config.gates import greedy_output_match
from harness.config.plan import ConfigPlan
from harness.records.results import comparison_result
from harness.records.run_record import ComparisonResult
from harness.records.samples import Sample


def noise_variants(cp: ConfigPlan) -> set[str]:
    """Variants run twice in their own server session because a comparison judges
    output match against their rerun in any case (``noise_runs: 2`` with
    ``noise_runs_when: always`` on a comparison whose baseline they are); a comparison
    with ``noise_runs_when: unexplained`` reruns its baseline later, only when needed
    (:func:`rerun_needs`)."""
    return {comp.baseline for comp in cp.config.comparisons
            if comp.noise_runs > 1 and comp.noise_runs_when == "always" and greedy_output_match(cp.config, comp)}


def reference_variant(c, m: Measurements, baseline: str, task: str) -> str | None:
    """The variant whose top-k log-probabilities judge a comparison's divergences on
    ``task``: the baseline when its samples carry them, else a variant of the config
    without speculative decoding whose samples do, one asking for the baseline's
    ``model_runner`` first (then config order); None when none does."""
    if carries_logprobs(m.task(baseline, task).samples):
        return baseline
    runner = c.variants[baseline].model_runner
    refs = [v for v, spec in c.variants.items()
            if spec.speculative_config is None and carries_logprobs(m.task(v, task).samples)]
    return min(refs, key=lambda v: c.variants[v].model_runner != runner) if refs else None


def rerun_needs(c, m: Measurements, reruns: dict) -> dict[str, list[str]]:
    """Baseline variant -> tasks to rerun for noise because a comparison with
    ``noise_runs: 2`` and ``noise_runs_when: unexplained`` has divergences left that
    the reference's distribution cannot judge (or, without any reference
    distribution, mismatches at all). Reruns already made are not asked again."""
    out: dict[str, list[str]] = {}
    for comp in c.comparisons:
        if comp.noise_runs < 2 or comp.noise_runs_when != "unexplained":
            continue
        for tname in comp.tasks or c.tasks:
            cm = m.comparison(comp.baseline, comp.candidate, tname)
            om = cm.match
            if om is None or (comp.baseline, tname) in reruns or tname in m.prompt_only or c.tasks[tname].samples:
                continue
            dv = cm.divergences
            left = (len(om.mismatches) if dv is None else
                    sum(1 for d in dv.divergences if d.verdict == UNEXPLAINED and d.source == "none"))
            if left and tname not in out.setdefault(comp.baseline, []):
                out[comp.baseline].append(tname)
    return {k: v for k, v in out.items() if v}


def rerun_reason(comp, key, m: Measurements, reruns: dict, asked: dict[str, list[str]] | None) -> str:
    """Why the baseline was (not) rerun for this comparison and task, for the record."""
    base, _, tname = key
    cm = m.comparison(*key)
    om, dv = cm.match, cm.divergences
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
                if dv is not None else "ran: mismatches and no reference distribution to judge them")
    if om is None or not om.mismatches:
        return "not run: no divergence"
    return (f"not run: every divergence was judged by {dv.reference}'s distribution "
            f"({len(dv.unexplained)} unexplained, {len(dv.explained)} explained)" if dv is not None
            else "not run: not needed")


def compare(c, m: Measurements, reruns: dict, asked: dict[str, list[str]] | None = None,
            at: Callable[..., None] | None = None) -> list[ComparisonResult]:
    """Fill ``m`` (matches, answers, noise, divergences) for every comparison and task
    both sides ran (recomputed after reruns made on demand) and return the record's
    comparisons.

    Args:
        c: the loaded config (its comparisons, tasks, variants).
        m: the config's measurements (samples and scores read, comparisons written).
        reruns: ``(variant, task) -> samples`` of the noise reruns made.
        asked: baseline variant -> tasks rerun on demand (:func:`rerun_needs`), or None.
        at: called as ``at("statistics", config=, variant="<a>-><b>", task=)`` before
            each comparison (the runner's place, for error records).
    """
    out: list[ComparisonResult] = []
    for comp in c.comparisons:
        for tname in c.tasks:
            if at is not None:
                at("statistics", config=c.name, variant=f"{comp.baseline}->{comp.candidate}", task=tname)
            a = m.task(comp.baseline, tname).samples
            b = m.task(comp.candidate, tname).samples
            if a is None or b is None:
                continue
            key = (comp.baseline, comp.candidate, tname)
            cm = m.comparison_record(*key)
            pipeline = c.gates_for(tname).accuracy_pipeline
            om = cm.match = output_match(a, b)
            ag = cm.answers = answer_agreement(a, b, pipeline)
            pc = m.paired(comp.baseline, comp.candidate, tname, pipeline)
            nz = None
            rerun = reruns.get((comp.baseline, tname)) if comp.noise_runs > 1 else None
            if rerun is not None:
                nz = output_noise_rerun(a, rerun, b)
            elif comp.noise_mismatch_rate is not None:
                nz = output_noise_stored(om, comp.noise_mismatch_rate)
            if nz is not None:
                cm.noise = nz
            dv = None
            ref = reference_variant(c, m, comp.baseline, tname) if comp.near_tie_nats is not None else None
            if ref is not None:
                noise_ids = None
                if rerun is not None:
                    noise_ids = {q for q, _ in output_match_noise(a, rerun)}
                dv = classify_divergences(a, b, m.task(ref, tname).samples, ref, comp.near_tie_nats,
                                          baseline_is_reference=(ref == comp.baseline), noise_ids=noise_ids)
            cm.divergences = dv
            out.append(comparison_result(comp, tname, pipeline, a, b, om, pc, nz, ag, dv,
                                         rerun_reason(comp, key, m, reruns, asked), is_truncated))
    return out


def output_match_noise(first: Sequence[Sample], rerun: Sequence[Sample]) -> list[tuple[str, int]]:
    """``(question id, first divergence)`` of the questions whose rerun differs from the first pass."""
    return [(x.question_id, x.first_divergence) for x in output_match(first, rerun).mismatches]
