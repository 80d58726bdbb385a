"""Gate family "greedy outputs match": ``min_output_match`` (per comparison and greedy task)."""

from __future__ import annotations

from typing import Literal

from harness.config.gates.registry import GateBase, GateKind, Place, gate
from harness.config.schema import ComparisonSpec, ModelConfig


@gate(scope="comparison", order=20, reads_generation=True,
      settings=("min_output_match", "noise_mismatch_rate", "noise_runs", "near_tie_nats"),
      doc="share of questions without an **unexplained** divergence >= the limit, each divergence judged by the "
          "reference's top-k log-probabilities (near ties are explained; \"Near ties\" below); where no reference "
          "distribution exists, output match >= the limit, or with a noise reference whose noise is above 0: the "
          "candidate does not mismatch significantly more often than the noise (see below)")
class MinOutputMatch(GateBase):
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

    @classmethod
    def plan(cls, at: Place) -> MinOutputMatch | None:
        """Every gated greedy task of a comparison with ``min_output_match`` (a task that
        samples is judged by ``sampled_equivalence``); the description names the noise
        reference (rerun always / only when divergences are left unjudged / stored rate)."""
        comp = at.comp
        if comp.min_output_match is None or at.task is None or at.config.tasks[at.task].samples:
            return None
        noise = (
            f"; judged against {comp.baseline}-vs-{comp.baseline} noise (rerun) when that noise is > 0"
            if comp.noise_runs > 1 and comp.noise_runs_when == "always" else
            f"; {comp.baseline} rerun for noise only when divergences are left that no reference "
            "distribution judges"
            if comp.noise_runs > 1 else
            f"; judged against the stored noise rate {comp.noise_mismatch_rate} when > 0"
            if comp.noise_mismatch_rate is not None else ""
        )
        return cls.at(
            at, limit=comp.min_output_match, alpha=comp.output_match_alpha or comp.alpha,
            noise_runs=comp.noise_runs,
            noise_mismatch_rate=comp.noise_mismatch_rate, near_tie_nats=comp.near_tie_nats,
            description=("share of questions with identical completion token ids" if comp.near_tie_nats is None
                         else "share of questions without an unexplained divergence (divergences at a "
                              f"near-tie of the reference, gap <= {comp.near_tie_nats:g} nats, are explained)")
                        + noise,
        )


def greedy_output_match(config: ModelConfig, comp: ComparisonSpec) -> bool:
    """``comp`` asks for output match and gates at least one greedy task (so its noise
    rerun and the reference's log-probabilities are worth their cost)."""
    return comp.min_output_match is not None and any(
        not config.tasks[t].samples for t in (comp.tasks or config.tasks))
