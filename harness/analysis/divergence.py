"""Greedy output divergences judged by the reference's own distribution.

Greedy speculative decoding equals greedy decoding only up to numerics: verification
scores several positions in one forward pass (other kernels, other batch shapes), so
where the reference's top two tokens are nearly tied, the choice can flip. That flip is
benign and deterministic: a rerun of the reference does not show it. A broken engine
(stale state, a wrong drafter input accepted by a wrong verifier) diverges where the
reference was confident. So each divergent question is judged at its first divergence
``d`` by the non-speculative reference's top-k log-probabilities there (asked with
``logprobs: k``, :func:`harness.engine.client.parse_top_logprobs`):

* **explained** (a near-tie): the candidate's token is in the reference's top k at ``d``
  and ``lp_ref(reference token) - lp_ref(candidate token) <= near_tie_nats``;
* **unexplained**: the reference ranks the candidate's token more than ``near_tie_nats``
  below its own (or outside its top k: then the gap is at least the top-1 minus the
  k-th log-probability), or the candidate's completion ends at ``d``;
* **explained by the reference's paths** (source ``reference_paths``): the reference's
  prefix differs from the baseline's before ``d``, so its distribution cannot judge ``d``;
  but it can judge where each side left the reference: when the baseline left it at a
  near-tie (or not at all) and so did the candidate (or the candidate follows it), both
  are the reference's numerics and their difference is too (:func:`_by_reference_paths`);
* **noise**: the reference's distribution does not apply (its prefix differs from the
  baseline's before ``d``, it failed, or it carries no log-probabilities there) and the
  baseline's own rerun diverged on that question too (the rerun noise rule, said per
  question); without that evidence such a question is unexplained (fail closed).

For ``reference -> candidate`` the baseline is the reference. For a comparison whose
baseline speculates (``spec_sync -> spec_async``) the reference's distribution is used
where the reference's token ids equal the baseline's up to ``d`` (the same prefix was
scored). The gates count unexplained divergences (:class:`harness.analysis.gatekinds.min_output_match.MinOutputMatch`).

Under the engine's known numerics noise (``EVALRUN_NUMERICS_NOISE``, docs/numerics.md) a
clean build flips at gaps of several times the noise's level, so the threshold a divergence
is judged by is widened by it: :func:`near_tie_bound` is its one home.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Sequence

from harness.analysis.scoring import committed_divergence
from harness.faults.noise import NOISE_ENV, parse_level
from harness.records.measures import EXPLAINED, NOISE, UNEXPLAINED, DivergenceRecord, DivergenceReportRecord
from harness.records.samples import Sample

#: K: the near-tie threshold under numerics noise of level L nats is ``near_tie_nats + K * L``.
#: Derivation (docs/numerics.md, "What it means for the gates"): the reference decodes with
#: its own noise, so the gap it reports at a position is ``g_obs = m + e_r`` (m >= 0 the
#: noiseless margin of its top token, e_r the difference of the two logits' draws, sd
#: sqrt(2) L); the candidate flips there when ``m + e_c < 0`` (its own, independent
#: difference, sd sqrt(2) L). So at a flip ``g_obs < e_r - e_c``, a normal of sd 2 L, and
#: P(g_obs > K L) <= P(Z > K / 2) = Phi(-K / 2). K = 8: Phi(-4) = 3.17e-5 per divergence. The
#: CPU list's main config under ``gpu`` has about 22 divergences per comparison and night
#: (87 in 4 runs of 2 pairs, docs/numerics.md), about 66 over its three comparisons: by the
#: union bound a clean night puts a noise flip beyond the bound with probability <= 66 x
#: 3.17e-5 = 0.0021, inside a 0.01 budget even with ``min_output_match: 1.0`` (one
#: unexplained divergence fails it); K = 7 gives 66 x 2.33e-4 = 0.015, above it.
#: (``scipy.stats.norm.sf(K / 2)``.) The engine test tests/e2e/test_numerics_noise_engine.py
#: asserts the same bound (8 x level + 0.5 nats).
NOISE_TIE_SDS: Final = 8


@dataclass(frozen=True)
class NearTieBound:
    """The near-tie threshold a divergence is judged by (:func:`near_tie_bound`).

    Attributes:
        configured_nats: the config's ``near_tie_nats`` (>= 0).
        noise_level_nats: the numerics noise's level in nats (``EVALRUN_NUMERICS_NOISE``),
            None without it.
    """

    configured_nats: float
    noise_level_nats: float | None = None

    @property
    def widening_nats(self) -> float:
        """``NOISE_TIE_SDS * level`` (0.0 without noise)."""
        return 0.0 if self.noise_level_nats is None else NOISE_TIE_SDS * self.noise_level_nats

    @property
    def nats(self) -> float:
        """The threshold: ``configured_nats + widening_nats``."""
        return self.configured_nats + self.widening_nats

    def describe(self) -> str:
        """``<= 0.5 nats``, or with noise ``<= 12.5 nats (0.5 configured, widened by 12 = 8 x the
        numerics noise's 1.5 nats, EVALRUN_NUMERICS_NOISE)``."""
        if self.noise_level_nats is None:
            return f"<= {self.nats:g} nats"
        return (f"<= {self.nats:g} nats ({self.configured_nats:g} configured, widened by {self.widening_nats:g} = "
                f"{NOISE_TIE_SDS} x the numerics noise's {self.noise_level_nats:g} nats, {NOISE_ENV})")


def near_tie_bound(near_tie_nats: float, environ: Mapping[str, str] | None = None) -> NearTieBound:
    """The threshold divergences are judged by: ``near_tie_nats`` widened by
    :data:`NOISE_TIE_SDS` x the numerics noise's level when ``EVALRUN_NUMERICS_NOISE`` is set in
    ``environ`` (``os.environ`` by default: the run's servers get the same setting). The one
    home of that rule: the analysis, the gate's plan and the dry run call it.

    Raises:
        harness.faults.noise.NoiseSettingError: the variable is invalid (a run refuses it
            before this is reached).
    """
    env = os.environ if environ is None else environ
    return NearTieBound(near_tie_nats, parse_level(env.get(NOISE_ENV)))


def noise_bound_of(report: DivergenceReportRecord) -> NearTieBound:
    """The :class:`NearTieBound` a judged report used (its ``near_tie_nats`` and, under
    noise, ``near_tie_widening_nats``)."""
    w = report.near_tie_widening_nats
    if w is None:
        return NearTieBound(report.near_tie_nats)
    return NearTieBound(report.near_tie_nats - w, w / NOISE_TIE_SDS)



def _tok(ids: Sequence[int], i: int) -> int | None:
    return ids[i] if i < len(ids) else None


def _judge_at(ref: Sample, d: int, cand_tok: int, near_tie_nats: float) -> tuple[int, float, bool, int | None, bool]:
    """(reference token, gap, in top k, rank, explained) at position ``d`` of ``ref``."""
    assert ref.top_logprobs is not None and ref.token_ids is not None
    top = ref.top_logprobs[d]
    dist = dict(top)
    ref_tok = ref.token_ids[d]
    lp_ref = dist.get(ref_tok, top[0][1])
    if cand_tok in dist:
        gap = lp_ref - dist[cand_tok]
        rank = 1 + [t for t, _ in top].index(cand_tok)
        return ref_tok, gap, True, rank, gap <= near_tie_nats + 1e-12
    floor = min(lp for _, lp in top)
    return ref_tok, lp_ref - floor, False, None, False


def _reference_at(ref: Sample | None, base: Sample, d: int) -> tuple[Sample | None, str]:
    """``(ref, "")`` when ``ref``'s distribution applies at ``d`` of ``base``, else ``(None, why)``."""
    if ref is None:
        return None, "the reference has no sample of this question"
    if not ref.ok or ref.token_ids is None:
        return None, "the reference's request failed"
    if ref.top_logprobs is None:
        return None, "the reference's sample carries no log-probabilities"
    if len(ref.top_logprobs) <= d or len(ref.token_ids) <= d:
        return None, f"the reference's completion has no token at position {d} (it ends there)"
    base_ids = base.token_ids or ()
    if tuple(ref.token_ids[:d]) != tuple(base_ids[:d]):
        k = committed_prefix(ref.token_ids, base_ids)
        return None, f"the reference's prefix differs from the baseline's at token {k}, before the divergence at {d}"
    return ref, ""


def _by_reference_paths(ref: Sample | None, base: Sample, cand: Sample, near_tie_nats: float) -> str | None:
    """Why a divergence the reference cannot judge at the baseline's prefix is explained by
    what it can judge: the baseline and the candidate each equal the reference's ids or
    leave them at a near-tie of the reference's own distribution (both judged at the
    reference's own prefix); None when either side is not so explained or the reference has
    no usable sample."""
    if ref is None or not ref.ok or ref.token_ids is None or ref.top_logprobs is None:
        return None
    why = []
    for name, side in (("baseline", base), ("candidate", cand)):
        k = committed_divergence(ref, side)
        if k is None:
            why.append(f"the {name} equals the reference")
            continue
        tok = _tok(side.token_ids or (), k)
        if tok is None or len(ref.top_logprobs) <= k or len(ref.token_ids) <= k:
            return None
        _, gap, _, _, ok = _judge_at(ref, k, tok, near_tie_nats)
        if not ok:
            return None
        why.append(f"the {name} leaves the reference at token {k}, a near-tie ({gap:.3f} nats)")
    return "; ".join(why)


def committed_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two id sequences."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def classify_divergences(
    baseline: Sequence[Sample],
    candidate: Sequence[Sample],
    reference: Sequence[Sample] | None,
    reference_name: str | None,
    near_tie_nats: float,
    baseline_is_reference: bool,
    noise_ids: set[str] | None = None,
    widening_nats: float | None = None,
) -> DivergenceReportRecord:
    """Judge every divergent question of ``baseline -> candidate`` (one task).

    Args:
        baseline, candidate: the two variants' samples of one task.
        reference: the non-speculative reference's samples of the same task, carrying
            ``top_logprobs`` (None: no reference; every divergence falls back).
        reference_name: its variant name, for the record.
        near_tie_nats: largest gap (nats, >= 0) still called a near-tie.
        baseline_is_reference: the baseline variant is the reference (its distribution
            applies at every divergence it has log-probabilities for).
        noise_ids: question ids whose baseline rerun diverged from the first pass (the
            fallback rule); None when the baseline was not rerun.
        widening_nats: how much of ``near_tie_nats`` is the numerics noise's widening
            (:attr:`NearTieBound.widening_nats`), recorded; None without noise.

    Returns:
        :class:`DivergenceReportRecord`. Questions compared are those that succeeded with
        token ids on both sides; a divergence is :func:`committed_divergence` (ids past
        a stop are not one).

    Raises:
        ValueError: ``near_tie_nats`` negative or not finite.
    """
    # long: one pass over the divergent questions, each case of the classification beside the others
    if not (near_tie_nats >= 0 and math.isfinite(near_tie_nats)):
        raise ValueError(f"near_tie_nats must be a finite number >= 0, got {near_tie_nats!r}")
    ref_by = {s.question_id: s for s in (reference or ())}
    cand = {s.question_id: s for s in candidate}
    compared = 0
    out: list[DivergenceRecord] = []
    for a in baseline:
        b = cand.get(a.question_id)
        if b is None or not (a.ok and b.ok) or a.token_ids is None or b.token_ids is None:
            continue
        compared += 1
        d = committed_divergence(a, b)
        if d is None:
            continue
        bt, ct = _tok(a.token_ids, d), _tok(b.token_ids, d)
        src = "reference" if baseline_is_reference else "reference_prefix"
        ref, why = (_reference_at(a if baseline_is_reference else ref_by.get(a.question_id), a, d)
                    if reference is not None or baseline_is_reference
                    else (None, "no variant carries log-probabilities"))
        if ref is not None and ct is None:
            out.append(DivergenceRecord(question_id=a.question_id, position=d, baseline_token=bt,
                                        reference_token=(ref.token_ids or ())[d],  # _reference_at: ids present
                                        verdict=UNEXPLAINED, source=src,
                                        reason=f"the candidate's completion ends at token {d} where the baseline "
                                        "continues"))
            continue
        if ref is not None and ct is not None:  # (ct is None was handled above)
            rt, gap, in_top, rank, ok = _judge_at(ref, d, ct, near_tie_nats)
            k = len((ref.top_logprobs or ())[d])
            if ok:
                reason = (f"near-tie: {reference_name} ranks the candidate's token {ct} #{rank} of its top {k}, "
                          f"{gap:.3f} nats below its own token {rt} (<= {near_tie_nats:g})")
            elif in_top:
                reason = (f"confident: {reference_name} ranks the candidate's token {ct} #{rank}, {gap:.3f} nats "
                          f"below its own token {rt} (> {near_tie_nats:g})")
            else:
                reason = (f"confident: the candidate's token {ct} is outside {reference_name}'s top {k}, more than "
                          f"{gap:.3f} nats below its own token {rt}")
            out.append(DivergenceRecord(question_id=a.question_id, position=d, baseline_token=bt, candidate_token=ct,
                                        reference_token=rt, gap_nats=round(gap, 6), in_top_k=in_top,
                                        candidate_rank=rank,
                                        verdict=EXPLAINED if ok else UNEXPLAINED, source=src,
                                        reason=reason))
            continue
        paths = (_by_reference_paths(ref_by.get(a.question_id), a, b, near_tie_nats)
                 if not baseline_is_reference and reference is not None else None)
        if paths is not None:
            out.append(DivergenceRecord(question_id=a.question_id, position=d, baseline_token=bt, candidate_token=ct,
                                        verdict=EXPLAINED, source="reference_paths",
                                        reason=f"{why}; explained by the reference's paths: {paths}"))
            continue
        if noise_ids is not None and a.question_id in noise_ids:
            out.append(DivergenceRecord(question_id=a.question_id, position=d, baseline_token=bt, candidate_token=ct,
                                        verdict=NOISE, source="rerun",
                                        reason=f"{why}; the baseline's rerun diverged on this question too "
                                               "(rerun noise rule)"))
        else:
            tail = ("the baseline's rerun did not diverge here" if noise_ids is not None
                    else "no rerun of the baseline to fall back on")
            out.append(DivergenceRecord(question_id=a.question_id, position=d, baseline_token=bt, candidate_token=ct,
                                        verdict=UNEXPLAINED, source="rerun" if noise_ids is not None else "none",
                                        reason=f"{why}; {tail}"))
    order = {UNEXPLAINED: 0, NOISE: 1, EXPLAINED: 2}

    def worst_first(x: DivergenceRecord) -> tuple:
        gap = x.gap_nats if x.gap_nats is not None else math.inf
        return (order[x.verdict], -gap, x.question_id)

    out.sort(key=worst_first)
    return DivergenceReportRecord(reference=reference_name, near_tie_nats=near_tie_nats, compared=compared,
                                  divergences=tuple(out), rerun_available=noise_ids is not None,
                                  near_tie_widening_nats=widening_nats)


def carries_logprobs(samples: Sequence[Sample] | None) -> bool:
    """True when some successful sample has ``top_logprobs`` (the variant asked for them)."""
    return any(s.ok and s.top_logprobs is not None for s in samples or ())
