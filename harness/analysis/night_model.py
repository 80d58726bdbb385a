"""The per-question behaviour of a clean build, measured from repeated runs: what
:mod:`harness.analysis.night_simulation` draws simulated nights from.

Measured from the samples of ``evalrun calibrate``'s repeats (every config, task and variant
that produced token ids, pooled), the behaviour of a clean but noisy build:

* **per question, a divergence rate** ``p_q``: the share of its completions (over runs and
  variants) that differ from its most common completion (the *modal* path). Numerics noise
  flips a near tie; from there the completion follows another path. The model has two paths
  per question (modal and alternative, the alternative fixed per question);
* **per question, whether the modal path is right** and, pooled, the **answer change**: the
  share of off-modal completions whose correctness differs from the modal path's (accuracy
  flips in both directions);
* **the gaps**: the reference's log-probability gap (nats) at each divergence it judged
  (``top_logprobs`` at the first divergent token), pooled; a simulated divergence draws one;
* **acceptance per request**, for speculative variants with per-request counters
  (``per_request_metrics: true``): each request's conditional per-position acceptance
  probability ``p_r`` (every draft position accepted with ``p_r`` given the ones before it,
  capped at k; the maximum-likelihood ``p = A / (A + D - a_k)`` with A accepted tokens, D
  drafts and a_k drafts accepted in full, with 1/2 added to each count) on the logit scale,
  split as a random-effects model ``logit p_r = mu + u_q + v_run + e_r`` by the method of
  moments: ``sd_run`` from the spread of the per-run means, ``sd_question`` from the spread
  of the per-question means less the residual's share, ``sd_request`` from the residuals
  (Searle, Casella and McCulloch, Variance Components, 1992, ch. 3: ANOVA estimators).
  Without per-request counters only ``mu`` and ``sd_run`` come from the per-task counters
  (the question and request spreads are then 0, which understates the spread).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.analysis.divergence import carries_logprobs
from harness.analysis.scoring import first_divergence
from harness.records.run_folder import RunFolder
from harness.records.run_record import RunRecord
from harness.records.samples import Sample

__all__ = ["AcceptanceModel", "NightModel", "QuestionBehaviour", "fit_night_model", "logit"]

#: the gap (nats) a simulated divergence gets when the repeats judged none
DEFAULT_GAP = 0.05


def logit(p: float) -> float:
    """``log(p / (1 - p))`` of ``p`` in (0, 1)."""
    return math.log(p / (1.0 - p))


@dataclass(frozen=True)
class QuestionBehaviour:
    """One question of the repeats: ``divergence`` the share of its completions off the modal
    path, ``right`` whether the modal path's answer is right, ``completions`` how many were
    seen."""

    divergence: float
    right: bool
    completions: int


@dataclass(frozen=True)
class AcceptanceModel:
    """Acceptance per request on the logit scale (module docstring): ``mu``, the standard
    deviations of the question, run and request effects, drafts per request (mean), and
    where the figures came from (``per-request counters`` or ``per-task counters``)."""

    mu: float
    sd_question: float
    sd_run: float
    sd_request: float
    drafts_per_request: float
    source: str


@dataclass(frozen=True)
class NightModel:
    """The behaviour measured from the repeats (:func:`fit_night_model`).

    Attributes:
        questions: one :class:`QuestionBehaviour` per question seen (every config and task).
        answer_change: share of off-modal completions whose correctness differs from the
            modal path's (0.0 when none was off the modal path).
        gaps: the reference's gaps (nats) at the divergences it judged, sorted.
        acceptance: the acceptance model, or None when no speculative variant reported drafts.
        runs: how many repeats it was measured on.
    """

    questions: tuple[QuestionBehaviour, ...]
    answer_change: float
    gaps: tuple[float, ...]
    acceptance: AcceptanceModel | None
    runs: int
    notes: tuple[str, ...] = field(default=())

    def summary(self) -> dict[str, object]:
        """JSON-ready figures: questions, mean and share of divergent questions, answer
        change, gaps (count, median), the acceptance model, runs and notes."""
        divs = [q.divergence for q in self.questions]
        return {
            "runs": self.runs, "questions": len(self.questions),
            "mean_divergence": statistics.fmean(divs) if divs else None,
            "share_questions_ever_divergent": sum(d > 0 for d in divs) / len(divs) if divs else None,
            "modal_right_share": sum(q.right for q in self.questions) / len(divs) if divs else None,
            "answer_change": self.answer_change, "gaps": len(self.gaps),
            "median_gap_nats": statistics.median(self.gaps) if self.gaps else None,
            "acceptance": asdict(self.acceptance) if self.acceptance else None, "notes": list(self.notes),
        }


def _samples(runs: Sequence[tuple[RunRecord, Path]]) -> dict[tuple[str, str, str], list[dict[str, Sample]]]:
    """``(config, task, variant)`` -> one ``{question id: sample}`` per run that has it."""
    out: dict[tuple[str, str, str], list[dict[str, Sample]]] = {}
    for rec, run_dir in runs:
        for c in rec.configs:
            for ts in RunFolder(Path(run_dir)).tasks(rec, c.name):
                try:
                    out.setdefault((c.name, ts.task, ts.variant), []).append(ts.by_question())
                except (OSError, ValueError):
                    continue
    return out


def _questions(by: Mapping[tuple[str, str, str], list[dict[str, Sample]]]
               ) -> tuple[list[QuestionBehaviour], int, int, list[float]]:
    """Per question (config, task, question id): the behaviour, pooled over variants and
    runs; the off-modal completions and how many changed correctness; the reference's gaps."""
    groups: dict[tuple[str, str, str], list[Sample]] = {}
    for (cname, tname, _v), per_run in by.items():
        for qs in per_run:
            for qid, s in qs.items():
                if s.ok and s.token_ids is not None:
                    groups.setdefault((cname, tname, qid), []).append(s)
    out, off, changed, gaps = [], 0, 0, []
    for xs in groups.values():
        if len(xs) < 2:
            continue
        counts = Counter(x.token_ids or () for x in xs)
        modal_ids = counts.most_common(1)[0][0]
        modal = next(x for x in xs if x.token_ids == modal_ids)
        right = any(modal.correct.values())
        others = [x for x in xs if (x.token_ids or ()) != modal_ids]
        off += len(others)
        changed += sum(any(x.correct.values()) != right for x in others)
        out.append(QuestionBehaviour(len(others) / len(xs), right, len(xs)))
        gaps += _gaps(xs, modal_ids)
    return out, off, changed, gaps


def _gaps(xs: Sequence[Sample], modal_ids: tuple[int, ...]) -> list[float]:
    """The gap (nats) of a reference's top two at the first divergence between its own
    completion and the modal path, for each completion that carries ``top_logprobs``."""
    out = []
    for x in xs:
        if not carries_logprobs([x]) or x.token_ids == modal_ids or x.top_logprobs is None:
            continue
        at = first_divergence(x.token_ids or (), modal_ids)
        if at is not None and at < len(x.top_logprobs) and len(x.top_logprobs[at]) >= 2:
            (_, a), (_, b) = x.top_logprobs[at][:2]
            out.append(abs(a - b))
    return out


def _request_logit(s: Sample) -> tuple[float, float] | None:
    """``logit p_r`` of one request's per-request counters (module docstring) and its
    sampling variance ``1 / (t p (1 - p))`` over its ``t = A + D - a_k`` trials (the delta
    method for the logit of a binomial share: Agresti, Categorical Data Analysis, 2nd ed.,
    sec. 3.1.6), or None."""
    if not s.spec_drafts or s.spec_accepted_tokens is None or not s.spec_accepted_per_pos:
        return None
    full = s.spec_accepted_per_pos[-1]
    a, d = s.spec_accepted_tokens, s.spec_drafts
    p = (a + 0.5) / (a + d - full + 1.0)
    return logit(p), 1.0 / ((a + d - full + 1.0) * p * (1.0 - p))


def _acceptance(runs: Sequence[tuple[RunRecord, Path]],
                by: Mapping[tuple[str, str, str], list[dict[str, Sample]]]) -> AcceptanceModel | None:
    """The acceptance model of the speculative variants (module docstring)."""
    rows: list[tuple[int, tuple[str, str, str], float, float, float]] = []  # run, question, logit, var, drafts
    for (cname, tname, _v), per_run in by.items():
        for i, qs in enumerate(per_run):
            for qid, s in qs.items():
                lg = _request_logit(s)
                if lg is not None:
                    rows.append((i, (cname, tname, qid), lg[0], lg[1], float(s.spec_drafts or 0)))
    if rows:
        return _variance_components(rows)
    task_logits: list[float] = []
    drafts: list[float] = []
    for rec, _ in runs:
        for c in rec.configs:
            for v in c.variants.values():
                for t in v.tasks.values():
                    sd = t.spec_decode
                    if sd is None or not sd.drafts or not sd.per_position_acceptance:
                        continue
                    full = (sd.per_position_acceptance[-1] or 0.0) * sd.drafts
                    task_logits.append(logit((sd.accepted_tokens + 0.5) / (sd.accepted_tokens + sd.drafts - full + 1)))
                    drafts.append(sd.drafts / max(t.num_requests, 1))
    if not task_logits:
        return None
    return AcceptanceModel(statistics.fmean(task_logits), 0.0,
                           statistics.stdev(task_logits) if len(task_logits) > 1 else 0.0, 0.0,
                           statistics.fmean(drafts), "per-task counters")


def _variance_components(rows: Sequence[tuple[int, tuple[str, str, str], float, float, float]]
                         ) -> AcceptanceModel:
    """Method-of-moments variance components of ``logit p_r = mu + u_q + v_run + e_r``; the
    request effect's variance is the residual variance less the mean sampling variance of
    the requests' logits (the simulation draws the drafts' outcomes again)."""
    mu = statistics.fmean(r[2] for r in rows)
    by_run: dict[int, list[float]] = {}
    by_q: dict[tuple[str, str, str], list[float]] = {}
    for run, q, lg, _, _ in rows:
        by_run.setdefault(run, []).append(lg)
        by_q.setdefault(q, []).append(lg)
    run_mean = {k: statistics.fmean(v) for k, v in by_run.items()}
    q_mean = {k: statistics.fmean(v) for k, v in by_q.items()}
    resid = [lg - q_mean[q] - run_mean[run] + mu for run, q, lg, _, _ in rows]
    per_q = statistics.fmean(len(v) for v in by_q.values())
    dof = max(len(rows) - len(by_q) - len(by_run) + 1, 1)
    var_e = sum(e * e for e in resid) / dof
    var_run = statistics.variance(run_mean.values()) if len(run_mean) > 1 else 0.0
    var_q = (statistics.variance(q_mean.values()) if len(q_mean) > 1 else 0.0) - var_e / per_q
    var_sampling = statistics.fmean(r[3] for r in rows)
    return AcceptanceModel(mu, math.sqrt(max(var_q, 0.0)), math.sqrt(max(var_run, 0.0)),
                           math.sqrt(max(var_e - var_sampling, 0.0)), statistics.fmean(r[4] for r in rows),
                           "per-request counters")


def fit_night_model(runs: Sequence[tuple[RunRecord, Path]]) -> NightModel:
    """The behaviour of the repeats ``runs`` (``(record, run folder)`` each), pooled over
    configs, tasks and variants (module docstring).

    Raises:
        ValueError: no question was seen in two completions with token ids.
    """
    by = _samples(runs)
    questions, off, changed, gaps = _questions(by)
    if not questions:
        raise ValueError("no question has two completions with token ids in these runs: nothing to fit")
    notes = []
    acc = _acceptance(runs, by)
    if acc is not None and acc.source != "per-request counters":
        notes.append("acceptance from per-task counters: the question and request spreads are 0 (set "
                     "per_request_metrics: true to measure them)")
    if not gaps:
        notes.append(f"no divergence judged by a reference's distribution: simulated divergences get gap {DEFAULT_GAP}")
    return NightModel(tuple(questions), changed / off if off else 0.0, tuple(sorted(gaps)), acc, len(runs),
                      tuple(notes))
