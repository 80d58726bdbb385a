"""``evalrun calibrate --config LIST --repeat N``: run each config N times, measure the
run-to-run spread, and recommend tolerances.

Each repeat is an ordinary run (:func:`harness.run.runner.run`, fresh servers) written to
``<results dir>/<calibration id>/run<i>/``; the summary goes to
``<results dir>/<calibration id>/calibration.{md,json}`` (and ``--output`` / ``--json``).

Reported per config, variant and task: every accuracy (each answer pipeline its record lists) and every
acceptance figure (mean acceptance length, acceptance rate, per-position acceptance)
over the N runs: the values, mean, sample standard deviation (n - 1 denominator) with
its one-sided 95% chi-square upper bound, min and max; per comparison the output-match
rate, the paired accuracy drop and the discordance; and the run-to-run output noise:
the share of questions whose greedy completion differs between run i and run 1 of the
same variant (the ``noise_mismatch_rate`` the output-match gate can be judged against).

Recommendation rule (k = ``--sigmas``, default 3). Each gate's limit sits k standard
deviations of the total noise away from the calibrated mean, where the total variance
is the run-to-run variance s^2 measured here plus the sampling variance of one run
(variances of independent error sources add; k = 3 is Shewhart's 3-sigma control
limit, a one-sided false-alarm rate of about 0.13% per gate under normality:
Montgomery, Introduction to Statistical Quality Control, 7th ed., sec. 5.2):

* accuracy floor, per variant and task with mean accuracy p over n questions:
  ``sigma = sqrt(s^2 + pt(1-pt)/n)``, pt = (pn + 2)/(n + 4) (the binomial sampling term,
  Agresti-Coull adjusted so that p = 0 or 1 keeps a sampling error,
  :func:`binomial_variance`; which borderline questions a build gets right is
  re-drawn by any numerically different but equally good build);
  ``accuracy_threshold`` = the highest mean over variants and tasks, ``tolerance`` =
  the largest ``threshold - p + k * sigma``, so that every variant's floor is at most
  its own ``p - k * sigma``; ``calibration_questions`` = n.
* ``min_acceptance_length``: the smallest ``mean - k * sqrt(s^2 + se^2)`` over
  speculative variants and tasks, where se is the per-request bootstrap standard error
  (interval width / (2 * 1.96)) when the runs had ``per_request_metrics``, else the
  per-draft standard error ``sqrt(Var(a) / drafts)`` of the accepted count a per
  draft, whose distribution follows from per-position acceptance q_i = P(a > i):
  ``E[a] = sum q_i``, ``E[a^2] = sum (2i + 1) q_i`` (assumes independent drafts, so it
  understates the spread when requests differ); never below 1.
* per comparison: ``max_accuracy_drop = max(0, mean drop) + k * sqrt(s_drop^2 + v)``
  with v the larger of the mean paired Wald variance ``(b + c)/n^2 - (b - c)^2/n^3``
  (Agresti, Categorical Data Analysis, 2nd ed., sec. 10.1) and ``psi / n``, the
  variance of a paired difference with no drop at discordance psi;
  ``expected_discordance`` = psi = the mean share (b + c)/n, at least 1/n;
  ``max_acceptance_length_drop`` (two speculative variants)
  ``= max(0, mean drop) + k * sqrt(s_drop^2 + se_a^2 + se_b^2)``;
  ``noise_mismatch_rate`` = the larger of the mean run-to-run output noise of the
  comparison's baseline variant and the calibrated build's own mean baseline-vs-
  candidate mismatch rate (in bfloat16 a speculative variant's greedy outputs differ
  from the reference on some prompts from rounding alone, and a rerun of the reference
  does not see that); 0 means exact equality can be required (keep
  ``min_output_match: 1.0``).

With few repeats s is poorly known (the upper bound column shows how poorly); the
sampling terms keep the tolerances from collapsing to zero when s happens to be 0.

Clean nights: every repeat of a good build is a night, and the summary's ``false_alarms``
gives the realized false-fail rate of each gate, gate kind, config and the whole list over
the repeats with its exact Clopper-Pearson interval
(:func:`harness.analysis.false_alarms.false_alarm_rates`; docs/false-alarms.md).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Sequence

from harness.analysis.false_alarms import false_alarm_rates
from harness.analysis.gatekinds.accuracy_floor import AccuracyFloor
from harness.analysis.gatekinds.max_acceptance_length_drop import MaxAcceptanceLengthDrop
from harness.analysis.gatekinds.max_accuracy_drop import MaxAccuracyDrop
from harness.analysis.gatekinds.min_acceptance_length import MinAcceptanceLength
from harness.analysis.gatekinds.min_output_match import MinOutputMatch
from harness.analysis.scoring import first_divergence
from harness.analysis.stats import binomial_variance
from harness.records.measures import Interval
from harness.records.run_folder import RunFolder
from harness.records.run_record import ConfigResult, RunRecord, TaskResult
from harness.records.samples import Sample
from harness.report.calibration_render import render_calibration_markdown
from harness.report.calibration_types import (  # noqa: F401 - re-exported: the summary's shape
    CalibrationSummary,
    ComparisonCalibration,
    ConfigCalibration,
    OutputNoise,
    Recommended,
    RecommendedComparison,
    RecommendedGates,
    RunRef,
    SpeculativeSpread,
    Spread,
    TaskCalibration,
)
from harness.report.recommenders import COMPARISON_RULES, GATES_RULES, recommends, run_rule
from harness.tasks.kinds import record_pipelines

__all__ = ["spread", "per_draft_se", "binomial_variance", "summarize", "render_calibration_markdown", "Z95"]

#: Two-sided 95% normal quantile, to turn a bootstrap interval width into a standard error.
Z95 = 1.959963984540054


def spread(values: Sequence[float | None]) -> Spread:
    """Mean and spread of one figure over the runs.

    Args:
        values: one value per run (None = not measured in that run, left out).

    Returns:
        ``{"values", "n_runs", "mean", "sd", "sd_upper95", "min", "max"}``: ``sd`` is
        the sample standard deviation (n - 1 denominator; None with fewer than two
        values); ``sd_upper95`` the one-sided 95% upper confidence bound
        ``sd * sqrt((n - 1) / chi2_{0.05, n-1})`` (normal data; e.g. Montgomery,
        Introduction to Statistical Quality Control, sec. 4.3); None when not
        computable.
    """
    from scipy import stats as _st

    xs = [float(v) for v in values if v is not None]
    out: Spread = {"values": list(values), "n_runs": len(xs), "mean": None, "sd": None,
                   "sd_upper95": None, "min": None, "max": None}
    if not xs:
        return out
    n = len(xs)
    mean = sum(xs) / n
    out["mean"], out["min"], out["max"] = mean, min(xs), max(xs)
    if n >= 2:
        sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
        out["sd"] = sd
        out["sd_upper95"] = sd * math.sqrt((n - 1) / float(_st.chi2.ppf(0.05, n - 1)))
    return out


def per_draft_se(per_position: Sequence[float | None] | None, drafts: float | None) -> float | None:
    """Standard error of mean acceptance length from per-position acceptance alone.

    Args:
        per_position: q_i = share of drafts whose position i was accepted (fractions,
            non-increasing: a position is accepted only after every earlier one).
        drafts: number of drafts D.

    Returns:
        ``sqrt(Var(a) / D)`` for the accepted count a per draft, with
        ``P(a > i) = q_i``, ``E[a] = sum_i q_i``, ``E[a^2] = sum_i (2i + 1) q_i``
        (since ``a^2 = sum_{i < a} (2i + 1)``), assuming independent drafts; None when
        there are no drafts or no per-position figures.
    """
    qs = [q for q in per_position or () if q is not None]
    if not per_position or not drafts or len(qs) < len(per_position):
        return None
    ea = sum(qs)
    ea2 = sum((2 * i + 1) * q for i, q in enumerate(qs))
    return math.sqrt(max(ea2 - ea * ea, 0.0) / drafts)


def _mean(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def _ci_se(ci: Interval | None) -> float | None:
    return (ci[1] - ci[0]) / (2 * Z95) if ci else None


def _task(rec: RunRecord, cname: str, vname: str, tname: str) -> TaskResult | None:
    c = rec.config(cname)
    v = c.variants.get(vname) if c else None
    return v.tasks.get(tname) if v else None


def _noise_vs_first(runs: Sequence[tuple[RunRecord, Path]], cname: str, vname: str, tname: str
                    ) -> list[OutputNoise]:
    """Output mismatch of run i (i >= 2) against run 1 of the same variant and task."""
    def samples(rec: RunRecord, run_dir: Path) -> dict[str, Sample] | None:
        ts = RunFolder(Path(run_dir)).task(rec, cname, vname, tname)
        return None if ts is None else ts.by_question()

    first = samples(*runs[0])
    out: list[OutputNoise] = []
    if first is None:
        return out
    for i, (rec, run_dir) in enumerate(runs[1:], 2):
        other = samples(rec, run_dir)
        if other is None:
            continue
        compared = 0
        diverged: list[list[str | int]] = []
        for q, a in first.items():
            b = other.get(q)
            if b is None or not (a.ok and b.ok) or a.token_ids is None or b.token_ids is None:
                continue
            compared += 1
            d = first_divergence(a.token_ids, b.token_ids)
            if d is not None:
                diverged.append([q, d])
        out.append({"run": i, "compared": compared, "mismatched": len(diverged),
                    "rate": len(diverged) / compared if compared else None, "first_divergences": diverged})
    return out


def summarize(runs: Sequence[tuple[RunRecord, Path]], k: float = 3.0) -> CalibrationSummary:
    """Summarise repeated runs of the same configs and recommend tolerances.

    Args:
        runs: ``(run record, run folder)`` per repeat, in order (at least one).
        k: the number of standard deviations of total noise between the calibrated
            mean and a recommended limit (module docstring).

    Returns:
        a :class:`CalibrationSummary` (accuracies and rates as fractions).

    Raises:
        ValueError: ``runs`` is empty.
    """
    if not runs:
        raise ValueError("summarize needs at least one run")
    first_rec = runs[0][0]
    out: CalibrationSummary = {
        "runs": [{"run_id": r.run_id, "path": str(p), "exit_code": r.exit_code,
                  "status": r.status, "error": r.error.describe() if r.error else None}
                 for r, p in runs],
        "sigmas": k, "rule": RULE.format(k=k), "configs": [],
    }
    out["false_alarms"] = false_alarm_rates([{c.name: c.gates for c in r.configs} for r, _ in runs]).as_dict()
    for c0 in first_rec.configs:
        cname = c0.name
        crecs = [r.config(cname) for r, _ in runs]
        pipe = c0.pipeline
        cs: ConfigCalibration = {"name": cname, "pipeline": pipe, "tasks": [], "comparisons": []}
        tstats: dict[tuple[str, str], TaskCalibration] = {}
        for vname, v in c0.variants.items():
            for tname in v.tasks:
                e = _task_calibration(runs, cname, vname, tname, pipe)
                cs["tasks"].append(e)
                tstats[(vname, tname)] = e
        for comp0 in c0.comparisons:
            cs["comparisons"].append(_comparison_calibration(
                crecs, comp0.baseline, comp0.candidate, comp0.task, tstats))
        cs["recommended"], cs["explain"] = _recommend(cs, k)
        out["configs"].append(cs)
    return out


def _speculative(ts: Sequence[TaskResult | None]) -> SpeculativeSpread:
    """:class:`SpeculativeSpread` of one variant and task's results over the runs."""
    sds = [(t.spec_decode if t else None) for t in ts]
    if not any(sds):
        return {}
    width = max(len(s.per_position_acceptance) for s in sds if s)
    boot = [_ci_se(t.mean_acceptance_length_ci) for t in ts if t]
    draft = [per_draft_se(s.per_position_acceptance, s.drafts) for s in sds if s]
    by_boot = any(x is not None for x in boot)
    return {
        "mean_acceptance_length": spread([s.mean_acceptance_length if s else None for s in sds]),
        "acceptance_rate": spread([s.acceptance_rate if s else None for s in sds]),
        "per_position_acceptance": [
            spread([(s.per_position_acceptance or [None] * width)[i] if s else None for s in sds])
            for i in range(width)
        ],
        "sampling_se_mean_acceptance_length": _mean(boot) if by_boot else _mean(draft),
        "sampling_se_source": ("per-request bootstrap" if by_boot
                               else "per-draft (per-position acceptance, independent drafts)"),
    }


def _task_calibration(runs: Sequence[tuple[RunRecord, Path]], cname: str, vname: str, tname: str,
                      pipe: str) -> TaskCalibration:
    """One variant and task over the runs (:class:`TaskCalibration`); ``pipe`` the pipeline
    whose scored count is ``n``."""
    ts = [_task(r, cname, vname, tname) for r, _ in runs]
    scored = [t.scored[pipe] for t in ts if t and pipe in t.scored]
    noise = _noise_vs_first(runs, cname, vname, tname)
    reruns = [t.rerun.output_match_vs_first if t and t.rerun else None for t in ts]
    e: TaskCalibration = {
        "variant": vname, "task": tname,
        "n": round(_mean(scored) or 0) if scored else None,
        "accuracy": {p: spread([t.accuracy.get(p) if t else None for t in ts])
                     for p in _task_pipelines(runs, cname, tname, ts, pipe)},
        **_speculative(ts),
        "output_noise": noise,
        "output_noise_rate": spread([x["rate"] for x in noise]),
        "rerun_noise_rate": spread(
            [1 - x.output_match_rate if x and x.output_match_rate is not None else None for x in reruns]),
    }
    return e


def _task_pipelines(runs: Sequence[tuple[RunRecord, Path]], cname: str, tname: str,
                    ts: Sequence[TaskResult | None], pipe: str) -> list[str]:
    """The answer pipelines of one task over the runs, as each run's record lists them
    (:func:`harness.tasks.kinds.record_pipelines`: an lm-eval task's own, else its kind's),
    in first-seen order, and the config's gate pipeline ``pipe`` after them when the task
    has no such pipeline (its spread then holds no value)."""
    out: list[str] = []
    for (rec, _), t in zip(runs, ts):
        c = rec.config(cname)
        kind = (c.tasks.get(tname) or {}).get("kind") if c else None
        own = t.lm_eval.pipelines if t is not None and t.lm_eval is not None else None
        for p in record_pipelines(kind if isinstance(kind, str) else None, own, t.accuracy if t else ()):
            if p not in out:
                out.append(p)
    return out if pipe in out else out + [pipe]


def _comparison_calibration(crecs: Sequence[ConfigResult | None], baseline: str, candidate: str, task: str,
                            tstats: Mapping[tuple[str, str], TaskCalibration]) -> ComparisonCalibration:
    """One comparison and task over the runs' config results ``crecs``
    (:class:`ComparisonCalibration`); ``tstats`` the variants' task entries by
    ``(variant, task)``, for the drop in mean acceptance length."""
    comps = [c.comparison(baseline, candidate, task) if c else None for c in crecs]
    pcs = [x.paired if x else None for x in comps]
    drops = [p.accuracy_a - p.accuracy_b if p else None for p in pcs]
    disc = [(len(p.a_only) + len(p.b_only)) / p.n if p and p.n else None for p in pcs]
    wald = [((len(p.a_only) + len(p.b_only)) / p.n ** 2
             - (len(p.a_only) - len(p.b_only)) ** 2 / p.n ** 3) if p and p.n else None for p in pcs]
    ea, eb = tstats.get((baseline, task)), tstats.get((candidate, task))
    al_drop = None
    if ea and eb and ea.get("mean_acceptance_length") and eb.get("mean_acceptance_length"):
        va, vb = ea["mean_acceptance_length"]["values"], eb["mean_acceptance_length"]["values"]
        al_drop = spread([x - y if x is not None and y is not None else None for x, y in zip(va, vb)])
    return {
        "baseline": baseline, "candidate": candidate, "task": task,
        "output_match_rate": spread([x.output_match_rate if x else None for x in comps]),
        "accuracy_drop": spread(drops), "discordance": spread(disc), "wald_variance": _mean(wald),
        "n": pcs[0].n if pcs and pcs[0] else None,
        "acceptance_length_drop": al_drop,
        # the reference's gap at every judged divergence of this (known-good) build
        "divergence_gaps": sorted(d.gap_nats for x in comps if x and x.divergence
                                  for d in x.divergence.divergences if d.gap_nats is not None),
    }


RULE = (
    "limit = calibrated mean -/+ {k} * sqrt(run-to-run variance + sampling variance of one run) "
    "(variances of independent sources add; {k}-sigma Shewhart control limits, Montgomery, "
    "Introduction to Statistical Quality Control, 7th ed., sec. 5.2); sampling variance: "
    "pt(1-pt)/n (pt = (pn+2)/(n+4), Agresti-Coull) for an accuracy, the paired variance for a paired drop, the "
    "per-request "
    "bootstrap (or per-draft) standard error squared for acceptance length"
)


#: Margin on the largest clean near-tie gap for the recommended ``near_tie_nats``.
NEAR_TIE_MARGIN = 1.5


def _up(x: float, d: int = 4) -> float:
    return math.ceil(x * 10**d) / 10**d


def _down(x: float, d: int = 4) -> float:
    return math.floor(x * 10**d) / 10**d


def _recommend(cs: ConfigCalibration, k: float) -> tuple[Recommended, dict[str, str]]:
    """The recommended gate values of one config summary and why (the module docstring's rule),
    by each gate kind's registered rule (:mod:`harness.report.recommenders`)."""
    rec: Recommended = {"gates": {}, "comparisons": []}
    why: dict[str, str] = {}
    for kind, rule in GATES_RULES.items():
        run_rule(kind, rule, rec["gates"], cs, k, rec["gates"], why)
    taskmap = {(e["variant"], e["task"]): e for e in cs["tasks"]}
    for ce in cs["comparisons"]:
        r: RecommendedComparison = {"baseline": ce["baseline"], "candidate": ce["candidate"], "task": ce["task"]}
        tag = f"{ce['baseline']}->{ce['candidate']}/{ce['task']}"
        for kind, rule in COMPARISON_RULES.items():
            run_rule(kind, rule, r, ce, taskmap, k, tag, r, why)
        rec["comparisons"].append(r)
    return rec, why


@recommends(AccuracyFloor)
def _accuracy_floor(cs: ConfigCalibration, k: float, rec: RecommendedGates, why: dict[str, str]) -> None:
    pipe = cs["pipeline"]
    floors = []
    for e in cs["tasks"]:
        a = e["accuracy"][pipe]
        if a["mean"] is None or not e["n"]:
            continue
        p, n, s = a["mean"], e["n"], a["sd"] or 0.0
        sigma = math.sqrt(s * s + binomial_variance(p, n))
        floors.append((e["variant"], e["task"], p, sigma, n))
    if floors:
        thr = max(f[2] for f in floors)
        tol = max(thr - p + k * sig for _, _, p, sig, _ in floors)
        rec["accuracy_threshold"] = round(thr, 4)
        rec["tolerance"] = _up(min(tol, 1.0))
        rec["calibration_questions"] = max(f[4] for f in floors)
        worst = max(floors, key=lambda f: thr - f[2] + k * f[3])
        why["accuracy_threshold"] = f"highest mean {pipe} accuracy over variants and tasks ({thr:.4f})"
        why["tolerance"] = (
            f"largest threshold - p + {k} * sqrt(s^2 + pt(1-pt)/n), pt = (pn+2)/(n+4); set by {worst[0]}/{worst[1]}: "
            f"p={worst[2]:.4f}, sigma={worst[3]:.4f}, n={worst[4]}"
        )
        why["calibration_questions"] = "questions scored per run"


@recommends(MinAcceptanceLength)
def _min_acceptance_length(cs: ConfigCalibration, k: float, rec: RecommendedGates, why: dict[str, str]) -> None:
    mals = []
    for e in cs["tasks"]:
        m = e.get("mean_acceptance_length")
        if not m or m["mean"] is None:
            continue
        se = e.get("sampling_se_mean_acceptance_length") or 0.0
        sig = math.sqrt((m["sd"] or 0.0) ** 2 + se * se)
        mals.append((e["variant"], e["task"], m["mean"], sig, e.get("sampling_se_source")))
    if mals:
        lows = [(v, t, mu - k * sig, mu, sig, src) for v, t, mu, sig, src in mals]
        v, t, low, mu, sig, src = min(lows, key=lambda x: x[2])
        rec["min_acceptance_length"] = max(1.0, _down(low, 3))
        why["min_acceptance_length"] = (
            f"smallest mean - {k} * sqrt(s^2 + se^2), never below 1; set by {v}/{t}: mean {mu:.4f}, "
            f"sigma {sig:.4f} (se from {src})"
        )


@recommends(MaxAccuracyDrop)
def _max_accuracy_drop(ce: ComparisonCalibration, _taskmap: Mapping[tuple[str, str], TaskCalibration], k: float,
                       tag: str, r: RecommendedComparison, why: dict[str, str]) -> None:
    d = ce["accuracy_drop"]
    cn, psi = ce["n"], None
    if ce["discordance"]["mean"] is not None and cn:
        psi = max(ce["discordance"]["mean"], 1.0 / cn)
    if d["mean"] is not None:
        pv = max(ce["wald_variance"] or 0.0, psi / cn if psi and cn else 0.0)
        r["max_accuracy_drop"] = _up(min(1.0, max(0.0, d["mean"]) + k * math.sqrt((d["sd"] or 0.0) ** 2 + pv)))
        why[f"{tag} max_accuracy_drop"] = (
            f"max(0, mean drop {d['mean']:.4f}) + {k} * sqrt(s_drop^2 {(d['sd'] or 0.0) ** 2:.2e} + "
            f"paired variance {pv:.2e} = max(mean Wald variance, expected_discordance / n))"
        )
    if psi is not None:
        r["expected_discordance"] = round(psi, 4)
        why[f"{tag} expected_discordance"] = (
            f"mean share of questions right in exactly one variant, at least 1/n = 1/{ce['n']}")


@recommends(MaxAcceptanceLengthDrop)
def _max_acceptance_length_drop(ce: ComparisonCalibration, taskmap: Mapping[tuple[str, str], TaskCalibration],
                                k: float, tag: str, r: RecommendedComparison, why: dict[str, str]) -> None:
    ad = ce.get("acceptance_length_drop")
    if ad and ad["mean"] is not None:
        sa, sb = _se(taskmap.get((ce["baseline"], ce["task"]))), _se(taskmap.get((ce["candidate"], ce["task"])))
        r["max_acceptance_length_drop"] = _up(
            max(0.0, ad["mean"]) + k * math.sqrt((ad["sd"] or 0.0) ** 2 + sa * sa + sb * sb), 3)
        why[f"{tag} max_acceptance_length_drop"] = f"max(0, mean drop) + {k} * sqrt(s_drop^2 + se_a^2 + se_b^2)"


@recommends(MinOutputMatch)
def _min_output_match(ce: ComparisonCalibration, taskmap: Mapping[tuple[str, str], TaskCalibration], _k: float,
                      tag: str, r: RecommendedComparison, why: dict[str, str]) -> None:
    gaps = ce.get("divergence_gaps") or []
    if gaps:
        r["near_tie_nats"] = _up(NEAR_TIE_MARGIN * max(gaps), 2)
        why[f"{tag} near_tie_nats"] = (
            f"{NEAR_TIE_MARGIN} x the largest gap the reference showed at a divergence of this known-good build "
            f"({max(gaps):.3f} nats over {len(gaps)} divergence(s)): on a good build every divergence is a "
            "near-tie; keep it below the gaps the self-check's state faults produce")
    base = taskmap.get((ce["baseline"], ce["task"]))
    noise = (base["output_noise_rate"]["mean"], base["rerun_noise_rate"]["mean"]) if base else ()
    runs_nz = max([x for x in noise if x is not None], default=None)
    om = ce["output_match_rate"]
    clean = 1 - om["mean"] if om["mean"] is not None else None
    nz = max([x for x in (runs_nz, clean) if x is not None], default=None)
    if nz is not None:
        r["noise_mismatch_rate"] = round(nz, 4)
        r["noise_runs"] = 1
        if nz == 0:
            r["min_output_match"] = 1.0
        why[f"{tag} noise_mismatch_rate"] = (
            f"the larger of the {ce['baseline']} run-to-run output noise "
            f"({'-' if runs_nz is None else f'{runs_nz:.4f}'}: share of questions whose completion differs "
            f"between runs or reruns) and this calibrated build's own {ce['baseline']}-vs-{ce['candidate']} "
            f"mismatch rate ({'-' if clean is None else f'{clean:.4f}'}: e.g. in bfloat16, verifying several "
            "draft tokens in one step rounds differently from one-token decoding, which no gate can tell "
            "from a bug); use it with noise_runs: 1 (a rerun measures only the first kind)"
            + (" (0: outputs are deterministic, require exact equality: min_output_match 1.0)" if nz == 0 else
               "; the output-match gate then fails only when the candidate mismatches significantly more often")
        )


def _se(e: TaskCalibration | None) -> float:
    """The sampling standard error of mean acceptance length of a task entry, 0 without one."""
    return (e.get("sampling_se_mean_acceptance_length") if e else None) or 0.0
