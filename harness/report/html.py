"""``summary.html``: a self-contained HTML report of a run, with plots (no network, no scripts).

Plots are drawn by matplotlib and embedded inline as SVG, text kept as text
(``svg.fonttype = "none"``) so every number on a plot is also in the page's DOM. Each
plot is a ``<figure data-figure="<kind>" data-config="<config>">``; the numbers printed
on it come from the run record:

* ``accuracy``: per variant and task, the gate pipeline's accuracy with its 95% Wilson
  interval (``accuracy`` and ``accuracy_ci`` of the task record), labelled ``0.970``;
* ``per-position``: per speculative variant and task, per-position acceptance
  (``spec_decode.per_position_acceptance``; with its bootstrap interval when recorded),
  labelled ``0.98``;
* ``first-divergence``: per comparison with mismatches, the first divergent token index
  of every mismatched question (``comparisons[].mismatches[].first_divergence``),
  labelled with the count at each index;
* ``trend``: when the results folder holds earlier runs of the config, accuracy and
  mean acceptance length per night (:mod:`harness.report.history`).

Flipped questions are a table with both completions side by side; gates are listed with
the failing ones first.
"""

from __future__ import annotations

import html
import io
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from harness.records.run_record import ConfigResult, RunRecord, outcome_word, run_folders
from harness.records.text import clean_text
from harness.report.per_request import along_output_series
from harness.report.summary import _limit, _pipelines, flipped_examples, fmt, listing_order, task_pipeline

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["render_html", "write_html"]

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;max-width:1200px;color:#222}
h1{font-size:1.5em} h2{border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:32px}
table{border-collapse:collapse;margin:8px 0;font-size:0.9em}
td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}
th{background:#f3f3f3} .FAIL{color:#b00020;font-weight:bold} .PASS{color:#137333}
.NOTRUN{color:#a05a00;font-weight:bold} .XFAIL{color:#a05a00} .XPASS{color:#8a2be2;font-weight:bold}
.PASSED{color:#137333} .FAILED,.ERROR{color:#b00020;font-weight:bold}
.INCOMPLETE,.INTERRUPTED,.RUNNING{color:#a05a00;font-weight:bold}
pre{white-space:pre-wrap;margin:0;font-size:0.85em;max-width:520px} figure{margin:12px 0}
figcaption{font-size:0.85em;color:#555}
.verdict{font-size:1.2em;padding:6px 10px;display:inline-block;border-radius:4px;background:#f3f3f3}
"""


def _svg(fig: Figure) -> str:
    """The figure as inline SVG markup (XML header and DOCTYPE dropped)."""
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _plt() -> ModuleType:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "evalrun", "font.size": 9})
    return plt


def _figure(kind: str, config: str, svg: str, caption: str) -> str:
    return (f'<figure data-figure="{kind}" data-config="{html.escape(config)}">{svg}'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def _accuracy_fig(c: ConfigResult) -> str | None:
    pts = []
    pipes = set()
    for vname, v in c.variants.items():
        for tname, t in v.tasks.items():
            pipe = task_pipeline(c, vname, tname)
            acc = t.accuracy.get(pipe)
            if acc is not None:
                pipes.add(pipe)
                pts.append((f"{vname} / {tname}", acc, t.accuracy_ci.get(pipe)))
    if not pts:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(pts) + 1.0))
    for i, (_label, acc, ci) in enumerate(pts):
        lo, hi = (ci if ci else (acc, acc))
        ax.errorbar([acc], [i], xerr=[[max(0.0, acc - lo)], [max(0.0, hi - acc)]], fmt="o", color="#1a73e8", capsize=4)
        ax.annotate(f"{acc:.3f}", (acc, i), textcoords="offset points", xytext=(0, 7), ha="center")
    ax.set_yticks(range(len(pts)), [p[0] for p in pts])
    ax.set_xlim(0, 1.05)
    ax.set_ylim(len(pts) - 0.5, -0.8)  # room above the first label
    pipe = ", ".join(sorted(pipes))
    ax.set_xlabel(f"{pipe} accuracy (95% Wilson interval)")
    ax.grid(axis="x", alpha=0.3)
    return _figure("accuracy", c.name, _svg(fig),
                   f"{c.name}: accuracy of each task's gate pipeline ({pipe}) per variant and task, 95% Wilson "
                   "intervals")


def _per_position_fig(c: ConfigResult) -> str | None:
    series = []
    for vname, v in c.variants.items():
        for tname, t in v.tasks.items():
            pp = [x for x in (t.spec_decode.per_position_acceptance if t.spec_decode else []) if x is not None]
            if pp:
                series.append((f"{vname} / {tname}", pp, t.per_position_acceptance_ci))
    if not series:
        return None
    plt = _plt()
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(7, 3))
    for k, (label, pp, cis) in enumerate(series):
        xs = [i + k * width for i in range(len(pp))]
        err = None
        known = [ci for ci in cis or () if ci]
        if cis and len(known) == len(cis):
            err = [[max(0.0, p - ci[0]) for p, ci in zip(pp, known)], [max(0.0, ci[1] - p) for p, ci in zip(pp, known)]]
        bars = ax.bar(xs, pp, width=width, label=label, yerr=err, capsize=3)
        ax.bar_label(bars, labels=[f"{p:.2f}" for p in pp], padding=2)
    ax.set_xticks([i + width * (len(series) - 1) / 2 for i in range(max(len(s[1]) for s in series))],
                  [f"position {i + 1}" for i in range(max(len(s[1]) for s in series))])
    ax.set_ylim(0, 1.2)
    ax.set_ylabel("accepted / drafts")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _figure("per-position", c.name, _svg(fig),
                   f"{c.name}: per-position acceptance (accepted tokens at position i / drafts) "
                   "per speculative variant")


def _along_output_fig(record: RunRecord, run_dir: str | Path | None, c: ConfigResult) -> str | None:
    """Acceptance rate against output position per speculative variant and task, with the
    intervals over requests (:func:`harness.report.per_request.along_output_series`); None
    without per-request metrics."""
    series = along_output_series(record, run_dir, c.name)
    if not series:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3))
    for label, xs, ys, cis in series:
        err = None
        if all(ci is not None for ci in cis):
            err = [[max(0.0, y - ci[0]) for y, ci in zip(ys, cis) if ci], [max(0.0, ci[1] - y) for y, ci in zip(ys, cis)
                                                                              if ci]]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=label)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("output position (first token of the verify steps, bins)")
    ax.set_ylabel("accepted / drafted")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _figure("along-output", c.name, _svg(fig),
                   f"{c.name}: acceptance along the output per speculative variant (vLLM's per-request metrics; "
                   "95% intervals over requests)")


def _divergence_fig(c: ConfigResult) -> str | None:
    comps = [x for x in c.comparisons if x.mismatches]
    if not comps:
        return None
    plt = _plt()
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(len(comps), 1, figsize=(7, 2.2 * len(comps)), squeeze=False)
    for ax, comp in zip(axes[:, 0], comps):
        idx = [m.first_divergence for m in comp.mismatches]
        counts: dict[int, int] = {}
        for i in idx:
            counts[i] = counts.get(i, 0) + 1
        keys = sorted(counts)
        bars = ax.bar(keys, [counts[k] for k in keys], color="#d93025")
        ax.bar_label(bars, labels=[str(counts[k]) for k in keys], padding=1)
        ax.set_title(f"{comp.baseline} -> {comp.candidate} / {comp.task}: "
                     f"{len(idx)} of {comp.compared} differ", fontsize=9)
        ax.set_xlabel("first divergent completion token index")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(0, max(counts.values()) * 1.25)
        ax.set_ylabel("questions")
    fig.tight_layout()
    return _figure("first-divergence", c.name, _svg(fig), f"{c.name}: output match, first divergence of each mismatch")


def _trend_fig(c: ConfigResult, history: pd.DataFrame | None) -> str | None:
    if history is None or history.empty:
        return None
    h = history[history["config"] == c.name]
    if h["run_id"].nunique() < 2:
        return None
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3))
    for (var, task), g in h.groupby(["variant", "task"]):
        g = g.sort_values("time")
        a1.plot(g["time"], g["accuracy"], marker="o", label=f"{var} / {task}")
        if g["mean_acceptance_length"].notna().any():
            a2.plot(g["time"], g["mean_acceptance_length"], marker="o", label=f"{var} / {task}")
    a1.set_title("accuracy (gate pipeline) per run", fontsize=9)
    a2.set_title("mean acceptance length per run", fontsize=9)
    for a in (a1, a2):
        a.tick_params(axis="x", labelrotation=30, labelsize=7)
        a.legend(fontsize=7)
    fig.tight_layout()
    return _figure("trend", c.name, _svg(fig),
                   f"{c.name}: trend over {h['run_id'].nunique()} runs in the results folder")


def _cell(x: object) -> str:
    return html.escape(str(x))


def _table(headers: list[str], rows: list[list[str]], raw: bool = False) -> str:
    head = "".join(f"<th>{_cell(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c if raw else _cell(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _verdict_span(v: str) -> str:
    return f'<span class="{v.replace(" ", "")}">{_cell(v)}</span>'


def render_html(record: RunRecord, run_dir: str | Path | None = None, history: pd.DataFrame | None = None) -> str:
    """The run as one self-contained HTML page (inline CSS and SVG, no scripts, no links
    to the network).

    Args:
        record: the run record.
        run_dir: the run folder (for flipped questions' completions); default the
            folder the record was read from or written to.
        history: a :func:`harness.report.history.history_frame` DataFrame of the
            results folder, or None (no trend plots).
    """
    prov = record.provenance
    verdict = outcome_word(record.outcome)
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>evalrun {_cell(record.run_id)}: {verdict}</title><style>{_CSS}</style></head><body>",
        f"<h1>evalrun run {_cell(record.run_id)}</h1>",
        f"<p class='verdict'>{_verdict_span(verdict)} "
        f"exit code {_cell(record.exit_code)}</p>",
        f"<p>evalrun {_cell(prov.evalrun_version)}, {_cell(prov.vllm_version)}, "
        f"git {_cell(prov.git_revision)}, started {_cell(prov.started_at)}, ended {_cell(prov.ended_at)}</p>",
    ]
    parts += [f"<p class='FAIL'>WARNING: shards of different builds or lists merged: {_cell(w)}</p>"
              for w in record.merge_warnings]
    gates = record.gates()
    gates.sort(key=listing_order)  # what fails the run, NOT RUN, XPASS, XFAIL, PASS
    pipes = _pipelines(record)
    for c in record.configs:
        parts.append(f"<h2>{_cell(c.name)}</h2>")
        if c.error:
            parts.append(f"<p class='FAIL'>could not run: {_cell(c.error)}</p>")
        rows: list[list[Any]] = []
        for vname, v in c.variants.items():
            if v.error:
                parts.append(f"<p class='FAIL'>{_cell(vname)}: {_cell(v.error)}</p>")
            for tname, t in v.tasks.items():
                acc, ci = t.accuracy, t.accuracy_ci
                sd = t.spec_decode
                rows.append([vname, tname, t.num_requests, t.error_count]
                            + [fmt(acc.get(p)) + (f" [{iv[0]:.3f}, {iv[1]:.3f}]" if (iv := ci.get(p)) else "")
                               for p in pipes]
                            + [fmt(sd.mean_acceptance_length if sd else None),
                               " ".join(fmt(x, 2) for x in (sd.per_position_acceptance if sd else [])) or "-"])
        if rows:
            parts.append(_table(["variant", "task", "n", "errors", *[f"{p} [95% CI]" for p in pipes],
                                 "mean acceptance length", "per-position acceptance"], rows))
        for fig in (_accuracy_fig(c), _per_position_fig(c), _along_output_fig(record, run_dir, c), _divergence_fig(c),
                    _trend_fig(c, history)):
            if fig:
                parts.append(fig)
        for comp in c.comparisons:
            ex = flipped_examples(record, c.name, comp, limit=20, run_dir=run_dir)
            if ex:
                parts.append(f"<h3>Flipped questions: {_cell(comp.baseline)} &rarr; {_cell(comp.candidate)} / "
                             f"{_cell(comp.task)}</h3>")
                parts.append(_table(
                    ["question", "flip", "gold", f"{comp.baseline} completion", f"{comp.candidate} completion"],
                    [[_cell(e["question_id"]), _cell(e["direction"]), _cell(e["gold"]),
                      f"<pre>{_cell(e['baseline_completion'])}</pre>",
                      f"<pre>{_cell(e['candidate_completion'])}</pre>"] for e in ex],
                    raw=True))
    parts.append("<h2>Gates</h2>")
    parts.append(_table(["verdict", "gate", "observed", "limit", "detail"],
                        [[_verdict_span(g.verdict), _cell(g.id), _cell(fmt(g.observed, 4)), _cell(_limit(g)),
                          _cell(g.detail)] for g in gates], raw=True))
    parts.append("</body></html>\n")
    return clean_text("".join(parts))  # control characters, colour codes, lone surrogates: harness.records.text


def write_html(record: RunRecord, run_dir: Path, with_history: bool = True) -> Path:
    """Write ``run_dir/summary.html``; with ``with_history`` the trend plots read the other
    run records of ``run_dir``'s parent folder (unreadable ones are skipped)."""
    history = None
    # a trend needs another run in the folder: pandas (about 0.6 s to import) only then
    if with_history and any(f != Path(run_dir).resolve() for f in run_folders(Path(run_dir).parent)):
        from harness.report.history import history_frame, load_records  # noqa: PLC0415 - pandas, on this path only

        try:
            recs, _ = load_records(Path(run_dir).parent)
            ids = {r.run_id for r in recs}
            if record.run_id not in ids:
                recs.append(record)
            history = history_frame(recs)
        except (OSError, ValueError, KeyError):
            history = None
    path = Path(run_dir) / "summary.html"
    from harness.records.atomic import write_atomic  # noqa: PLC0415 - looked up per call (tests replace it)

    write_atomic(path, render_html(record, run_dir, history))
    return path
