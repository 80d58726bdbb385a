"""Gate family "sampled outputs from the target's distribution": ``sampled_equivalence``
(per comparison and task that samples), its scorer, and why such a task has no
output-match gate."""

from __future__ import annotations

import math
from typing import Literal

from harness.config.gates.registry import GateBase, GateKind, Place, gate
from harness.config.schema import ComparisonSpec, ModelConfig


@gate(scope="comparison", order=30, reads_generation=True, settings=("sampled_alpha", "expected_logprob_sd"),
      doc="(every comparison of a task that samples, in place of `min_output_match`) the target model's mean "
          "log-probability per token of both variants' sampled completions, scored on a non-speculative server, "
          "is not significantly different (two-sided sign-flip permutation test paired by question, p >= alpha); "
          "NOT RUN when the seeding makes the draws dependent (\"Sampled verdict\" below)")
class SampledEquivalence(GateBase):
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
    (:func:`too_few_questions`); then NOT RUN with the reason in ``dependence``."""

    kind: Literal[GateKind.SAMPLED_EQUIVALENCE] = GateKind.SAMPLED_EQUIVALENCE
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
                   "false-alarm rate does not hold (docs/gates.md, \"Seeds\"); set seed_mode: per_question (or "
                   "seed: null; vLLM's form: seed: null)")
        elif t.seed is not None and va.seed_offset == vb.seed_offset:
            why = (f"{comp.baseline} and {comp.candidate} send the same seeds (seed_offset {va.seed_offset}): their "
                   "draws are coupled, not independent; give one of them another seed_offset")
        alpha = comp.sampled_alpha or comp.alpha
        if not why and (small := too_few_questions(t.num_questions, alpha)):
            why = f"task {tname}: {small}"
        g = at.settings
        scorer = scorer_variant(config, comp)
        return cls.at(
            at, limit=alpha, scorer=scorer, multiple_testing=g.multiple_testing,
            independent=not why, dependence=why,
            description=(f"the target's mean log-probability per token of both variants' sampled completions "
                         f"(scored on {scorer or 'no non-speculative variant'}'s server), paired by question: not "
                         f"significantly different (two-sided sign-flip permutation test, alpha {alpha:g}"
                         + (", Holm-corrected across the config's family)" if g.multiple_testing == "holm" else ")")
                         + "; H0: both sample from the target's distribution"),
        )


def too_few_questions(n: int | None, alpha: float) -> str | None:
    """Why a two-sided sign-flip test on ``n`` paired questions can never reject at
    ``alpha`` (its smallest p-value, all signs alike, is ``2 / 2**n``), or None when it can
    (or ``n`` is not known before the run). Such a gate could only pass: it is planned
    NOT RUN (report only), never PASS."""
    if n is None or 2.0 / 2.0 ** min(n, 1100) <= alpha:
        return None
    need = math.ceil(math.log2(2.0 / alpha)) if alpha > 0 else None
    return (f"{n} question(s): the sign-flip test's smallest two-sided p-value is 2/2^{n} = {2.0 / 2.0 ** n:.4g}, "
            f"above alpha {alpha:g}, so it can never fail at this size (report only, NOT RUN)"
            + (f"; ask at least {need} questions" if need else ""))


def scorer_variant(config: ModelConfig, comp: ComparisonSpec) -> str | None:
    """The non-speculative variant whose server scores a comparison's sampled completions:
    its baseline when that does not speculate, else the config's first variant without
    speculation, fault or ``not_applicable``; None when there is none."""
    if config.variants[comp.baseline].speculative_config is None:
        return comp.baseline
    return next((n for n, v in config.variants.items()
                 if v.speculative_config is None and v.fault is None and v.not_applicable is None), None)


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
