"""Acceptance per request, the request as the unit: along the output, paired by question,
by prompt length and by time since the server started.

Reads the samples' own speculative-decoding metrics (``Sample.spec_decoding``: vLLM's
``metrics.speculative_decoding``, :mod:`harness.records.spec_request`), which a server started
with ``--per-request-spec-decode-metrics detailed`` returns at any concurrency. Drafts of one
request share its fate (acceptance clusters by request), so every interval resamples requests
(or questions), never drafts.

Verify step to generated-token position: the first generated token comes from the prefill,
not from a verify step; verify step ``s`` then emits its accepted drafts plus one token (the
bonus or the correction), so it starts at output position ``1 + sum_{t<s} (accepted_t + 1)``
(0-based; vLLM's ``Scheduler.update_from_output`` counts ``num_accepted = len(generated) - 1``
per step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, TypedDict

from harness.analysis.stats import ratio_bootstrap_ci
from harness.records.samples import Sample
from harness.records.spec_request import typed

#: Output positions per bin of :func:`along_output` (tokens).
BIN_TOKENS = 16
#: A request "collapsed" (:func:`collapses`) when it accepted drafts before some verify step and
#: none in at least this many verify steps from there to its end.
COLLAPSE_MIN_STEPS = 4
#: Why there is no per-request analysis (no sample carries vLLM's per-request metrics).
NO_PER_REQUEST = ("not available: no sample carries vLLM's per-request speculative metrics (the server was "
                  "not started with --per-request-spec-decode-metrics, its vLLM lacks it, or every request ended on a "
                  "stop string on a server without evalrun's vLLM plugin, e.g. a --python interpreter without evalrun: "
                  "vLLM 0.32 attaches them only to a request its scheduler finishes, vllm/v1/core/sched/scheduler.py "
                  "Scheduler.update_from_output, and the plugin's workaround, harness/faults/spec_metrics.py, "
                  "gives them to a request its detokenizer stops)")


@dataclass(frozen=True)
class RequestAcceptance:
    """One request's acceptance.

    Attributes:
        question_id: the sample's question.
        accepted, drafted: per verify step, in order (``per_step_accepted`` /
            ``per_step_drafted``); empty when only the ``summary`` level was reported.
        accepted_total, drafted_total, steps: the request's totals.
        prompt_tokens: the prompt's tokens as the engine counted them, or None.
        sent_after_start_s: seconds from the server being ready to the request being sent, or None.
    """

    question_id: str
    accepted: tuple[int, ...]
    drafted: tuple[int, ...]
    accepted_total: int
    drafted_total: int
    steps: int
    prompt_tokens: int | None
    sent_after_start_s: float | None

    @property
    def rate(self) -> float | None:
        """Accepted draft tokens per draft token (None: no drafts)."""
        return self.accepted_total / self.drafted_total if self.drafted_total else None

    def positions(self) -> list[int]:
        """Each verify step's first output position (module docstring)."""
        out, at = [], 1
        for a in self.accepted:
            out.append(at)
            at += a + 1
        return out


def requests_of(samples: Sequence[Sample]) -> list[RequestAcceptance]:
    """Every sample carrying vLLM's per-request metrics, errors included (a failed request may
    have drafted), in sample order."""
    out = []
    for s in samples:
        if s.spec_decoding is None:
            continue
        m = typed(s.spec_decoding)
        out.append(RequestAcceptance(
            s.question_id, tuple(m.per_step_accepted or ()), tuple(m.per_step_drafted or ()),
            m.num_accepted_draft_tokens, m.num_draft_tokens, m.num_spec_steps,
            s.prompt_tokens, s.sent_after_start_s))
    return out


class PositionBin(TypedDict):
    """Acceptance of the verify steps starting in output positions ``[start, end)``."""

    start: int
    end: int
    requests: int
    steps: int
    drafted: int
    accepted: int
    rate: float | None
    rate_ci: list[float] | None


def along_output(reqs: Sequence[RequestAcceptance], bin_tokens: int = BIN_TOKENS) -> list[PositionBin]:
    """Acceptance rate by output position, bins of ``bin_tokens`` tokens.

    Returns:
        One :class:`PositionBin` per bin up to the last step seen: accepted / drafted draft
        tokens of the steps that start there, and its 95% interval by
        :func:`harness.analysis.stats.ratio_bootstrap_ci` over the requests that reached the
        bin (each request's accepted and drafted in the bin resampled together); ``rate``
        None for a bin without drafts, ``rate_ci`` None with fewer than 2 requests.
    """
    cells: dict[int, list[tuple[int, int, int]]] = {}  # bin -> (accepted, drafted, steps) per request
    for r in reqs:
        per: dict[int, list[int]] = {}
        for p, a, d in zip(r.positions(), r.accepted, r.drafted):
            c = per.setdefault(p // bin_tokens, [0, 0, 0])
            c[0], c[1], c[2] = c[0] + a, c[1] + d, c[2] + 1
        for b, (a, d, n) in per.items():
            cells.setdefault(b, []).append((a, d, n))
    out: list[PositionBin] = []
    for b in range(max(cells, default=-1) + 1):
        rows = cells.get(b, [])
        acc, dr = sum(x[0] for x in rows), sum(x[1] for x in rows)
        ci = (list(ratio_bootstrap_ci([x[0] for x in rows], [x[1] for x in rows]))
              if len(rows) >= 2 and dr > 0 else None)
        out.append({"start": b * bin_tokens, "end": (b + 1) * bin_tokens, "requests": len(rows),
                    "steps": sum(x[2] for x in rows), "drafted": dr, "accepted": acc,
                    "rate": acc / dr if dr else None, "rate_ci": ci})
    return out


class Collapse(TypedDict):
    """A request whose acceptance stopped: from verify step ``step`` (output position
    ``position``) to its end, ``steps_after`` steps accepted nothing, after ``accepted_before``
    accepted drafts."""

    question_id: str
    step: int
    position: int
    steps_after: int
    accepted_before: int


def collapses(reqs: Sequence[RequestAcceptance], min_steps: int = COLLAPSE_MIN_STEPS) -> list[Collapse]:
    """Requests that accepted drafts and then none in their last ``>= min_steps`` verify
    steps (:class:`Collapse`), in request order; requests without per-step data are skipped."""
    out: list[Collapse] = []
    for r in reqs:
        tail = 0
        while tail < len(r.accepted) and r.accepted[len(r.accepted) - 1 - tail] == 0:
            tail += 1
        start = len(r.accepted) - tail
        before = sum(r.accepted[:start])
        if tail >= min_steps and before > 0:
            out.append({"question_id": r.question_id, "step": start, "position": r.positions()[start],
                        "steps_after": tail, "accepted_before": before})
    return out


class Paired(TypedDict):
    """Per question acceptance rate of two variants (``b`` minus ``a``)."""

    questions: int
    mean_a: float | None
    mean_b: float | None
    mean_diff: float | None
    wilcoxon_p: float | None
    test: str
    largest_drops: list[tuple[str, float]]
    reason: str | None


def paired_by_question(a: Sequence[RequestAcceptance], b: Sequence[RequestAcceptance], top: int = 5) -> Paired:
    """Each question's acceptance rate on two variants, paired.

    Returns:
        :class:`Paired`: the questions with drafts on both, the mean of each variant's
        per-question rate, the mean paired difference ``b - a``, the two-sided p-value of
        the Wilcoxon signed-rank test of the differences (``scipy.stats.wilcoxon``, zero
        differences dropped, ``zero_method="wilcox"``; None when every difference is 0 or
        fewer than 2 questions), and the ``top`` questions where ``b`` fell most below ``a``.
    """
    ra = {r.question_id: r.rate for r in a if r.rate is not None}
    pairs = [(q, ra[q], r.rate) for r in b if r.rate is not None and (q := r.question_id) in ra]
    test = "Wilcoxon signed-rank, two-sided, per-question acceptance rates (zero differences dropped)"
    if not pairs:
        return {"questions": 0, "mean_a": None, "mean_b": None, "mean_diff": None, "wilcoxon_p": None,
                "test": test, "largest_drops": [], "reason": "no question has drafts on both variants"}
    diffs = [y - x for _, x, y in pairs]
    p = None
    if len(pairs) >= 2 and any(d != 0 for d in diffs):
        from scipy import stats as sps

        p = float(sps.wilcoxon(diffs, zero_method="wilcox").pvalue)
    drops = sorted(((q, y - x) for q, x, y in pairs if y < x), key=lambda t: t[1])[:top]
    n = len(pairs)
    return {"questions": n, "mean_a": sum(x for _, x, _ in pairs) / n, "mean_b": sum(y for _, _, y in pairs) / n,
            "mean_diff": sum(diffs) / n, "wilcoxon_p": p, "test": test, "largest_drops": drops, "reason": None}


class Trend(TypedDict):
    """Per-request acceptance rate against a covariate (prompt tokens, seconds since start)."""

    covariate: str
    requests: int
    spearman_rho: float | None
    p: float | None
    reason: str | None


def trend(reqs: Sequence[RequestAcceptance], covariate: str) -> Trend:
    """Spearman's rank correlation (``scipy.stats.spearmanr``, two-sided p) between each
    request's acceptance rate and ``covariate`` (``prompt_tokens`` or ``sent_after_start_s``),
    over the requests with drafts and the covariate; ``reason`` says why there is none (fewer
    than 3 such requests, or a constant side)."""
    pts = [(float(v), r.rate) for r in reqs if r.rate is not None and (v := getattr(r, covariate)) is not None]
    out: Trend = {"covariate": covariate, "requests": len(pts), "spearman_rho": None, "p": None, "reason": None}
    if len(pts) < 3:
        out["reason"] = f"not available: {len(pts)} requests with drafts report {covariate}"
        return out
    xs, ys = [x for x, _ in pts], [y for _, y in pts]
    if len(set(xs)) < 2 or len(set(ys)) < 2:
        out["reason"] = f"not available: {'the ' + covariate if len(set(xs)) < 2 else 'acceptance'} is constant"
        return out
    from scipy import stats as sps

    res = sps.spearmanr(xs, ys)
    out["spearman_rho"], out["p"] = float(res.statistic), float(res.pvalue)
    return out


class TaskAnalysis(TypedDict):
    """:func:`analyse`: one variant and task."""

    requests: int
    detailed: int
    along_output: list[PositionBin]
    collapses: list[Collapse]
    zero_accepted: list[str]
    by_prompt_tokens: Trend
    by_uptime: Trend
    reason: str | None


def analyse(samples: Sequence[Sample], bin_tokens: int = BIN_TOKENS) -> TaskAnalysis:
    """Every single-variant analysis of one task's samples: acceptance along the output,
    collapsed requests, requests with drafts and no accepted draft (``zero_accepted``, question
    ids), and the trends by prompt length and by uptime; ``reason`` set (and the rest empty)
    when no sample carries per-request metrics."""
    reqs = requests_of(samples)
    out: TaskAnalysis = {
        "requests": len(reqs), "detailed": sum(1 for r in reqs if r.accepted or not r.steps),
        "along_output": along_output(reqs, bin_tokens), "collapses": collapses(reqs),
        "zero_accepted": [r.question_id for r in reqs if r.drafted_total > 0 and r.accepted_total == 0],
        "by_prompt_tokens": trend(reqs, "prompt_tokens"), "by_uptime": trend(reqs, "sent_after_start_s"),
        "reason": None if reqs else NO_PER_REQUEST,
    }
    return out
