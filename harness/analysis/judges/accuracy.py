"""Judges of the family "accuracy" (:mod:`harness.config.gates.accuracy`): ``accuracy_floor``,
``max_accuracy_drop``, ``baseline_accuracy_drop``; every drop through :func:`.common.drop_verdict`."""

from __future__ import annotations

from collections.abc import Sequence

from harness.analysis.judges import common
from harness.analysis.judges.common import judges, no_stored, result, stored_task, task_score, truncation_note
from harness.analysis.measurements import Measurements
from harness.analysis.scoring import correctness
from harness.analysis.stats import floor_margin, paired_comparison
from harness.config import gates as G
from harness.config.schema import VLLM_PIPELINE
from harness.records.baselines import BaselineTask
from harness.records.measures import TaskScore
from harness.records.run_record import GateResult
from harness.records.samples import Sample


@judges(G.AccuracyFloor)
def judge_accuracy_floor(g: G.AccuracyFloor, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """``accuracy_floor``: accuracy >= threshold - tolerance - margin, where margin is
    :func:`harness.analysis.stats.floor_margin` when the gate gives
    ``calibration_questions`` larger than the run's scored questions, else 0. A pipeline
    that was not computed is NOT RUN; no successful request fails. A failing floor names
    the truncated share above :data:`TRUNCATION_NOTE_RATE`."""
    sc, none = task_score(g, m)
    if sc is None:
        return none  # type: ignore[return-value]
    ps = sc.accuracy.get(g.pipeline)
    if ps is None:
        return result(g, None, g.limit, None,
                       f"not run: answer pipeline {g.pipeline} was not computed "
                       f"(computed: {', '.join(sc.accuracy) or 'none'}; lm-eval's pipelines need "
                       "lm-eval, a dependency of evalrun, importable: see provenance.lm_eval.error)")
    if g.pipeline == VLLM_PIPELINE:
        return _vllm_floor(g, sc.num_requests, ps.correct, sc.error_count, sc)
    if ps.accuracy is None:
        return result(g, None, g.limit, False, "no request succeeded: accuracy cannot be computed")
    margin = 0.0
    cal = g.calibration_questions
    if cal is not None and ps.scored < cal:
        margin = floor_margin(ps.scored, cal, g.accuracy_threshold)
    limit = round(g.limit - margin, 6)
    ok = ps.accuracy >= limit
    extra = (f" (floor {g.limit} widened by {margin:.4f} for {ps.scored} of {cal} calibration questions)"
             if margin else "")
    return result(
        g, ps.accuracy, limit, ok,
        f"{g.pipeline} accuracy {ps.accuracy:.4f} ({ps.correct}/{ps.scored}) vs floor {limit:.4f}{extra}"
        + ("" if ok else truncation_note(sc, g.variant)),
    )



def _vllm_floor(g: G.AccuracyFloor, n: int, correct: int, errors: int, sc: TaskScore) -> GateResult:
    """vLLM's verdict (``test_gsm8k_correctness.py``): ``correct / n >= threshold - tolerance``
    in floating point, ``n`` every question asked (vLLM scores a failed request as a wrong
    answer); a floor widened only when the config writes ``calibration_questions``."""
    accuracy = correct / n if n else 0.0
    margin = 0.0
    cal = g.calibration_questions
    if cal is not None and n < cal:
        margin = floor_margin(n, cal, g.accuracy_threshold)
    limit = g.limit - margin
    ok = accuracy >= limit
    extra = (f" (floor {g.limit} widened by {margin:.4f} for {n} of {cal} calibration questions, "
             "calibration_questions: evalrun's addition)" if margin else "")
    failed = f", {errors} failed request(s) counted wrong as vLLM counts them" if errors else ""
    return result(
        g, accuracy, limit, ok,
        f"vLLM's rule: {g.pipeline} accuracy {accuracy:.4f} ({correct}/{n}{failed}) vs floor "
        f"{g.accuracy_threshold} - {g.tolerance} = {limit!r}{extra}" + ("" if ok else truncation_note(sc, g.variant)),
    )


@judges(G.MaxAccuracyDrop)
def judge_max_accuracy_drop(g: G.MaxAccuracyDrop, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """``max_accuracy_drop``, one-sided (:func:`drop_verdict`): fails when baseline -
    candidate accuracy on the paired questions (under the gate's pipeline) exceeds the
    limit, or when the candidate is significantly worse (exact one-sided McNemar p <
    alpha; with ``adjusted_p`` given, the Holm-adjusted p-value of :func:`holm_p_values`
    is compared instead). An improvement never fails. No paired question: NOT RUN."""
    pc = m.paired(g.baseline, g.variant, g.task, g.pipeline)
    if pc is None:
        return result(g, None, g.limit, None, "not run: no paired questions")
    drop = pc.accuracy_a - pc.accuracy_b
    holm = adjusted_p is not None
    v = common.drop_verdict(drop, g.limit, pc.one_sided_p_value if adjusted_p is None else adjusted_p, g.alpha,
                     worse="significantly worse", test="one-sided McNemar " + ("Holm-adjusted " if holm else ""))
    detail = (
        f"{g.pipeline}: {g.baseline} {pc.accuracy_a:.4f} -> {g.variant} {pc.accuracy_b:.4f} on {pc.n} paired "
        "questions; "
        f"{len(pc.a_only)} right only in {g.baseline}, {len(pc.b_only)} right only in {g.variant}; "
        f"one-sided p={pc.one_sided_p_value:.4g}"
        + (f" (Holm-adjusted {adjusted_p:.4g})" if holm else "")
    )
    if not v.passed:
        detail += v.failure + truncation_note(m.task(g.variant, g.task).score, g.variant)
    return result(g, drop, g.limit, v.passed, detail, pc.a_only if not v.passed else ())



@judges(G.BaselineAccuracyDrop)
def judge_baseline_accuracy_drop(g: G.BaselineAccuracyDrop, m: Measurements,
                                 adjusted_p: float | None = None) -> GateResult:
    """``baseline_accuracy_drop``: the accuracy drop since the stored baseline
    (:mod:`harness.records.baselines`) <= limit and not significantly lower
    (:func:`drop_verdict`; the test is :func:`_baseline_accuracy`'s)."""
    bt, label = stored_task(g, m)
    if bt is None:
        return no_stored(g, label)
    cur = m.task(g.variant, g.task).samples
    if cur is None:
        return result(g, None, g.limit, None, "not run: no samples", baseline=label)
    return _baseline_accuracy(g, bt, cur, label)


def _baseline_accuracy(g: G.BaselineAccuracyDrop, bt: BaselineTask, cur: Sequence[Sample],
                       label: str | None) -> GateResult:
    """Accuracy against the stored baseline. With b = questions right in the baseline and
    wrong now, c = the reverse, over the question ids present in both with the same
    prompt hash, drop = (b - c)/n and the one-sided exact McNemar p = P(Binomial(b + c,
    1/2) >= b) (McNemar 1947); without paired data drop = p_base - p_now and p is
    Fisher's exact one-sided p of the 2x2 table [[correct_base, wrong_base],
    [correct_now, wrong_now]] (alternative: the baseline's odds of a right answer are
    greater; Fisher 1935, ``scipy.stats.fisher_exact``)."""
    from scipy import stats as _st

    pipe = g.pipeline
    base = bt.correctness(pipe)
    now_ok = [s for s in cur if s.ok]
    now_hash = {s.question_id: s.prompt_hash for s in now_ok}
    now = correctness(now_ok, pipe)
    same = {q for q in set(base) & set(now) if base[q][0] == now_hash[q]}
    changed_prompt = len((set(base) & set(now)) - same)
    if same:
        pc = paired_comparison({q: base[q][1] for q in same}, {q: now[q] for q in same})
        drop = pc.accuracy_a - pc.accuracy_b
        p = pc.one_sided_p_value
        how = (f"paired on {pc.n} questions: {len(pc.a_only)} right only in the baseline, "
               f"{len(pc.b_only)} right only now; one-sided exact McNemar p={p:.4g}")
        a_acc, b_acc, lost = pc.accuracy_a, pc.accuracy_b, pc.a_only
    else:
        cb, nb = int(bt.correct.get(pipe) or 0), int(bt.scored.get(pipe) or 0)
        cn, nn = sum(now.values()), len(now)
        if nb == 0 or nn == 0:
            return result(g, None, g.limit, False,
                           "no scored question on one side: accuracy cannot be compared with the baseline",
                           baseline=label)
        a_acc, b_acc = cb / nb, cn / nn
        drop = a_acc - b_acc
        p = float(_st.fisher_exact([[cb, nb - cb], [cn, nn - cn]], alternative="greater")[1])
        how = (f"unpaired (baseline has no per-question data for these prompts): {cb}/{nb} vs {cn}/{nn}; "
               f"one-sided Fisher exact p={p:.4g}")
        lost = ()
    v = common.drop_verdict(drop, g.limit, p, g.alpha, worse="significantly lower")
    detail = f"{pipe} accuracy baseline {a_acc:.4f} -> now {b_acc:.4f} (drop {drop:.4f}); {how}"
    if changed_prompt:
        detail += f"; {changed_prompt} question(s) have a different prompt than in the baseline and are not paired"
    return result(g, drop, g.limit, v.passed, detail + v.failure, lost if not v.passed else (), baseline=label)
