"""The traffic shapes of a run for people: per shape task, whether each variant's shape is
proven by the engine's counters (with its preemptions and, for a shape sent in passes,
each pass's peak in flight), and per comparison what diverged at which place: relative to
the shape's edge (``edge/off<offset>``: prompt length minus the edge), or the pass and
budget of a load shape (``pressure``, ``c8/out64``), with the generated-token position of
each first divergence and its verdict."""

from __future__ import annotations

from collections.abc import Callable

from harness.records.run_record import ComparisonResult, ConfigResult, RunRecord
from harness.tasks.shapes import place_of


def _n(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


def proof_rows(c: ConfigResult, task: str) -> list[list[str]]:
    """Per variant that ran ``task``: proven (``NOT RUN`` when the shape cannot happen on
    the variant), tokens sent and the engine counters, the problems (or why not run) and
    the proof's notes (bounds, warm against cold)."""
    rows = []
    for vname, v in c.variants.items():
        t = v.tasks.get(task)
        p = getattr(t, "shape", None)
        if p is None:
            continue
        k = p.counters
        proven = "NOT RUN" if p.not_run is not None else "yes" if not p.problems else "**NO**"
        why = [f"not run: {p.not_run}"] if p.not_run is not None else list(p.problems)
        rows.append([vname, proven, str(p.prompt_tokens_sent),
                     _n(k.prompt_tokens if k else None), _n(k.generation_tokens if k else None),
                     _n(k.preemptions if k else None),
                     f"{_n(k.prefix_cache_hits if k else None)}/{_n(k.prefix_cache_queries if k else None)}",
                     ", ".join(f"{name} {n}" for name, n in p.peak_in_flight.items()) or "-",
                     "; ".join(why) or "-", "; ".join(p.notes) or "-"])
    return rows


def divergence_by_place(comp: ComparisonResult, places: dict[str, int]) -> list[list[str]]:
    """Per place of the shape: requests diverged / sent, and each divergence's question,
    first differing generated token and verdict (``-`` when not classified)."""
    verdicts = {d.question_id: d.verdict for d in (comp.divergence.divergences if comp.divergence else ())}
    rows = []
    for place, sent in places.items():
        mm = [m for m in comp.mismatches if place_of(m.question_id) == place]
        where = ", ".join(f"{m.question_id} @{m.first_divergence} {verdicts.get(m.question_id, '-')}" for m in mm)
        rows.append([f"{comp.baseline} -> {comp.candidate}", place, f"{len(mm)}/{sent}", where or "-"])
    return rows


def shape_lines(record: RunRecord, table: Callable[[list[str], list[list[str]]], str]) -> list[str]:
    """The "Traffic shapes" section of summary.md (empty when no shape ran); ``table`` is
    the summary's Markdown table renderer ``table(headers, rows)``."""
    out: list[str] = []
    for c in record.configs:
        tasks = sorted({t for v in c.variants.values() for t, r in v.tasks.items() if getattr(r, "shape", None)})
        for task in tasks:
            proofs = proof_rows(c, task)
            first = next(p for v in c.variants.values() if (p := getattr(v.tasks.get(task), "shape", None)))
            edges = ", ".join(f"{k} = {v} tokens" for k, v in first.edges.items()) or ", ".join(
                f"{n} requests of {length} tokens" for length, n in first.prompt_lengths.items())
            head = ["variant", "proven", "prompt tokens sent", "engine prompt tokens", "generation tokens",
                    "preemptions", "prefix hits/queries", "peak in flight per pass", "problems", "notes"]
            out += ["", f"### {c.name} {task}: {first.shape} ({edges})", "", table(head, proofs), ""]
            rows = [r for comp in c.comparisons if comp.task == task for r in divergence_by_place(comp, first.places)]
            if rows:
                out += [table(["pair", "place (edge/offset or pass)", "diverged", "question @first divergence verdict"],
                              rows), ""]
    return (["", "## Traffic shapes"] + out) if out else []
