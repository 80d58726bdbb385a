"""Per-request acceptance in the reports: the "Per-request acceptance" section of ``summary.md``
(where acceptance collapsed, by question and output position; requests that accepted nothing;
the paired comparison of two speculative variants; trends by prompt length and uptime) and the
acceptance-along-the-output figure of ``summary.html``. Read from the samples beside the record
(:mod:`harness.analysis.per_request`); nothing is shown for a run whose samples carry no
per-request metrics, so such a run's reports are unchanged."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness.analysis.per_request import TaskAnalysis, Trend, analyse, paired_by_question, requests_of
from harness.records.run_folder import RunFolder
from harness.records.run_record import RunRecord
from harness.records.samples import Sample

#: At most this many questions named per list.
MAX_NAMED = 30


def task_samples(record: RunRecord, run_dir: str | Path | None) -> dict[tuple[str, str, str], list[Sample]]:
    """``(config, variant, task) -> samples`` of every task whose samples carry vLLM's per-request
    metrics (files that cannot be read are left out: the reports say what they can)."""
    base = RunFolder(Path(run_dir or record.path or "."))
    out: dict[tuple[str, str, str], list[Sample]] = {}
    for c in record.configs:
        for vname, v in c.variants.items():
            for tname in v.tasks:
                try:
                    ts = base.task(record, c.name, vname, tname)
                    rows = ts.read() if ts is not None else []
                except (KeyError, AttributeError, OSError, ValueError):
                    continue
                if any(s.spec_decoding is not None for s in rows):
                    out[(c.name, vname, tname)] = rows
    return out


def _trend_text(t: Trend) -> str:
    if t["reason"]:
        return t["reason"]
    return f"Spearman rho {t['spearman_rho']:.3f}, p={t['p']:.3g} over {t['requests']} requests"


def _named(ids: list[str]) -> str:
    return ", ".join(ids[:MAX_NAMED]) + (f" ... ({len(ids) - MAX_NAMED} more)" if len(ids) > MAX_NAMED else "")


def per_request_lines(record: RunRecord, run_dir: str | Path | None,
                      table: Callable[[list[str], list[list[str]]], str]) -> list[str]:
    """The Markdown section (``[]`` when no sample carries per-request metrics): per speculative
    variant and task, acceptance along the output (bins of
    :data:`harness.analysis.per_request.BIN_TOKENS` tokens), the questions whose acceptance
    collapsed and from which output position, the requests that accepted no draft, the trends;
    per comparison of two such variants, the paired per-question result."""
    data = task_samples(record, run_dir)
    if not data:
        return []
    lines = ["", "## Per-request acceptance", "",
             "From each response's own `metrics.speculative_decoding` (vLLM's `--per-request-spec-decode-metrics`); "
             "the request is the unit of every interval and test.", ""]
    analyses: dict[tuple[str, str, str], TaskAnalysis] = {k: analyse(v) for k, v in data.items()}
    rows = []
    for (cname, vname, tname), a in analyses.items():
        bins = " ".join(f"[{b['start']},{b['end']}) {b['rate']:.2f}" if b["rate"] is not None else
                        f"[{b['start']},{b['end']}) -" for b in a["along_output"])
        rows.append([cname, vname, tname, str(a["requests"]), bins or "-", str(len(a["collapses"])),
                     str(len(a["zero_accepted"]))])
    lines.append(table(["config", "variant", "task", "requests", "acceptance rate along the output (token bins)",
                        "collapsed", "no draft accepted"], rows))
    lines.append("")
    for (cname, vname, tname), a in analyses.items():
        where = f"{cname}/{vname}/{tname}"
        if a["collapses"]:
            lines.append(f"- {where}: acceptance collapsed (no draft accepted from there to the end) in "
                         + _named([f"{c['question_id']} from output position {c['position']}" for c in a["collapses"]]))
        if a["zero_accepted"]:
            lines.append(f"- {where}: no draft accepted in {len(a['zero_accepted'])} requests: "
                         + _named(a["zero_accepted"]))
        lines.append(f"- {where}: by prompt length: {_trend_text(a['by_prompt_tokens'])}; by time since the server "
                     f"started: {_trend_text(a['by_uptime'])}")
    for c in record.configs:
        for comp in c.comparisons:
            ka, kb = (c.name, comp.baseline, comp.task), (c.name, comp.candidate, comp.task)
            if ka not in data or kb not in data:
                continue
            p = paired_by_question(requests_of(data[ka]), requests_of(data[kb]))
            if p["mean_diff"] is None:
                continue
            lines.append(f"- {c.name}: {comp.baseline} -> {comp.candidate} / {comp.task}, paired over {p['questions']} "
                         f"questions: mean per-question acceptance rate {p['mean_a']:.3f} -> {p['mean_b']:.3f} "
                         f"(difference {p['mean_diff']:+.3f}; {p['test']}: p="
                         + ("-" if p["wilcoxon_p"] is None else f"{p['wilcoxon_p']:.3g}") + ")"
                         + ("; largest drops: " + ", ".join(f"{q} {d:+.2f}" for q, d in p["largest_drops"])
                            if p["largest_drops"] else ""))
    return lines


def along_output_series(record: RunRecord, run_dir: str | Path | None,
                        config: str) -> list[tuple[str, list[float], list[float], list[list[float] | None]]]:
    """One config's series for the figure: ``(variant / task, bin starts, rates, intervals)``."""
    out = []
    for (cname, vname, tname), rows in task_samples(record, run_dir).items():
        if cname != config:
            continue
        bins = [b for b in analyse(rows)["along_output"] if b["rate"] is not None]
        if bins:
            out.append((f"{vname} / {tname}", [float(b["start"]) for b in bins], [float(b["rate"] or 0) for b in bins],
                        [b["rate_ci"] for b in bins]))
    return out
