"""The calibration summary as Markdown (:func:`render_calibration_markdown`): the spread
tables of every task and comparison, and the recommended tolerances with their reasons.
The summary itself is built by :mod:`harness.report.calibration`."""

from __future__ import annotations

import math
from typing import Sequence

from harness.analysis.stats import binomial_variance
from harness.report.calibration_types import CalibrationSummary, Spread
from harness.report.cells import fmt


def _f(x: object, d: int = 4) -> str:
    return fmt(x, d)


def _vals(xs: Sequence[object], d: int = 4) -> str:
    return ", ".join(_f(x, d) for x in xs)


def _row(label: list[str], s: Spread, d: int = 4) -> list[str]:
    return label + [_vals(s["values"], d), _f(s["mean"], d), _f(s["sd"], d), _f(s["sd_upper95"], d),
                    _f(s["min"], d), _f(s["max"], d)]


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return out


SPREAD_HEAD = ["values (run 1..N)", "mean", "sd", "sd 95% upper", "min", "max"]


def render_calibration_markdown(summary: CalibrationSummary) -> str:
    """The calibration summary (:func:`summarize`) as Markdown.

    Long (about 60 lines) because it is one table per section of the summary, in order.
    """
    # long: a renderer, one table per section of the summary, in order
    L = [f"# evalrun calibrate: {len(summary['runs'])} runs", ""]
    for r in summary["runs"]:
        L.append(f"- run `{r['path']}` (exit code {r['exit_code']}, {r['status']})"
                 + (f": {r['error']}; its figures are partial" if r.get("error") else ""))
    L += ["", f"Rule: {summary['rule']}.", ""]
    for cs in summary["configs"]:
        L += [f"## {cs['name']}", "", f"### Accuracy (gates read {cs['pipeline']})", ""]
        rows = []
        for e in cs["tasks"]:
            for p, s in e["accuracy"].items():
                bs = math.sqrt(binomial_variance(s["mean"], e["n"])) if s["mean"] is not None and e["n"] else None
                rows.append(_row([e["variant"], e["task"], p, str(e["n"])], s) + [_f(bs)])
        L += _table(["variant", "task", "pipeline", "n"] + SPREAD_HEAD + ["sampling sd sqrt(pt(1-pt)/n)"], rows)
        rows = []
        for e in cs["tasks"]:
            if not e.get("mean_acceptance_length"):
                continue
            rows.append(_row([e["variant"], e["task"], "mean acceptance length"], e["mean_acceptance_length"])
                        + [f"{_f(e.get('sampling_se_mean_acceptance_length'))} ({e.get('sampling_se_source')})"])
            rows.append(_row([e["variant"], e["task"], "acceptance rate"], e["acceptance_rate"]) + [""])
            for i, s in enumerate(e.get("per_position_acceptance") or []):
                rows.append(_row([e["variant"], e["task"], f"acceptance at position {i}"], s) + [""])
        if rows:
            L += ["", "### Speculative decoding", ""]
            L += _table(["variant", "task", "figure"] + SPREAD_HEAD + ["sampling se"], rows)
        rows = []
        for ce in cs["comparisons"]:
            lab = [f"{ce['baseline']} -> {ce['candidate']}", ce["task"]]
            rows.append(_row(lab + ["output match rate"], ce["output_match_rate"]))
            rows.append(_row(lab + ["accuracy drop (baseline - candidate)"], ce["accuracy_drop"]))
            rows.append(_row(lab + ["discordance (b + c)/n"], ce["discordance"]))
            al_drop = ce["acceptance_length_drop"]
            if al_drop:
                rows.append(_row(lab + ["mean acceptance length drop"], al_drop))
        if rows:
            L += ["", "### Comparisons", ""]
            L += _table(["pair", "task", "figure"] + SPREAD_HEAD, rows)
        rows = []
        for e in cs["tasks"]:
            for x in e["output_noise"]:
                firsts = (", ".join(f"{q}@{d}" for q, d in x["first_divergences"][:8])
                          + (" ..." if x["mismatched"] > 8 else ""))
                rows.append([e["variant"], e["task"], f"run {x['run']} vs run 1", f"{x['mismatched']}/{x['compared']}",
                             _f(x["rate"]), firsts or "-"])
        if rows:
            L += ["", "### Run-to-run output noise (same variant, greedy completions)", ""]
            L += _table(["variant", "task", "runs", "differ", "rate", "first divergence (token)"], rows)
        rec = cs["recommended"]
        L += ["", "### Recommended", "", "```yaml", "gates:"]
        for key, v in rec["gates"].items():
            L.append(f"  {key}: {v}")
        if rec["comparisons"]:
            L.append("comparisons:")
            for rc in rec["comparisons"]:
                L.append(f"  - baseline: {rc['baseline']}")
                L.append(f"    candidate: {rc['candidate']}")
                for key, v in rc.items():
                    if key not in ("baseline", "candidate", "task"):
                        L.append(f"    {key}: {v}")
                L.append(f"    # task {rc['task']}")
        L += ["```", ""]
        for key, text in cs["explain"].items():
            L.append(f"- `{key}`: {text}")
        L.append("")
    return "\n".join(L) + "\n"
