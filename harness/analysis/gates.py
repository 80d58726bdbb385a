"""Gate verdicts: each planned :class:`~harness.config.plan.GateDef` judged against what was measured.

Every gate result carries its name, the observed value, the limit and a verdict
(``passed``: True, False, or None when it could not be judged because its task or
variant did not run). A gate that cannot be judged is never reported as passed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from harness.engine.info import Effectiveness
from harness.engine.metrics import SpecDecodeMetrics
from harness.config.plan import GateDef
from harness.records.samples import Sample
from harness.analysis.scoring import AnswerAgreement, OutputMatch, TaskScore, first_divergence
from harness.analysis.stats import PairedComparison, floor_margin, mcnemar_exact


@dataclass(frozen=True)
class GateResult:
    """The verdict of one gate.

    Attributes:
        id, kind, config, variant, task, baseline, op: as in the :class:`GateDef`.
        observed: the measured value (fraction, tokens, count), or None.
        limit: the limit applied (after any sample-size margin), or None.
        passed: True / False, or None when it could not be judged (``not run``).
        detail: one sentence with the numbers, for the report.
        questions: question ids that explain a failure (flipped or diverged).
    """

    id: str
    kind: str
    config: str
    variant: str
    task: str | None
    baseline: str | None
    op: str
    observed: float | None
    limit: float | None
    passed: bool | None
    detail: str
    questions: tuple[str, ...] = field(default_factory=tuple)

    @property
    def verdict(self) -> str:
        """``PASS``, ``FAIL`` or ``NOT RUN``."""
        return {True: "PASS", False: "FAIL", None: "NOT RUN"}[self.passed]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["verdict"] = self.verdict
        return d


@dataclass(frozen=True)
class OutputNoise:
    """A candidate's greedy-output mismatches judged against baseline-vs-baseline noise.

    Attributes:
        source: ``"rerun"`` (the baseline ran twice in this run, ``noise_runs: 2``) or
            ``"stored"`` (the comparison's ``noise_mismatch_rate``).
        noise_compared: questions compared baseline pass 1 vs pass 2 (rerun), else None.
        noise_mismatched: of those, questions whose token ids differ (rerun), else None.
        noise_rate: baseline-vs-baseline mismatch rate (fraction of questions).
        noise_first_divergences: ``(question id, first differing token index)`` per
            noise mismatch (rerun), else empty.
        compared: questions compared for the test (for a rerun: compared in both the
            candidate comparison and the noise comparison).
        candidate_mismatched: candidate-vs-baseline mismatches among ``compared``.
        candidate_rate: ``candidate_mismatched / compared``.
        candidate_only: ids mismatched by the candidate but not by the noise (rerun).
        noise_only: ids mismatched by the noise but not by the candidate (rerun).
        test: ``"mcnemar_exact_one_sided"`` (rerun: paired over the same questions,
            H1 "the candidate mismatches more often than the noise"; b =
            |candidate_only|, c = |noise_only|, p = P(Binomial(b + c, 1/2) >= b),
            McNemar 1947 exact form) or ``"binomial_one_sided"`` (stored rate r0:
            p = P(Binomial(compared, r0) >= candidate_mismatched), the exact binomial
            test, ``scipy.stats.binomtest``; r0 is treated as known).
        p_value: the one-sided p-value of ``test``.
    """

    source: str
    noise_compared: int | None
    noise_mismatched: int | None
    noise_rate: float
    noise_first_divergences: tuple[tuple[str, int], ...]
    compared: int
    candidate_mismatched: int
    candidate_rate: float | None
    candidate_only: tuple[str, ...]
    noise_only: tuple[str, ...]
    test: str
    p_value: float

    def to_json(self) -> dict[str, Any]:
        """JSON dict of every field (tuples as lists)."""
        d = asdict(self)
        d["noise_first_divergences"] = [list(x) for x in self.noise_first_divergences]
        return d


def output_noise_rerun(
    baseline: Sequence[Sample], rerun: Sequence[Sample], candidate: Sequence[Sample]
) -> OutputNoise:
    """Judge the candidate's output mismatches against a rerun of the baseline.

    Args:
        baseline: the baseline variant's samples (pass 1), one task.
        rerun: the same variant's samples of the same task from pass 2.
        candidate: the candidate variant's samples of the same task.

    Returns:
        :class:`OutputNoise`. Only questions that succeeded with token ids in all
        three are compared; per question, "candidate mismatch" = candidate token ids
        differ from pass 1, "noise mismatch" = pass 2 differs from pass 1; the paired
        exact one-sided McNemar test is then taken over those questions (see
        :class:`OutputNoise` ``test``). ``noise_*`` counts are over the questions
        compared between pass 1 and pass 2.
    """
    def usable(x: Sample | None) -> bool:
        return x is not None and x.ok and x.token_ids is not None

    r2 = {x.question_id: x for x in rerun}
    cd = {x.question_id: x for x in candidate}
    noise_cmp, noise_div = 0, []
    both, cand_only, noise_only, cand_mm = 0, [], [], 0
    for a in baseline:
        b2, c = r2.get(a.question_id), cd.get(a.question_id)
        if not (usable(a) and usable(b2)):
            continue
        noise_cmp += 1
        dn = first_divergence(a.token_ids, b2.token_ids)
        if dn is not None:
            noise_div.append((a.question_id, dn))
        if not usable(c):
            continue
        both += 1
        dc = first_divergence(a.token_ids, c.token_ids)
        cand_mm += dc is not None
        if dc is not None and dn is None:
            cand_only.append(a.question_id)
        elif dc is None and dn is not None:
            noise_only.append(a.question_id)
    return OutputNoise(
        source="rerun",
        noise_compared=noise_cmp,
        noise_mismatched=len(noise_div),
        noise_rate=len(noise_div) / noise_cmp if noise_cmp else 0.0,
        noise_first_divergences=tuple(noise_div),
        compared=both,
        candidate_mismatched=cand_mm,
        candidate_rate=cand_mm / both if both else None,
        candidate_only=tuple(cand_only),
        noise_only=tuple(noise_only),
        test="mcnemar_exact_one_sided",
        p_value=mcnemar_exact(len(cand_only), len(noise_only), alternative="greater"),
    )


def output_noise_stored(candidate: OutputMatch, rate: float) -> OutputNoise:
    """Judge the candidate's output mismatches against a stored noise rate ``rate``
    (fraction in [0, 1]): exact one-sided binomial test, ``P(Binomial(compared, rate)
    >= mismatched)`` by ``scipy.stats.binomtest(..., alternative="greater")``.

    Raises:
        ValueError: ``rate`` outside [0, 1].
    """
    from scipy import stats as _st

    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"noise rate must be in [0, 1], got {rate!r}")
    k, n = len(candidate.mismatches), candidate.compared
    p = float(_st.binomtest(k, n, rate, alternative="greater").pvalue) if n else 1.0
    return OutputNoise(
        source="stored", noise_compared=None, noise_mismatched=None, noise_rate=rate,
        noise_first_divergences=(), compared=n, candidate_mismatched=k,
        candidate_rate=k / n if n else None, candidate_only=(), noise_only=(),
        test="binomial_one_sided", p_value=p,
    )


@dataclass
class Measurements:
    """What a run measured for one config, keyed for the gates.

    Attributes:
        scores: ``(variant, task)`` -> :class:`TaskScore`.
        spec: ``(variant, task)`` -> :class:`SpecDecodeMetrics` (speculative variants).
        spec_errors: ``(variant, task)`` -> why speculative metrics are missing.
        effectiveness: variant -> :class:`Effectiveness`.
        paired: ``(baseline, candidate, task)`` -> :class:`PairedComparison`.
        matches: ``(baseline, candidate, task)`` -> :class:`OutputMatch`.
        not_run: ``(variant, task)`` or ``(variant, None)`` -> reason it did not run.
        noise: ``(baseline, candidate, task)`` -> :class:`OutputNoise` when the
            comparison has a noise reference (rerun or stored rate).
        answers: ``(baseline, candidate, task)`` -> :class:`AnswerAgreement` (same
            extracted answer), reported beside output match.
    """

    scores: dict[tuple[str, str], TaskScore] = field(default_factory=dict)
    spec: dict[tuple[str, str], SpecDecodeMetrics] = field(default_factory=dict)
    spec_errors: dict[tuple[str, str], str] = field(default_factory=dict)
    effectiveness: dict[str, Effectiveness] = field(default_factory=dict)
    paired: dict[tuple[str, str, str], PairedComparison] = field(default_factory=dict)
    matches: dict[tuple[str, str, str], OutputMatch] = field(default_factory=dict)
    not_run: dict[tuple[str, str | None], str] = field(default_factory=dict)
    noise: dict[tuple[str, str, str], OutputNoise] = field(default_factory=dict)
    answers: dict[tuple[str, str, str], AnswerAgreement] = field(default_factory=dict)


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979, "A simple sequentially
    rejective multiple test procedure", Scand. J. Statist. 6:65-70).

    With p-values sorted ascending p_(1) <= ... <= p_(m), the adjusted value of the
    i-th is ``max_{j <= i} min(1, (m - j + 1) p_(j))``; rejecting where it is below
    alpha keeps the family-wise error at most alpha under any dependence.

    Args:
        p_values: m p-values in [0, 1], any order.

    Returns:
        The adjusted p-values, in the input order.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out


def holm_p_values(gates: Sequence[GateDef], m: Measurements) -> dict[str, float]:
    """Holm-adjusted one-sided McNemar p-values of the ``max_accuracy_drop`` gates that
    ask for it (``params["multiple_testing"] == "holm"``) and have paired data.

    The family is those gates of one config (one call per config). Returns gate id ->
    adjusted p-value; gates outside the family are absent.
    """
    fam = [g for g in gates if g.kind == "max_accuracy_drop" and g.params.get("multiple_testing") == "holm"
           and (g.baseline, g.variant, g.task) in m.paired]
    raw = [m.paired[(g.baseline, g.variant, g.task)].one_sided_p_value for g in fam]
    return {g.id: p for g, p in zip(fam, holm_adjust(raw))}


def _result(g: GateDef, observed, limit, passed, detail, questions=()) -> GateResult:
    return GateResult(
        id=g.id, kind=g.kind, config=g.config, variant=g.variant, task=g.task,
        baseline=g.baseline, op=g.op, observed=observed, limit=limit, passed=passed,
        detail=detail, questions=tuple(questions),
    )


def _not_run(g: GateDef, m: Measurements) -> str | None:
    for key in ((g.variant, None), (g.variant, g.task), (g.baseline, None), (g.baseline, g.task)):
        if key[0] is not None and key in m.not_run:
            return m.not_run[key]
    return None


def evaluate_gate(g: GateDef, m: Measurements, adjusted_p: float | None = None) -> GateResult:
    """Judge one gate.

    Semantics (README "Gates"):

    * ``accuracy_floor``: accuracy >= threshold - tolerance - margin, where margin is
      :func:`harness.analysis.stats.floor_margin` when the config gives
      ``calibration_questions`` larger than the run, else 0.
    * ``min_acceptance_length``: mean acceptance length >= limit; no drafts fails.
    * ``drafts_observed``: a speculative variant reported at least one draft.
    * ``max_error_rate``: failed requests / requests <= limit.
    * ``variant_effective``: every requested setting took effect, or every mismatch is
      declared expected on this platform (``expected_effective``).
    * ``max_accuracy_drop``: one-sided: fails when baseline - candidate accuracy on the
      paired questions exceeds the limit, or when the candidate is significantly worse
      (exact one-sided McNemar p < alpha; with ``adjusted_p`` given, the Holm-adjusted
      p-value of :func:`holm_p_values` is compared instead). An improvement never fails.
    * ``min_output_match``: share of identical completion token ids >= limit. With a
      noise reference (:class:`OutputNoise`: the baseline rerun, ``noise_runs: 2``, or
      a stored ``noise_mismatch_rate``) whose noise is above zero, the limit is
      replaced by a test: fails when the candidate mismatches significantly more
      often than the noise (one-sided p < alpha). Zero observed noise means the
      engine is deterministic on these prompts, so the limit applies unchanged
      (with the default 1.0: exact equality required).
    * ``max_acceptance_length_drop``: baseline - candidate mean acceptance length <= limit.

    Returns:
        :class:`GateResult`; ``passed`` None when its variant or task did not run.
    """
    reason = _not_run(g, m)
    if reason is not None:
        return _result(g, None, g.limit, None, f"not run: {reason}")
    key = (g.variant, g.task)
    if g.kind == "variant_effective":
        eff = m.effectiveness.get(g.variant)
        if eff is None:
            return _result(g, None, None, None, "not run: effective configuration was not read")
        if eff.effective:
            return _result(g, 1.0, None, True, "every requested setting is effective")
        mism = ", ".join(
            f"{k}: requested {v['requested']}, effective {v['effective']}" for k, v in eff.mismatches.items()
        )
        if eff.expected_on_platform:
            return _result(g, 0.0, None, True, f"not effective, declared expected on this platform ({mism})")
        return _result(g, 0.0, None, False, f"variant did not run as asked: {mism}")
    if g.kind in ("accuracy_floor", "max_error_rate"):
        sc = m.scores.get(key)
        if sc is None:
            return _result(g, None, g.limit, None, "not run: no score")
        if g.kind == "max_error_rate":
            ok = sc.error_rate <= g.limit
            return _result(
                g, sc.error_rate, g.limit, ok,
                f"{sc.error_count} of {sc.num_requests} requests failed (error rate {sc.error_rate:.3f}, limit {g.limit})",
            )
        ps = sc.accuracy[g.params["pipeline"]]
        if ps.accuracy is None:
            return _result(g, None, g.limit, False, "no request succeeded: accuracy cannot be computed")
        margin = 0.0
        cal = g.params.get("calibration_questions")
        if cal is not None and ps.scored < cal:
            margin = floor_margin(ps.scored, cal, g.params["accuracy_threshold"])
        limit = round(g.limit - margin, 6)
        ok = ps.accuracy >= limit
        extra = f" (floor {g.limit} widened by {margin:.4f} for {ps.scored} of {cal} calibration questions)" if margin else ""
        return _result(
            g, ps.accuracy, limit, ok,
            f"{g.params['pipeline']} accuracy {ps.accuracy:.4f} ({ps.correct}/{ps.scored}) vs floor {limit:.4f}{extra}",
        )
    if g.kind in ("drafts_observed", "min_acceptance_length"):
        sm = m.spec.get(key)
        if sm is None:
            err = m.spec_errors.get(key, "no speculative-decoding metrics")
            return _result(g, None, g.limit, False, f"speculative metrics missing: {err}")
        if sm.drafts <= 0:
            return _result(g, 0.0, g.limit, False, "no drafts observed: speculative decoding did not run")
        if g.kind == "drafts_observed":
            return _result(g, sm.drafts, g.limit, True, f"{sm.drafts:.0f} drafts, {sm.draft_tokens:.0f} draft tokens")
        mal = sm.mean_acceptance_length
        ok = mal >= g.limit
        return _result(
            g, mal, g.limit, ok,
            f"mean acceptance length {mal:.3f} (1 + {sm.accepted_tokens:.0f}/{sm.drafts:.0f}) vs minimum {g.limit}",
        )
    pkey = (g.baseline, g.variant, g.task)
    if g.kind == "max_accuracy_drop":
        pc = m.paired.get(pkey)
        if pc is None:
            return _result(g, None, g.limit, None, "not run: no paired questions")
        drop = pc.accuracy_a - pc.accuracy_b
        alpha = g.params.get("alpha", 0.05)
        p_used = pc.one_sided_p_value if adjusted_p is None else adjusted_p
        signif = p_used < alpha
        ok = drop <= g.limit and not signif
        why = []
        if drop > g.limit:
            why.append(f"drop {drop:.4f} > {g.limit}")
        if signif:
            why.append(f"significantly worse (one-sided McNemar {'Holm-adjusted ' if adjusted_p is not None else ''}"
                       f"p={p_used:.4g} < {alpha})")
        detail = (
            f"{g.baseline} {pc.accuracy_a:.4f} -> {g.variant} {pc.accuracy_b:.4f} on {pc.n} paired questions; "
            f"{len(pc.a_only)} right only in {g.baseline}, {len(pc.b_only)} right only in {g.variant}; "
            f"one-sided p={pc.one_sided_p_value:.4g}"
            + (f" (Holm-adjusted {adjusted_p:.4g})" if adjusted_p is not None else "")
        )
        if why:
            detail += "; FAILED: " + "; ".join(why)
        return _result(g, drop, g.limit, ok, detail, pc.a_only if not ok else ())
    if g.kind == "min_output_match":
        om = m.matches.get(pkey)
        if om is None or om.output_match_rate is None:
            return _result(g, None, g.limit, False if om is not None else None, "no question could be compared")
        ok = om.output_match_rate >= g.limit
        detail = f"{om.matched}/{om.compared} completions identical (output match {om.output_match_rate:.4f})"
        nz = m.noise.get(pkey)
        limit = g.limit
        if nz is not None and nz.noise_rate > 0:
            alpha = g.params.get("alpha", 0.05)
            ok = nz.p_value >= alpha
            limit = None
            src = (f"{g.baseline} rerun: {nz.noise_mismatched}/{nz.noise_compared} differ"
                   if nz.source == "rerun" else f"stored noise_mismatch_rate {nz.noise_rate:.4f}")
            detail += (
                f"; judged against noise ({src}, rate {nz.noise_rate:.4f}) instead of the limit {g.limit}: "
                f"candidate mismatch rate {'-' if nz.candidate_rate is None else f'{nz.candidate_rate:.4f}'}, one-sided p={nz.p_value:.4g} "
                f"({nz.test}) {'>=' if ok else '<'} alpha {alpha}"
            )
        elif nz is not None:
            detail += f"; noise reference shows no mismatch ({nz.source}), so exact limit {g.limit} applies"
        ag = m.answers.get(pkey)
        if ag is not None and ag.agreement_rate is not None:
            detail += (f"; answer-level agreement ({ag.pipeline}) {ag.agreed}/{ag.compared} "
                       f"({ag.agreement_rate:.4f})")
        if om.mismatches:
            firsts = ", ".join(f"{x.question_id}@{x.first_divergence}" for x in om.mismatches[:5])
            detail += f"; first divergences: {firsts}" + (" ..." if len(om.mismatches) > 5 else "")
        qs = [x.question_id for x in om.mismatches]
        if nz is not None and nz.source == "rerun" and nz.noise_rate > 0:
            qs = list(nz.candidate_only)
        return _result(g, om.output_match_rate, limit, ok, detail, qs)
    if g.kind == "max_acceptance_length_drop":
        a = m.spec.get((g.baseline, g.task))
        b = m.spec.get((g.variant, g.task))
        if a is None or b is None or a.mean_acceptance_length is None or b.mean_acceptance_length is None:
            return _result(g, None, g.limit, False, "mean acceptance length missing on one side (no drafts?)")
        drop = a.mean_acceptance_length - b.mean_acceptance_length
        ok = drop <= g.limit
        return _result(
            g, drop, g.limit, ok,
            f"mean acceptance length {g.baseline} {a.mean_acceptance_length:.3f} -> {g.variant} {b.mean_acceptance_length:.3f}",
        )
    raise ValueError(f"unknown gate kind {g.kind!r} in gate {g.id}")


def evaluate_gates(gates: list[GateDef] | tuple[GateDef, ...], m: Measurements) -> list[GateResult]:
    """Judge every gate of one config, in plan order (the ``max_accuracy_drop`` gates
    that ask for it with Holm-adjusted p-values, :func:`holm_p_values`)."""
    adj = holm_p_values(gates, m)
    return [evaluate_gate(g, m, adj.get(g.id)) for g in gates]
