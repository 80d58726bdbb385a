"""Divergences judged by the reference's distribution at the baseline's own prefix.

For a comparison whose baseline speculates (``spec_sync -> spec_async``), the reference's
recorded top-k log-probabilities judge a divergence at ``d`` only where the reference's own
ids equal the baseline's before ``d`` (:func:`harness.analysis.divergence.classify_divergences`).
Elsewhere (sources ``reference_paths``, ``rerun``, ``none``) the reference's server can still
judge ``d`` itself: scored with prompt log-probabilities on the prompt followed by the
baseline's ids ``[:d]`` and then the baseline's token, and again with the candidate's token
(:mod:`harness.run.prefix_steps`), it gives the reference's log-probability of both tokens
at the baseline's prefix. The gap ``lp(baseline token) - lp(candidate token)`` is then judged
as a near tie is (:func:`judge_at_prefix`): at most the report's ``near_tie_nats`` (already
widened under numerics noise, :func:`harness.analysis.divergence.near_tie_bound`) is
explained, more is unexplained; a negative gap (the reference prefers the candidate's token)
is explained. A divergence whose candidate token lay outside the reference's recorded top k
(judged only by a lower bound on its gap, :func:`outside_top_k`) is scored the same way, for
its exact gap, when that bound is within the near tie (a bound beyond it already decides).
The verdict replaces the fallback's (source ``reference_at_prefix``): the
reference's own distribution at the very position beats the indirect rules. Scoring that
failed changes no verdict (an unexplained divergence stays unexplained, fail closed); its
reason names the request and the error.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Final, Mapping, Sequence

from harness.records.measures import (
    EXPLAINED,
    NOISE,
    UNEXPLAINED,
    DivergenceRecord,
    DivergenceReportRecord,
)
from harness.records.samples import Sample

__all__ = ["PREFIX_SOURCE", "PrefixItem", "PrefixScore", "judge_at_prefix", "outside_top_k", "prefix_items"]

#: the source of a divergence judged at the baseline's prefix on the reference's server
PREFIX_SOURCE: Final = "reference_at_prefix"
#: the sources of divergences the reference's recorded distribution could not judge at
#: the baseline's prefix (its own prefix differed, or it had no distribution there)
UNJUDGED_SOURCES: Final = ("reference_paths", "rerun", "none")


@dataclass(frozen=True)
class PrefixItem:
    """One divergence to score at the baseline's prefix.

    Attributes:
        question_id: the question.
        position: the first divergence ``d``.
        prefix: the baseline's token ids ``[:d]`` (equal to the candidate's).
        baseline_token, candidate_token: the two tokens at ``d``.
    """

    question_id: str
    position: int
    prefix: tuple[int, ...]
    baseline_token: int
    candidate_token: int


@dataclass(frozen=True)
class PrefixScore:
    """The reference's view of one :class:`PrefixItem` (one line of
    ``samples/<config>/<candidate>/<task>.prefix_scores.<baseline>.jsonl``).

    Attributes:
        question_id, position, baseline_token, candidate_token: as the item's.
        baseline_logprob, candidate_logprob: the reference's log-probability of each
            token after the prompt and the prefix (nats); None when scoring failed.
        baseline_rank, candidate_rank: their ranks as vLLM reports them (1 = the
            reference's top token), None where not reported.
        error: why scoring failed (naming the request), else None.
    """

    question_id: str
    position: int
    baseline_token: int
    candidate_token: int
    baseline_logprob: float | None = None
    candidate_logprob: float | None = None
    baseline_rank: int | None = None
    candidate_rank: int | None = None
    error: str | None = None

    @property
    def gap_nats(self) -> float | None:
        """``baseline_logprob - candidate_logprob`` (None when scoring failed)."""
        if self.baseline_logprob is None or self.candidate_logprob is None:
            return None
        return self.baseline_logprob - self.candidate_logprob

    def to_json(self) -> dict[str, object]:
        """The JSONL line's fields, with ``gap_nats``."""
        return {**asdict(self), "gap_nats": self.gap_nats}


def outside_top_k(d: DivergenceRecord, near_tie_nats: float) -> bool:
    """A divergence the recorded distribution judged unexplained only because the candidate's
    token is outside the reference's top k while that bound is within the near tie: its
    recorded gap is a lower bound (top-1 minus the k-th log-probability), not a measurement,
    so only the exact gap, scored at the prefix, can say whether it is a near tie. A bound
    already beyond ``near_tie_nats`` decides (the exact gap is at least the bound): not scored,
    so a run whose bounds all exceed the threshold (the CPU engine without noise) starts nothing."""
    return (d.verdict == UNEXPLAINED and d.in_top_k is False and d.source not in UNJUDGED_SOURCES
            and d.gap_nats is not None and d.gap_nats <= near_tie_nats + 1e-12)


def prefix_items(report: DivergenceReportRecord, baseline: Sequence[Sample]) -> list[PrefixItem]:
    """The divergences of ``report`` the reference's recorded distribution could not judge
    at the baseline's prefix (sources :data:`UNJUDGED_SOURCES`) or judged only by a bound
    within the near tie (:func:`outside_top_k`), and that have a token on both sides at ``d`` (an ended
    completion is not scored), with the baseline's prefix from its samples ``baseline`` (a
    question without token ids there is left out)."""
    ids = {s.question_id: s.token_ids for s in baseline if s.ok and s.token_ids is not None}
    out = []
    for d in report.divergences:
        base_ids = ids.get(d.question_id)
        wanted = d.source in UNJUDGED_SOURCES or outside_top_k(d, report.near_tie_nats)
        if (not wanted or d.baseline_token is None or d.candidate_token is None or base_ids is None
                or len(base_ids) <= d.position):
            continue
        out.append(PrefixItem(d.question_id, d.position, tuple(base_ids[:d.position]), d.baseline_token,
                              d.candidate_token))
    return out


def judge_at_prefix(report: DivergenceReportRecord, scores: Mapping[str, PrefixScore],
                    scorer: str) -> DivergenceReportRecord:
    """``report`` with every divergence scored in ``scores`` (question id -> its
    :class:`PrefixScore`) judged by the reference's gap at the baseline's prefix.

    A scored divergence is explained when its :attr:`PrefixScore.gap_nats` is at most
    ``report.near_tie_nats`` (a negative gap, the reference preferring the candidate's
    token, is explained), else unexplained. Its source becomes :data:`PREFIX_SOURCE`; its
    ``gap_nats`` is how far the candidate's token is below the better of the two,
    ``max(gap, 0)`` (>= 0 as every recorded gap; the signed gap is in the scores file and
    the reason); ``in_top_k`` True (both tokens were scored, exactly); ``candidate_rank``
    the candidate token's rank there; ``reference_token`` whichever side's token the
    reference ranks first (None when neither). A score with an ``error`` keeps the divergence's verdict, its reason
    extended by the error. Divergences are ordered worst first again.

    Args:
        report: the comparison's judged divergences on one task.
        scores: question id -> score, for divergences scored at the baseline's prefix.
        scorer: the variant whose server scored (the reference), for the reasons.
    """
    out: list[DivergenceRecord] = []
    t = report.near_tie_nats
    for d in report.divergences:
        s = scores.get(d.question_id)
        if s is None or s.position != d.position:
            out.append(d)
            continue
        gap = s.gap_nats
        if gap is None:
            out.append(d.model_copy(update={"reason": f"{d.reason}; scoring at the baseline's prefix on {scorer}'s "
                                                      f"server failed: {s.error}"}))
            continue
        ok = gap <= t + 1e-12
        ranks = f"ranks #{s.baseline_rank} and #{s.candidate_rank}" if s.baseline_rank and s.candidate_rank else ""
        reason = (f"scored at the baseline's prefix on {scorer}'s server (prompt log-probabilities): the "
                  f"candidate's token {d.candidate_token} is {gap:.3f} nats below the baseline's {d.baseline_token}"
                  + (f" ({ranks})" if ranks else "")
                  + (f", a near-tie (<= {t:g})" if ok and gap >= 0 else
                     ", the reference prefers the candidate's token" if ok else f", confident (> {t:g})")
                  + f"; before scoring: {d.verdict}, {d.reason}")
        ref_tok = (d.baseline_token if s.baseline_rank == 1 else d.candidate_token if s.candidate_rank == 1
                   else None)
        out.append(d.model_copy(update={
            "verdict": EXPLAINED if ok else UNEXPLAINED, "source": PREFIX_SOURCE, "gap_nats": round(max(gap, 0.0), 6),
            "in_top_k": True, "candidate_rank": s.candidate_rank, "reference_token": ref_tok, "reason": reason}))
    order = {UNEXPLAINED: 0, NOISE: 1, EXPLAINED: 2}
    out.sort(key=lambda x: (order[x.verdict], -(x.gap_nats if x.gap_nats is not None else float("inf")),
                            x.question_id))
    return report.model_copy(update={"divergences": tuple(out)})
