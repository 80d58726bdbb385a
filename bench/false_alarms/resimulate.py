"""Clean nights re-simulated from stored calibration repeats with THIS tree's gates
(docs/false-alarms.md): what ``evalrun calibrate --simulate-nights N --simulate-list LIST``
computes after its repeats, without running them again. Made for before/after figures of
a gate change: the repeats (their per-question divergence, flips, gaps and acceptance) stay
the same, only the judging changes. The nights are judged under the repeats' numerics noise
(``EVALRUN_NUMERICS_NOISE`` set from their ``run.json``), as ``calibrate`` judges them.

Usage::

    python bench/false_alarms/resimulate.py CAL_DIR --fit LIST_OR_YAML [--list LIST] [--nights N] [--seed S]

CAL_DIR is an ``evalrun calibrate`` folder (its ``run<i>/`` repeats); ``--fit`` the list
those repeats ran (its configs are simulated at their own sizes); ``--list`` another list
simulated with the same behaviour (e.g. model_lists/models-h200.txt). Prints, per config
and for the whole list, the simulated false-fail rate with its exact interval, and the
realized rate of the stored repeats as they were judged when they ran.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.config.model_list import load_model_list
from harness.records.run_record import load_run
from harness.report.calibration import summarize
from harness.report.calibration_nights import simulated_nights


def _rows(title: str, rates: dict) -> list[str]:
    out = [f"### {title}", "", "| what | failed nights | rate | 95% exact interval |", "|---|---|---|---|"]
    for what, r in rates.items():
        out.append(f"| {what} | {r['failed']}/{r['nights']} | {r['rate']:.3f} | "
                   f"[{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}] |")
    return out + [""]


def _levels(fa: dict) -> dict:
    """Config, gate-kind and whole-list rows of a ``false_alarms`` mapping (calibration.json's shape)."""
    rows = {f"config `{c}`": r for c, r in fa.get("configs", {}).items()}
    rows.update({f"kind `{k}` (any config)": r for k, r in fa.get("kinds", {}).items() if r["failed"]})
    if "list" in fa:
        rows["whole list"] = fa["list"]
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cal_dir", type=Path)
    ap.add_argument("--fit", required=True)
    ap.add_argument("--list", default=None)
    ap.add_argument("--nights", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    runs = [(load_run(d), d) for d in sorted(a.cal_dir.glob("run*")) if (d / "run.json").is_file()]
    runs = [(r, d) for r, d in runs if r.status == "completed"]
    if len(runs) < 2:
        print(f"{a.cal_dir}: fewer than 2 finished repeats", file=sys.stderr)
        return 2
    # judged as `calibrate --simulate-nights` judges them: under the repeats' numerics noise (the
    # near-tie bound of the divergences they measured, docs/numerics.md), set in its environment
    noise = {r.numerics_noise.spec for r, _ in runs if r.numerics_noise is not None}
    if len(noise) > 1:
        print(f"{a.cal_dir}: repeats ran under different numerics noise {sorted(noise)}", file=sys.stderr)
        return 2
    if noise:
        os.environ["EVALRUN_NUMERICS_NOISE"] = noise.pop()
    else:
        os.environ.pop("EVALRUN_NUMERICS_NOISE", None)
    summary = summarize(runs, k=3.0)
    other = (a.list, load_model_list(a.list)) if a.list else None
    sim = simulated_nights(runs, load_model_list(a.fit), summary["false_alarms"], a.nights, a.seed, other)
    print(f"# {len(runs)} stored repeats in {a.cal_dir}; {a.nights} simulated nights (seed {a.seed})\n")
    print("\n".join(_rows("realized (the repeats, judged when they ran)", _levels(summary["false_alarms"]))))
    print("\n".join(_rows(f"simulated: {a.fit}, this tree's gates", _levels(sim["rates"]))))
    if sim["other_list"]:
        print("\n".join(_rows(f"simulated: {a.list}, this tree's gates", _levels(sim["other_list"]["rates"]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
