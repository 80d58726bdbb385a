"""Gate kind ``min_output_match``: per comparison and gated greedy task, the share of questions without
an unexplained divergence (or with identical token ids, or judged against the noise) at
least its limit."""

from __future__ import annotations

from typing import Literal

from harness.analysis.budget import GateTest
from harness.analysis.divergence import near_tie_bound, noise_bound_of
from harness.analysis.gatekinds._common import Budgeted, budget_fields, budget_verdict, result
from harness.analysis.measurements import Measurements
from harness.analysis.prefix_gap import PREFIX_SOURCE
from harness.config.gates.registry import Place, gate
from harness.records.measures import AnswerAgreementRecord, DivergenceReportRecord, NoiseRecord, OutputMatchRecord
from harness.records.run_record import GateResult


@gate(scope="comparison", order=20, reads_generation=True,
      settings=("min_output_match", "noise_mismatch_rate", "noise_runs", "near_tie_nats"),
      doc="share of questions without an **unexplained** divergence >= the limit, each divergence judged by the "
          "reference's top-k log-probabilities (near ties are explained; \"Near ties\" below); where no reference "
          "distribution exists, output match >= the limit, or with a noise reference whose noise is above 0: the "
          "candidate does not mismatch significantly more often than the noise (see below)")
class MinOutputMatch(Budgeted):
    """Share of questions with identical completion token ids >= ``limit``, or, when a
    noise reference (rerun: ``noise_runs`` 2, or a stored ``noise_mismatch_rate``)
    shows noise above zero, not significantly more mismatches than the noise at ``alpha``.

    With ``near_tie_nats`` set and a reference whose top-k log-probabilities were
    recorded, each divergence is judged by the reference's distribution
    (:mod:`harness.analysis.divergence`): the share of questions WITHOUT an unexplained
    divergence must be >= ``limit``; explained near-ties are reported beside it."""

    kind: Literal["min_output_match"] = "min_output_match"
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
            **budget_fields(at),
            noise_runs=comp.noise_runs,
            noise_mismatch_rate=comp.noise_mismatch_rate, near_tie_nats=comp.near_tie_nats,
            description=("share of questions with identical completion token ids" if comp.near_tie_nats is None
                         else "share of questions without an unexplained divergence (divergences at a "
                              f"near-tie of the reference, gap {near_tie_bound(comp.near_tie_nats).describe()}, "
                              "are explained)")
                        + noise,
        )

    def test(self, m: Measurements) -> GateTest | None:
        """The test against noise where the gate judges by it (no divergence classification,
        a noise reference above zero); None where the gate's rule is deterministic (the limit,
        or unexplained divergences: outside the budget's family, docs/gates.md)."""
        cm = m.comparison(self.baseline, self.variant, self.task)
        nz = cm.noise
        if (self.near_tie_nats is not None and cm.divergences is not None) or nz is None or nz.noise_rate <= 0:
            return None
        n = nz.compared
        min_p = 0.5 ** n if nz.source == "rerun" else nz.noise_rate ** n
        return GateTest(nz.p_value, min_p, f"{nz.test} against noise")

    def planned_test(self) -> bool:
        """As planned, a test only against a noise reference without the near-tie classification."""
        return self.budget is not None and self.near_tie_nats is None and (
            self.noise_runs > 1 or self.noise_mismatch_rate is not None)

    def planned_min_p(self, n: int) -> float:
        """The noise test at its best: every question mismatched by the candidate alone (a
        rerun's exact McNemar, ``0.5 ** n``); a stored rate r0's binomial: ``r0 ** n``."""
        return (self.noise_mismatch_rate or 0.5) ** n if self.noise_runs < 2 else 0.5 ** n

    def judge(self, m: Measurements, adjusted_p: float | None = None) -> GateResult:
        """``min_output_match``. With ``near_tie_nats`` and a :class:`DivergenceReportRecord`: share
        of questions without an unexplained divergence >= limit
        (:func:`_output_match_classified`); the noise test is then not used. Otherwise the
        share of identical completion token ids >= limit; with a noise reference
        (:class:`NoiseRecord`) whose noise is above zero, the limit is replaced by a test:
        fails when the candidate mismatches significantly more often than the noise
        (one-sided p < alpha). Zero observed noise means the engine is deterministic on
        these prompts, so the limit applies unchanged. Nothing comparable: NOT RUN when no
        match was measured, failed when one was but compared no question."""
        cm = m.comparison(self.baseline, self.variant, self.task)
        om = cm.match
        if om is None or om.output_match_rate is None:
            return result(self, None, self.limit, False if om is not None else None, "no question could be compared")
        dv = cm.divergences if self.near_tie_nats is not None else None
        if dv is not None:
            return _output_match_classified(self, om, dv, cm.answers)
        return _output_match_exact(self, om, cm.noise, cm.answers, adjusted_p)


def _output_match_exact(g: MinOutputMatch, om: OutputMatchRecord, nz: NoiseRecord | None,
                        ag: AnswerAgreementRecord | None, adjusted_p: float | None = None) -> GateResult:
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
        ) if g.budget is None else (
            f"; judged against noise ({src}, rate {nz.noise_rate:.4f}) instead of the limit {g.limit}: "
            f"candidate mismatch rate {'-' if nz.candidate_rate is None else f'{nz.candidate_rate:.4f}'}, "
            + budget_verdict(g, GateTest(nz.p_value, 0.0, nz.test), adjusted_p)[1])
        if g.budget is not None:
            ok = budget_verdict(g, GateTest(nz.p_value, 0.0, nz.test), adjusted_p)[0]
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


def _output_match_classified(g: MinOutputMatch, om: OutputMatchRecord, dv: DivergenceReportRecord,
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
              f"judged by {dv.reference}'s top-k log-probabilities, near-tie {noise_bound_of(dv).describe()}: "
              f"{len(un)} unexplained, {len(ex)} explained")
    if nz:
        detail += f", {len(nz)} explained by the baseline's rerun (no reference distribution there)"
    if at_prefix := [d for d in dv.divergences if d.source == PREFIX_SOURCE]:
        detail += (f"; {len(at_prefix)} judged on {dv.reference}'s server at the baseline's prefix "
                   f"({sum(d.verdict == 'explained' for d in at_prefix)} explained)")
    if un:
        detail += "; unexplained (worst first): " + ", ".join(
            f"{d.question_id}@{d.position} " + ("gap " + (">" if not d.in_top_k else "") + f"{d.gap_nats:.2f}"
                                                  if d.gap_nats is not None else "(" + d.reason.split(';')[0] + ")")
            for d in un[:5]) + (" ..." if len(un) > 5 else "")
    if ex:
        detail += "; explained: " + ", ".join(f"{d.question_id}@{d.position} " + (
            f"gap {d.gap_nats:.2f}" if d.gap_nats is not None else "by the reference's paths") for d in ex[:5]) \
            + (" ..." if len(ex) > 5 else "")
    if ag is not None and ag.agreement_rate is not None:
        detail += f"; answer-level agreement ({ag.pipeline}) {ag.agreed}/{ag.compared} ({ag.agreement_rate:.4f})"
    return result(g, rate, g.limit, ok, detail, [d.question_id for d in un])
