"""The comparisons of a run record for reports: one row per comparison and task, every
judged divergence worst first, and the questions that flipped with both completions
(read from the samples beside the record). Used by :mod:`harness.report.summary` (which
re-exports every name) and the HTML report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from harness.records.run_folder import RunFolder
from harness.records.run_record import ComparisonResult, RunRecord
from harness.report.cells import ci_text, fmt


def _noise_text(comp: ComparisonResult) -> str:
    nz = comp.noise
    if not nz:
        return ""
    if nz.source == "rerun":
        src = f"noise {comp.baseline} rerun {fmt(nz.noise_rate)} ({nz.noise_mismatched}/{nz.noise_compared} differ)"
    else:
        src = f"stored noise {fmt(nz.noise_rate)}"
    return f"; {src}, one-sided p={fmt(nz.p_value, 4)}"


def _divergence_text(comp: ComparisonResult) -> str:
    dv = comp.divergence
    if dv is None or not dv.divergences:
        return ""
    return (f"; {len(dv.unexplained)} unexplained, {len(dv.explained)} near-tie"
            + (f", {len(dv.noise)} noise" if dv.noise else "")
            + f" (by {dv.reference}, <= {dv.near_tie_nats:g} nats)")


def divergence_rows(record: RunRecord) -> list[dict[str, str]]:
    """Every judged divergence of every comparison, worst first across the run: the
    unexplained by decreasing gap (an ended completion or one without a reference
    distribution first), then those the baseline's rerun explains, then the near-ties.
    Each row: config, pair, task, question, position, tokens (baseline -> candidate),
    the reference's gap (nats; ``>x`` outside its top k), verdict, reason."""
    order = {"unexplained": 0, "noise": 1, "explained": 2}
    rows: list[dict[str, Any]] = []
    for c in record.configs:
        for comp in c.comparisons:
            if comp.divergence is None:
                continue
            for d in comp.divergence.divergences:
                gap = "-" if d.gap_nats is None else (">" if not d.in_top_k else "") + f"{d.gap_nats:.3f}"
                rows.append({
                    "config": c.name, "pair": f"{comp.baseline} -> {comp.candidate}", "task": comp.task,
                    "question": d.question_id, "position": str(d.position),
                    "tokens": f"{d.baseline_token} -> {d.candidate_token}", "gap": gap,
                    "verdict": d.verdict.upper() if d.verdict == "unexplained" else d.verdict, "reason": d.reason,
                    "_key": (order[d.verdict], -(d.gap_nats if d.gap_nats is not None else float("inf"))
                             if d.verdict == "unexplained" else -(d.gap_nats or 0.0)),
                })
    rows.sort(key=lambda r: r["_key"])
    for r in rows:
        del r["_key"]
    return rows


class ComparisonRow(TypedDict):
    """A row of :func:`comparison_rows`: ``pair`` ``"baseline -> candidate"``; the
    question ids right only in the baseline (``lost_ids``) or the candidate
    (``gained_ids``), `` (truncated)`` marked; the other cells formatted for a table."""

    config: str
    pair: str
    task: str
    lost_ids: list[str]
    gained_ids: list[str]
    output_match: str
    diff: str
    flipped: str
    p: str


def comparison_rows(record: RunRecord) -> list[ComparisonRow]:
    """One row per comparison and task: output match (with the noise it is judged
    against, when any), paired accuracy difference, p-value, flipped question ids."""
    rows: list[ComparisonRow] = []
    for c in record.configs:
        for comp in c.comparisons:
            p = comp.paired
            cut = set(comp.truncated.baseline) | set(comp.truncated.candidate) if comp.truncated else set()

            def mark(ids: list[str]) -> list[str]:
                return [q + " (truncated)" if q in cut else q for q in ids]  # noqa: B023 - called in this iteration only

            rows.append(
                {
                    "config": c.name,
                    "pair": f"{comp.baseline} -> {comp.candidate}",
                    "task": comp.task,
                    "lost_ids": mark(list(p.a_only)) if p else [],
                    "gained_ids": mark(list(p.b_only)) if p else [],
                    "output_match": f"{fmt(comp.output_match_rate)} ({comp.matched}/{comp.compared})"
                    + (f"; {len(comp.past_stop)} only up to the stop" if comp.past_stop else "")
                    + _divergence_text(comp)
                    + _noise_text(comp),
                    "diff": (fmt(p.diff) + ci_text(p.diff_ci)) if p else "-",
                    "flipped": f"-{len(p.a_only)} / +{len(p.b_only)}" if p else "-",
                    "p": fmt(p.p_value, 4) if p else "-",
                }
            )
    return rows


# ------------------------------------------------------------------ flipped questions


class FlippedExample(TypedDict):
    """A question right in one variant of a comparison and wrong in the other
    (:func:`flipped_examples`): ``direction`` ``lost`` (right only in the baseline) or
    ``gained``; the answers are those of the comparison's pipeline."""

    question_id: str
    direction: str
    gold: str | None
    baseline_answer: str | None
    candidate_answer: str | None
    baseline_completion: str
    candidate_completion: str


def flipped_examples(record: RunRecord, config: str, comp: ComparisonResult, limit: int = 10,
                     run_dir: str | Path | None = None) -> list[FlippedExample]:
    """Questions right in one variant of a comparison and wrong in the other, with both
    completions, read from the samples beside the record.

    Returns:
        Up to ``limit`` :class:`FlippedExample`, lost first; ``[]`` when the samples
        cannot be read.
    """
    p = comp.paired
    ids = ([("lost", q) for q in p.a_only] + [("gained", q) for q in p.b_only]) if p else []
    if not ids:
        return []
    base = Path(run_dir or record.path or ".")
    crec = record.config(config)
    if crec is None:
        return []
    try:
        side = {}
        for role, vname in (("baseline", comp.baseline), ("candidate", comp.candidate)):
            ts = RunFolder(base).task(record, config, vname, comp.task)
            if ts is None:
                raise KeyError(f"{vname}/{comp.task}")
            side[role] = ts.by_question()
    except (KeyError, AttributeError, OSError, ValueError):
        return []
    pipe = comp.pipeline
    out: list[FlippedExample] = []
    for direction, q in ids[:limit]:
        a, b = side["baseline"].get(q), side["candidate"].get(q)
        out.append({
            "question_id": q, "direction": direction, "gold": a.gold if a else (b.gold if b else None),
            "baseline_answer": a.answers.get(pipe) if a else None,
            "candidate_answer": b.answers.get(pipe) if b else None,
            "baseline_completion": (a.completion if a else None) or "",
            "candidate_completion": (b.completion if b else None) or "",
        })
    return out
