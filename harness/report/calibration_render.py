"""The calibration summary as Markdown (:func:`render_calibration_markdown`): the spread
tables of every task and comparison, and the recommended tolerances with their reasons.
The summary itself is built by :mod:`harness.report.calibration`."""

from __future__ import annotations

import math
from typing import Sequence

from harness.analysis.false_alarms import FalseAlarmsJson, RateJson
from harness.analysis.stats import binomial_variance
from harness.report.calibration_types import CalibrationSummary, SimulatedNights, Spread
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
        if "false_alarms" in summary:
            L += config_false_alarm_lines(summary["false_alarms"], cs["name"])
    if "false_alarms" in summary:
        L += list_false_alarm_lines(summary["false_alarms"])
    if "simulated_nights" in summary:
        L += simulated_lines(summary["simulated_nights"])
    return "\n".join(L) + "\n"


RATE_HEAD = ["failed nights", "rate", "95% exact interval (Clopper-Pearson)"]


def _rate(r: RateJson) -> list[str]:
    """A rate's cells: ``failed/nights`` (and nights not judged), rate, interval."""
    lo, hi = r["ci95"]
    unjudged = f" ({r['not_judged']} not judged)" if r["not_judged"] else ""
    return [f"{r['failed']}/{r['nights']}{unjudged}", _f(r["rate"], 3), f"[{lo:.3f}, {hi:.3f}]"]


def config_false_alarm_lines(fa: FalseAlarmsJson, config: str) -> list[str]:
    """Markdown: one config's realized false-fail rate over the repeats: the config, each
    gate kind in it, and every gate that failed at least one night."""
    if config not in fa["configs"]:
        return []
    rows = [["config (any gate)"] + _rate(fa["configs"][config])]
    rows += [[f"kind `{r['kind']}`"] + _rate(r) for r in fa["config_kinds"] if r["config"] == config]
    rows += [[f"gate `{g}`"] + _rate(r) for g, r in fa["gates"].items()
             if g.startswith(config + "/") and r["failed"]]
    return ([f"### Realized false-fail rate over the {fa['nights']} repeats (clean nights: every failure is a "
             "false alarm on a good build)", ""] + _table(["what"] + RATE_HEAD, rows) + [""])


def list_false_alarm_lines(fa: FalseAlarmsJson) -> list[str]:
    """Markdown: the whole list's realized false-fail rate over the repeats, per gate kind."""
    rows = [["the whole list (a red night)"] + _rate(fa["list"])]
    rows += [[f"config `{c}`"] + _rate(r) for c, r in fa["configs"].items()]
    rows += [[f"kind `{k}` (any config)"] + _rate(r) for k, r in fa["kinds"].items()]
    return (["## Clean nights: realized false-fail rate of the list", "",
             f"Share of the {fa['nights']} repeats in which each failed the run (FAIL, or a strict XPASS); "
             f"interval: {fa['interval']}.", ""] + _table(["what"] + RATE_HEAD, rows) + [""])


def _rates_table(fa: FalseAlarmsJson) -> list[str]:
    """Markdown rows of simulated rates: list, per config, per kind, per config and kind."""
    rows = [["the whole list (a red night)"] + _rate(fa["list"])]
    rows += [[f"config `{c}`"] + _rate(r) for c, r in fa["configs"].items()]
    rows += [[f"kind `{k}` (any config)"] + _rate(r) for k, r in fa["kinds"].items()]
    rows += [[f"`{r['config']}` kind `{r['kind']}`"] + _rate(r) for r in fa["config_kinds"]]
    return _table(["what"] + RATE_HEAD, rows)


def simulated_lines(sim: SimulatedNights) -> list[str]:
    """Markdown: the simulated nights (:mod:`harness.report.calibration_nights`): the measured
    behaviour, the validation against the repeats, the rates of the calibrated list and of
    another list."""
    m = sim["model"]
    L = [f"## Simulated clean nights ({sim['nights']} nights, seed {sim['seed']})", "",
         "Nights drawn from the per-question behaviour the repeats measured and judged by evalrun's own "
         "comparisons and gates (harness/analysis/night_simulation.py; engine facts, traffic-shape proofs, "
         "stored baselines and the sampled verdict are not simulated).", "",
         "Measured: " + ", ".join(f"{k} {_f(v) if isinstance(v, float) else v}" for k, v in m.items()
                                  if k not in ("acceptance", "notes")), ""]
    acc = m.get("acceptance")
    if isinstance(acc, dict):
        L += ["Acceptance (logit scale): " + ", ".join(f"{k} {_f(v) if isinstance(v, float) else v}"
                                                        for k, v in acc.items()), ""]
    notes = m.get("notes")
    if isinstance(notes, list):
        L += [f"- note: {n}" for n in notes] + ([""] if notes else [])
    rows = [[v["level"], f"`{v['name']}`"] + _rate(v["real"])
            + [_f(v["simulated"]["rate"], 3), "yes" if v["within_real_ci"] else "NO"] for v in sim["validation"]]
    L += ["### Validation: simulated against the real repeats", ""]
    L += _table(["level", "name", "real failed", "real rate", "real 95% interval", "simulated rate",
                 "within"], rows) + [""]
    L += ["### The calibrated list, simulated", ""] + _rates_table(sim["rates"]) + [""]
    other = sim["other_list"]
    if other is not None:
        L += [f"### {other['list']}, simulated (each task's modal accuracy drawn with its config's "
              "accuracy_threshold)", ""] + _rates_table(other["rates"]) + [""]
    return L
