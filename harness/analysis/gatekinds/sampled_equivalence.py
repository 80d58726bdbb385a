"""Gate kind ``sampled_equivalence``: per comparison and gated task that samples, the target's mean
log-probability per token of both variants' sampled completions not significantly
different (two-sided sign-flip permutation test paired by question)."""

from __future__ import annotations

import math
from typing import Literal

from harness.analysis.budget import GateTest
from harness.analysis.gatekinds._common import Budgeted, budget_fields, result
from harness.analysis.measurements import Measurements
from harness.analysis.sampled import RESAMPLES, smallest_attainable_p
from harness.config.gates.registry import Place, gate
from harness.config.gates.sampling import scorer_variant
from harness.records.run_record import GateResult


@gate(scope="comparison", order=30, reads_generation=True, settings=("sampled_alpha", "expected_logprob_sd"),
      doc="(every comparison of a task that samples, in place of `min_output_match`) the target model's mean "
          "log-probability per token and share of its most likely tokens (rank 1) of both variants' sampled "
          "completions, scored on a non-speculative server, are not significantly different (one sign-flip "
          "permutation test of both, maxT, paired by question, p >= alpha; with the false-alarm budget: its "
          "p-value at the config's budget, Holm); NOT RUN when the seeding makes the draws dependent "
          "(\"Sampled verdict\" below)")
class SampledEquivalence(Budgeted):
    """The distribution-level verdict of a comparison on a task that samples, in place of
    token-sequence output match: the target model's mean log-probability per token of
    both variants' sampled completions, scored on the non-speculative ``scorer``
    variant's server, compared paired by question with a two-sided sign-flip permutation
    test (:func:`harness.analysis.sampled.sampled_test`). H0: both sample from the
    target's distribution. Observed is the p-value; it must be >= ``limit`` (= alpha;
    with ``multiple_testing`` ``holm``, the Holm-adjusted p-value over the config's
    family). ``independent`` is False when the test cannot hold its level: the task's
    seeding makes the draws dependent (one seed for every request, or the same seeds on
    both sides), or the task has too few questions for the test ever to reach alpha
    (:func:`too_few_questions`); then NOT RUN with the reason in ``dependence``.

    With ``budget`` (the config's ``false_alarm_budget``) the same p-value is one of the
    config's tested gates (Holm over the family, :mod:`harness.analysis.budget`): ``limit``
    is the budget (the Holm-adjusted p-value must be >= it; ``sampled_alpha`` is not used),
    and a task too small for the test is report-only by the family's rule (its smallest
    attainable p-value, :meth:`planned_min_p`, above its share), not by ``independent``."""

    kind: Literal["sampled_equivalence"] = "sampled_equivalence"
    op: Literal[">="] = ">="
    limit: float
    scorer: str | None
    multiple_testing: Literal["none", "holm"] = "none"
    independent: bool = True
    dependence: str = ""

    @classmethod
    def plan(cls, at: Place) -> SampledEquivalence | None:
        """Every gated task of a comparison that samples (:attr:`~harness.config.schema.TaskSpec.samples`)."""
        if at.task is None or not at.config.tasks[at.task].samples:
            return None
        config, comp, tname = at.config, at.comp, at.task
        t = config.tasks[tname]
        va, vb = config.variants[comp.baseline], config.variants[comp.candidate]
        why = ""
        if not t.independent_draws():
            why = (f"task {tname} sends seed {t.seed} (plus the variant's seed_offset) with every request: every "
                   "question draws the same random numbers, so questions are not independent draws and the test's "
                   "false-alarm rate does not hold (docs/gates.md, \"Seeds\"); set seed_mode: per_run (or "
                   "per_question, or seed: null; vLLM's form: seed: null)")
        elif t.seed is not None and va.seed_offset == vb.seed_offset:
            why = (f"{comp.baseline} and {comp.candidate} send the same seeds (seed_offset {va.seed_offset}): their "
                   "draws are coupled, not independent; give one of them another seed_offset")
        alpha = comp.sampled_alpha or comp.alpha
        g = at.settings
        scorer = scorer_variant(config, comp)
        budget = config.false_alarm_budget
        if budget is not None:
            return cls.at(
                at, limit=budget, scorer=scorer, independent=not why, dependence=why, **budget_fields(at),
                description=(f"the target's mean log-probability per token and share of its most likely tokens of "
                             f"both variants' sampled completions (scored on "
                             f"{scorer or 'no non-speculative variant'}'s server), paired by question: not "
                             f"significantly different (one sign-flip permutation test of both, maxT; "
                             f"false_alarm_budget {budget:g}, Holm over the config's tested gates); H0: both "
                             "sample from the target's distribution"),
            )
        if not why and (small := too_few_questions(t.num_questions, alpha)):
            why = f"task {tname}: {small}"
        return cls.at(
            at, limit=alpha, scorer=scorer, multiple_testing=g.multiple_testing,
            independent=not why, dependence=why,
            description=(f"the target's mean log-probability per token and share of its most likely tokens of "
                         f"both variants' sampled completions (scored on {scorer or 'no non-speculative variant'}'s "
                         f"server), paired by question: not significantly different (one sign-flip permutation "
                         f"test of both, maxT, alpha {alpha:g}"
                         + (", Holm-corrected across the config's family)" if g.multiple_testing == "holm" else ")")
                         + "; H0: both sample from the target's distribution"),
        )

    def planned_test(self) -> bool:
        """With the budget and independent draws (dependent draws are NOT RUN, never tested)."""
        return self.budget is not None and self.independent

    def test(self, m: Measurements) -> GateTest | None:
        """The comparison's sign-flip p-value (None: not scored on both sides)."""
        st = m.comparison(self.baseline, self.variant, self.task).sampled
        if st is None:
            return None
        return GateTest(st.p_value, self.planned_min_p(st.n), "sign-flip permutation test (maxT)")

    def planned_min_p(self, n: int) -> float:
        """The smallest p-value the test can give on ``n`` paired questions: ``2 / 2**n``
        (:func:`~harness.analysis.sampled.smallest_attainable_p`) while every flip is
        enumerated (``2**n <= RESAMPLES``), else ``1 / (RESAMPLES + 1)`` (random flips:
        ``scipy.stats.permutation_test`` counts the observed statistic once)."""
        return smallest_attainable_p(n) if 2 ** min(n, 64) <= RESAMPLES else 1.0 / (RESAMPLES + 1)

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """``sampled_equivalence``: :func:`sampled_verdict`."""
        return result(self, *sampled_verdict(self, m, adjusted_p))


def too_few_questions(n: int | None, alpha: float) -> str | None:
    """Why a two-sided sign-flip test on ``n`` paired questions can never reject at
    ``alpha`` (its smallest p-value, all signs alike, is ``2 / 2**n``:
    :func:`~harness.analysis.sampled.smallest_attainable_p`), or None when it can
    (or ``n`` is not known before the run). Such a gate could only pass: it is planned
    NOT RUN (report only), never PASS."""
    if n is None or smallest_attainable_p(n) <= alpha:
        return None
    need = math.ceil(math.log2(2.0 / alpha)) if alpha > 0 else None
    return (f"{n} question(s): the sign-flip test's smallest two-sided p-value is 2/2^{n} = "
            f"{smallest_attainable_p(n):.4g}, "
            f"above alpha {alpha:g}, so it can never fail at this size (report only, NOT RUN)"
            + (f"; ask at least {need} questions" if need else ""))


#: A sampled verdict: ``(observed p-value or None, limit, passed or None, detail, questions named)``.
Verdict = tuple["float | None", float, "bool | None", str, tuple[str, ...]]


def sampled_verdict(g: SampledEquivalence, m: Measurements, adjusted_p: float | None = None) -> Verdict:
    """The verdict of a ``sampled_equivalence`` gate: the two-sided sign-flip p-value of the
    shift of the target's mean log-probability per token (candidate - baseline;
    :class:`SampledRecord`) must be >= alpha (the Holm-adjusted p-value when
    ``adjusted_p`` is given). Dependent draws (``independent`` False): NOT RUN (None) with
    the reason. No scorer, a scoring error or no question scored on both sides: failed
    (the verdict it claims cannot be given). A failure names the questions whose
    candidate completion lost the most likelihood."""
    if not g.independent:
        return (None, g.limit, None, f"not run: {g.dependence}", ())
    if g.scorer is None:
        return (None, g.limit, False, "no non-speculative variant in the config to score the sampled completions "
                "on (the candidate's own log-probabilities are not trusted under speculation)", ())
    if g.scorer is not None and (left := m.variant(g.scorer).not_run) is not None and "not selected" in left:
        return (None, g.limit, None, f"not run: the scorer {g.scorer} was left out ({left})", ())
    errs = [f"{v}: {e}" for v in (g.baseline, g.variant) if (e := m.task(v, g.task).scoring_error)]
    st = m.comparison(g.baseline, g.variant, g.task).sampled
    if st is None:
        return (None, g.limit, False, "; ".join(errs) or "no question scored on both sides", ())
    if (small := too_few_questions(st.n, g.limit)) is not None:  # fewer paired than planned: cannot fail
        return (None, g.limit, None, f"not run: {st.n} question(s) scored on both sides: {small}", ())
    p = st.p_value if adjusted_p is None else adjusted_p
    ok = p >= g.limit
    how = "exact" if st.resamples == 0 else f"{st.resamples} random flips"
    detail = (f"target log-probability per token (scored on {st.scorer}): {g.baseline} {st.mean_a:.4f}, "
              f"{g.variant} {st.mean_b:.4f} nats on {st.n} paired questions; shift {st.shift:+.4f} nats/token "
              f"(sd {st.sd:.4f}), paired t = {st.t:.2f} (t-test p={st.t_p_value:.3g}); "
              + (f"share of target-top-1 tokens {st.top1_a:.4f} -> {st.top1_b:.4f} (shift {st.top1_shift:+.4f}); "
                 f"sign-flip permutation p={st.p_value:.4g} of both together (maxT, {how}; alone: log-probability "
                 f"{st.logprob_p_value:.4g}, top-1 share {st.top1_p_value:.4g})"
                 if st.top1_p_value is not None and st.top1_a is not None and st.top1_b is not None
                 and st.top1_shift is not None and st.logprob_p_value is not None
                 else f"two-sided sign-flip permutation p={st.p_value:.4g} ({how})")
              + (f", Holm-adjusted {adjusted_p:.4g}" if adjusted_p is not None else "")
              + f"; mean total log-probability {st.sum_a:.2f} -> {st.sum_b:.2f}")
    if st.unscored:
        detail += f"; {len(st.unscored)} question(s) not scored on both sides, left out"
    if st.past_stop_a or st.past_stop_b:
        detail += (f"; ids past the stop string left out of the scores: {g.baseline} {st.past_stop_a}, "
                   f"{g.variant} {st.past_stop_b}")
    if errs:
        detail += "; scoring errors: " + "; ".join(errs)
    if not ok:
        level = "false_alarm_budget" if g.budget is not None else "alpha"
        detail += (f"; FAILED: the two variants do not sample from the same distribution (p={p:.4g} < {level} "
                   f"{g.limit:g}): {g.variant}'s completions are "
                   + ("less" if st.shift < 0 else "more") + " likely under the target"
                   + ("" if st.top1_shift is None else
                      f", with {'fewer' if st.top1_shift < 0 else 'more'} of the target's most likely tokens"))
    return (p, g.limit, ok and not errs, detail, st.worst if not ok else ())
