"""``evalrun history RESULTS_DIR``: every run record as one pandas DataFrame, and drift across nights.

One row per run x config x variant x task (:func:`history_frame`), with the run's time,
git revision and vLLM version, the accuracy of every answer pipeline with its 95%
Wilson interval, error and truncation rates, mean acceptance length, acceptance rate,
per-position acceptance, output match against the comparison baseline, and the verdict
of the gates of that variant and task.

Drift (:func:`drift_table`): a slow decline can stay inside every night's tolerance and
still be real. For each config x variant x task series of the last N runs, evalrun tests
the gate pipeline's accuracy and the mean acceptance length for a downward trend with the
one-sided **Mann-Kendall test**: Kendall's tau between run order and value, alternative
"decreasing" (``scipy.stats.kendalltau(..., alternative="less")``; Mann 1945, Kendall
1975). A series is flagged when p < alpha (default 0.05). Under "no trend" (nights
independent and identically distributed) the false-alarm rate of one series is at most
alpha per check (exactly alpha up to the discreteness of the test; ties make it
conservative); with several series checked, expect about alpha x series false alarms.
At least 4 runs are needed (with 4 the smallest p is 1/24 = 0.042).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd

from harness.records.run_record import (
    GateResult,
    RunRecord,
    RunRecordError,
    gates_passed,
    load_run,
    outcome_word,
    run_folders,
)
from harness.report.summary import task_pipeline

__all__ = ["load_records", "history_frame", "cost_frame", "drift_table", "DRIFT_METHOD"]

#: How drift is judged (printed with the table and stored in the JSON output).
DRIFT_METHOD = ("one-sided Mann-Kendall trend test (Kendall's tau of value vs run order, alternative: decreasing; "
                "scipy.stats.kendalltau) per config/variant/task over the last N runs; flagged when p < alpha; "
                "false-alarm rate <= alpha per series and check when runs are independent with no trend")

MIN_RUNS = 4


def load_records(results_dir: str | Path, config: str | None = None) -> tuple[list[RunRecord], list[str]]:
    """Every readable run record under ``results_dir`` (``*/run.json``; a symlinked run
    once, :func:`harness.records.run_record.run_folders`), oldest first.

    Args:
        results_dir: a results folder (``results/``).
        config: keep only records that hold this config name.

    Returns:
        ``(records, problems)``: records sorted by ``provenance.started_at`` then
        ``run_id``; problems: one line per folder that could not be read (named).

    Raises:
        FileNotFoundError: ``results_dir`` is not a folder.
    """
    root = Path(results_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: not a folder of run records")
    out, problems = [], []
    for folder in run_folders(root):  # a symlinked run is counted once, by its resolved folder
        try:
            rec = load_run(folder)
        except RunRecordError as e:
            problems.append(str(e))
            continue
        if rec.shard is not None:
            continue  # a shard's configs appear in the merged run
        if config and rec.config(config) is None:
            continue
        out.append(rec)
    out.sort(key=lambda r: (r.provenance.started_at or "", r.run_id))
    return out, problems


def _verdict(gates: Iterable[GateResult]) -> str:
    """FAIL when a gate fails the run (FAIL, strict XPASS), else NOT RUN, else XFAIL /
    XPASS when one of those is there (expected failures, distinct from PASS), else PASS."""
    gs = list(gates)
    words = {g.verdict for g in gs}
    joint = gates_passed(gs)
    if joint is False:
        return "FAIL"
    if joint is None:
        return "NOT RUN"
    return next((w for w in ("XFAIL", "XPASS") if w in words), "PASS" if gs else "-")


def history_frame(records: Iterable[RunRecord], config: str | None = None) -> pd.DataFrame:
    """One row per run x config x variant x task that ran.

    Columns: ``run_id``, ``time`` (UTC timestamp), ``git_revision``, ``vllm_version``
    (as the variant's engine reported it on ``/version``; None when it did not),
    ``outcome`` (the run's outcome word, :attr:`RunRecord.outcome`), ``config``, ``variant``,
    ``task``, ``pipeline`` (the task's gate pipeline),
    ``accuracy`` (of that pipeline), ``accuracy_lo`` / ``accuracy_hi`` (95% Wilson),
    ``accuracy[<pipeline>]`` with ``accuracy[<pipeline>]_lo`` / ``_hi`` for every
    pipeline, ``n``, ``error_rate``,
    ``truncation_rate`` (finish reason ``length`` among successful requests),
    ``mean_acceptance_length``, ``acceptance_rate``, ``per_position`` (tuple),
    ``output_match`` (against the first comparison whose candidate this variant is),
    ``gpu_seconds`` (the variant's :attr:`VariantResult.gpu_seconds`, None when its record
    has no durations or devices),
    ``verdict`` (PASS / FAIL / XFAIL / XPASS / NOT RUN over the gates of this variant and task; ERROR
    for the tasks a run measured before an unexpected exception ended it, ``status: error``;
    a row of a run whose outcome is not PASSED says so in ``outcome``).
    """
    rows = []
    for rec in records:
        prov = rec.provenance
        for c in rec.configs:
            if config and c.name != config:
                continue
            for vname, v in c.variants.items():
                for tname, t in v.tasks.items():
                    pipe = task_pipeline(c, vname, tname)
                    sd = t.spec_decode
                    ci = t.accuracy_ci.get(pipe) or (None, None)
                    ok = t.num_requests - t.error_count
                    comp = next((x for x in c.comparisons if x.candidate == vname and x.task == tname), None)
                    gates = [g for g in c.gates if g.variant == vname and g.task == tname]
                    verdict = "ERROR" if rec.status == "error" else _verdict(gates)  # the run ended on an exception
                    row = {
                        "run_id": rec.run_id, "time": pd.to_datetime(prov.started_at, utc=True),
                        "git_revision": prov.git_revision,
                        # the version the engine itself reported (/version), not evalrun's interpreter's
                        "vllm_version": v.engine.vllm_version if v.engine else None,
                        "outcome": outcome_word(rec.outcome) + (  # GPU-like logits: never read as a CPU run
                            f" [numerics noise {rec.numerics_noise.level_nats:g} nats]" if rec.numerics_noise else ""),
                        "config": c.name, "variant": vname, "task": tname, "pipeline": pipe,
                        "accuracy": t.accuracy.get(pipe), "accuracy_lo": ci[0], "accuracy_hi": ci[1],
                        "n": t.num_requests, "error_rate": t.error_rate,
                        "truncation_rate": (t.finish_reasons.get("length", 0) / ok) if ok else None,
                        "mean_acceptance_length": sd.mean_acceptance_length if sd else None,
                        "acceptance_rate": sd.acceptance_rate if sd else None,
                        "per_position": (tuple(sd.per_position_acceptance)
                                         if sd and sd.per_position_acceptance else None),
                        "output_match": comp.output_match_rate if comp else None,
                        "verdict": verdict,
                        "gpu_seconds": v.gpu_seconds,  # the variant's, repeated on each of its tasks
                    }
                    for p, x in t.accuracy.items():
                        lo, hi = t.accuracy_ci.get(p) or (None, None)
                        row[f"accuracy[{p}]"], row[f"accuracy[{p}]_lo"], row[f"accuracy[{p}]_hi"] = x, lo, hi
                    rows.append(row)
    cols = ["run_id", "time", "git_revision", "vllm_version", "outcome", "config", "variant", "task", "pipeline",
            "accuracy",
            "accuracy_lo", "accuracy_hi", "n", "error_rate", "truncation_rate", "mean_acceptance_length",
            "acceptance_rate", "per_position", "output_match", "verdict", "gpu_seconds"]
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=cols)
    return df.sort_values(["time", "run_id", "config", "variant", "task"], kind="stable").reset_index(drop=True)


def last_runs(df: pd.DataFrame, n: int | None) -> pd.DataFrame:
    """Rows of the last ``n`` runs (by time) of each config; all when ``n`` is None."""
    if n is None or df.empty:
        return df
    keep = (df[["config", "run_id", "time"]].drop_duplicates().sort_values("time")
            .groupby("config", group_keys=False).tail(n))
    return df.merge(keep[["config", "run_id"]], on=["config", "run_id"])


def mann_kendall_decreasing(values: list[float]) -> tuple[float, float]:
    """Kendall's tau of ``values`` against their order and the one-sided p-value of
    "decreasing" (``scipy.stats.kendalltau``, alternative ``less``)."""
    from scipy.stats import kendalltau

    res = kendalltau(list(range(len(values))), values, alternative="less")
    return float(res.statistic), float(res.pvalue)


def drift_table(df: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """The drift check (module docstring) per config x variant x task and metric.

    Returns:
        One row per series and metric (``accuracy``, ``mean_acceptance_length``):
        ``config``, ``variant``, ``task``, ``metric``, ``runs``, ``first``, ``last``,
        ``tau``, ``p_value``, ``drift`` (True / False, or None with fewer than
        :data:`MIN_RUNS` values).
    """
    out = []
    for (cfg, var, task), g in df.groupby(["config", "variant", "task"], sort=True):
        g = g.sort_values("time")
        for metric in ("accuracy", "mean_acceptance_length"):
            vals = [float(x) for x in g[metric] if x is not None and pd.notna(x)]
            if not vals:
                continue
            tau = p = None
            drift = None
            if len(vals) >= MIN_RUNS:
                tau, p = mann_kendall_decreasing(vals)
                drift = bool(p < alpha)
            out.append({"config": cfg, "variant": var, "task": task, "metric": metric, "runs": len(vals),
                        "first": vals[0], "last": vals[-1], "tau": tau, "p_value": p, "drift": drift})
    return pd.DataFrame(out, columns=["config", "variant", "task", "metric", "runs", "first", "last", "tau", "p_value",
                                      "drift"])


def cost_frame(records: Iterable[RunRecord], config: str | None = None) -> pd.DataFrame:
    """GPU cost per run x config over time: ``run_id``, ``time``, ``config``, ``variants``
    (servers that recorded a cost), ``server_seconds`` (sum of start-up + evaluation +
    teardown seconds), ``gpu_seconds`` (sum of :attr:`VariantResult.gpu_seconds`; None when
    no variant of the config recorded it, e.g. records written before evalrun kept it)."""
    rows = []
    for rec in records:
        for c in rec.configs:
            if config and c.name != config:
                continue
            costs = [v for v in c.variants.values() if v.gpu_seconds is not None]
            rows.append({
                "run_id": rec.run_id, "time": pd.to_datetime(rec.provenance.started_at, utc=True), "config": c.name,
                "variants": len(costs),
                "server_seconds": sum((v.startup_seconds or 0) + (v.evaluation_seconds or 0) + (v.teardown_seconds or 0)
                                      for v in costs) if costs else None,
                "gpu_seconds": sum(v.gpu_seconds or 0.0 for v in costs) if costs else None,
            })
    cols = ["run_id", "time", "config", "variants", "server_seconds", "gpu_seconds"]
    if not rows:
        return pd.DataFrame(columns=cols)
    df = pd.DataFrame(rows, columns=cols)
    return df.sort_values(["time", "run_id", "config"], kind="stable").reset_index(drop=True)


def render_cost_markdown(df: pd.DataFrame) -> str:
    """Markdown: GPU-seconds per config over time (:func:`cost_frame`)."""
    if df.empty:
        return "No run records.\n"
    view = df.copy()
    view["time"] = view["time"].dt.strftime("%Y-%m-%d %H:%M")
    return "\n".join(["## GPU-seconds per config", "", view.to_markdown(index=False, floatfmt=".1f"), "",
                      "gpu_seconds = (start-up + evaluation + teardown seconds) x devices given, summed over the "
                      "config's variants; empty for records without durations or devices."]) + "\n"


_SHOW = ["time", "run_id", "outcome", "config", "variant", "task", "accuracy", "accuracy_lo", "accuracy_hi",
         "mean_acceptance_length", "output_match", "error_rate", "verdict"]


def _unreadable_lines(problems: list[str]) -> list[str]:
    if not problems:
        return []
    return ["", f"## Unreadable run records ({len(problems)})", ""] + [f"- {p}" for p in problems]


def render_history_markdown(df: pd.DataFrame, drift: pd.DataFrame, alpha: float,
                            problems: list[str] | None = None) -> str:
    """Markdown: the history table, then the drift table with its method, then the run
    records that could not be read (named, with why)."""
    if df.empty:
        return "\n".join(["No run records."] + _unreadable_lines(problems or [])) + "\n"
    view = df[_SHOW].copy()
    view["time"] = view["time"].dt.strftime("%Y-%m-%d %H:%M")
    lines = ["## History", "", view.to_markdown(index=False, floatfmt=".3f"), "", "## Drift", "",
             f"Method: {DRIFT_METHOD}; alpha = {alpha}.", ""]
    lines.append(drift.to_markdown(index=False, floatfmt=".4g") if not drift.empty else "No series.")
    flagged = drift[drift["drift"] == True]  # noqa: E712 - pandas element-wise
    lines += ["", f"**Drift flagged in {len(flagged)} series**: " + "; ".join(
        f"{r.config}/{r.variant}/{r.task} {r.metric} {r.first:.3f} -> {r.last:.3f} (p={r.p_value:.3g})"
        for r in flagged.itertuples()) if len(flagged) else "No drift flagged."]
    lines += _unreadable_lines(problems or [])
    return "\n".join(lines) + "\n"
