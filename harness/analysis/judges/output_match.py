"""Judges of the family "greedy outputs match" (:mod:`harness.config.gates.output_match`): ``min_output_match``."""

from __future__ import annotations

from harness.analysis.judges.common import judges, result
from harness.analysis.measurements import Measurements
from harness.config import gates as G
from harness.records.measures import AnswerAgreementRecord, DivergenceReportRecord, NoiseRecord, OutputMatchRecord
from harness.records.run_record import GateResult


@judges(G.MinOutputMatch)
def judge_min_output_match(g: G.MinOutputMatch, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """``min_output_match``. With ``near_tie_nats`` and a :class:`DivergenceReportRecord`: share
    of questions without an unexplained divergence >= limit
    (:func:`_output_match_classified`); the noise test is then not used. Otherwise the
    share of identical completion token ids >= limit; with a noise reference
    (:class:`NoiseRecord`) whose noise is above zero, the limit is replaced by a test:
    fails when the candidate mismatches significantly more often than the noise
    (one-sided p < alpha). Zero observed noise means the engine is deterministic on
    these prompts, so the limit applies unchanged. Nothing comparable: NOT RUN when no
    match was measured, failed when one was but compared no question."""
    cm = m.comparison(g.baseline, g.variant, g.task)
    om = cm.match
    if om is None or om.output_match_rate is None:
        return result(g, None, g.limit, False if om is not None else None, "no question could be compared")
    dv = cm.divergences if g.near_tie_nats is not None else None
    if dv is not None:
        return _output_match_classified(g, om, dv, cm.answers)
    return _output_match_exact(g, om, cm.noise, cm.answers)


def _output_match_exact(g: G.MinOutputMatch, om: OutputMatchRecord, nz: NoiseRecord | None,
                        ag: AnswerAgreementRecord | None) -> GateResult:
    """``min_output_match`` on identical token ids, judged against the noise when it shows any
    (``om.output_match_rate`` is not None: the caller judged that case)."""
    rate = om.output_match_rate if om.output_match_rate is not None else 0.0
    ok = rate >= g.limit
    detail = f"{om.matched}/{om.compared} completions identical (output match {om.output_match_rate:.4f})"
    if om.past_stop:
        ex = om.past_stop[0]
        detail += (f"; {len(om.past_stop)} of them identical only up to the stop (ids past the stop "
                   f"differ, not a divergence; e.g. {ex.question_id}: {ex.side} has {ex.extra_ids} extra ids)")
    limit: float | None = g.limit
    if nz is not None and nz.noise_rate > 0:
        ok = nz.p_value >= g.alpha
        limit = None
        src = (f"{g.baseline} rerun: {nz.noise_mismatched}/{nz.noise_compared} differ"
               if nz.source == "rerun" else f"stored noise_mismatch_rate {nz.noise_rate:.4f}")
        detail += (
            f"; judged against noise ({src}, rate {nz.noise_rate:.4f}) instead of the limit {g.limit}: "
            f"candidate mismatch rate {'-' if nz.candidate_rate is None else f'{nz.candidate_rate:.4f}'}, one-sided "
            f"p={nz.p_value:.4g} "
            f"({nz.test}) {'>=' if ok else '<'} alpha {g.alpha}"
        )
    elif nz is not None:
        detail += f"; noise reference shows no mismatch ({nz.source}), so exact limit {g.limit} applies"
    if ag is not None and ag.agreement_rate is not None:
        detail += (f"; answer-level agreement ({ag.pipeline}) {ag.agreed}/{ag.compared} "
                   f"({ag.agreement_rate:.4f})")
    if om.mismatches:
        firsts = ", ".join(f"{x.question_id}@{x.first_divergence}" for x in om.mismatches[:5])
        detail += f"; first divergences: {firsts}" + (" ..." if len(om.mismatches) > 5 else "")
    qs = [x.question_id for x in om.mismatches]
    if nz is not None and nz.source == "rerun" and nz.noise_rate > 0:
        qs = list(nz.candidate_only)
    return result(g, om.output_match_rate, limit, ok, detail, qs)


def _output_match_classified(g: G.MinOutputMatch, om: OutputMatchRecord, dv: DivergenceReportRecord,
                             ag: AnswerAgreementRecord | None) -> GateResult:
    """``min_output_match`` judged on unexplained divergences: observed = (compared -
    unexplained) / compared >= limit. Explained near-ties (and, for questions the
    reference cannot judge, divergences the baseline's rerun shows too) are reported
    beside it; the failing questions are the unexplained ones, worst first."""
    un, ex, nz = dv.unexplained, dv.explained, dv.noise
    n = om.compared
    rate = (n - len(un)) / n
    ok = rate >= g.limit
    detail = (f"{n - len(un)}/{n} questions without an unexplained divergence ({rate:.4f}); "
              f"{om.matched}/{n} identical (output match {om.output_match_rate:.4f}); "
              f"judged by {dv.reference}'s top-k log-probabilities, near-tie <= {dv.near_tie_nats:g} nats: "
              f"{len(un)} unexplained, {len(ex)} explained")
    if nz:
        detail += f", {len(nz)} explained by the baseline's rerun (no reference distribution there)"
    if un:
        detail += "; unexplained (worst first): " + ", ".join(
            f"{d.question_id}@{d.position} " + ("gap " + (">" if not d.in_top_k else "") + f"{d.gap_nats:.2f}"
                                                  if d.gap_nats is not None else "(" + d.reason.split(';')[0] + ")")
            for d in un[:5]) + (" ..." if len(un) > 5 else "")
    if ex:
        detail += "; explained: " + ", ".join(f"{d.question_id}@{d.position} gap {d.gap_nats:.2f}" for d in ex[:5]) \
            + (" ..." if len(ex) > 5 else "")
    if ag is not None and ag.agreement_rate is not None:
        detail += f"; answer-level agreement ({ag.pipeline}) {ag.agreed}/{ag.compared} ({ag.agreement_rate:.4f})"
    return result(g, rate, g.limit, ok, detail, [d.question_id for d in un])
