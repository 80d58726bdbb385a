"""What the plan says about sampling and output match, beside the gates: whether a
comparison's output match covers a greedy task (so its noise rerun and the reference's
log-probabilities are worth their cost), which variant scores a comparison's sampled
completions, and why a task that samples has no output-match gate. Read by the plan
(:mod:`harness.config.plan`), the kinds ``min_output_match`` and ``sampled_equivalence``
and the dry run."""

from __future__ import annotations

from harness.config.schema import ComparisonSpec, ModelConfig


def greedy_output_match(config: ModelConfig, comp: ComparisonSpec) -> bool:
    """``comp`` asks for output match and gates at least one greedy task (so its noise
    rerun and the reference's log-probabilities are worth their cost)."""
    return comp.min_output_match is not None and any(
        not config.tasks[t].samples for t in (comp.tasks or config.tasks))


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
