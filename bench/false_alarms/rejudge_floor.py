"""The accuracy floors of stored runs re-judged by THIS tree's floor test (docs/gates.md, "The
false-alarm budget"): for every ``accuracy_floor`` gate of every completed ``run<i>/run.json``
under a calibrate folder, the stored verdict (the rule it ran with) beside the exact one-sided
binomial p-value of "accuracy below accuracy_threshold - tolerance" and whether it is below the
config's share of the budget at Holm's first step (the dry run's figure). Nothing is run again.

Usage::

    python bench/false_alarms/rejudge_floor.py CAL_DIR --config CONFIG_YAML
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.analysis.budget import floor_p
from harness.config.gates import plan_gates
from harness.config.loader import load_config
from harness.report.budget_plan import budget_plan


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cal_dir", type=Path)
    ap.add_argument("--config", required=True, type=Path)
    a = ap.parse_args()
    cfg = load_config(a.config)
    plan = budget_plan(cfg)
    if plan is None:
        print(f"{a.config}: the false-alarm budget is off", file=sys.stderr)
        return 2
    floors = {g.id: g.limit for g in plan_gates(cfg) if g.kind == "accuracy_floor"}
    share = plan["share"]
    print(f"config {cfg.name}: {len(plan['family'])} tested gates, share {share:.3g} at Holm's first step\n")
    print("| run | gate | right | stored verdict | floor | exact binomial p | fails at the share |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    runs = sorted((d for d in a.cal_dir.glob("run*") if (d / "run.json").is_file()), key=lambda d: d.name)
    for d in runs:
        rec = json.loads((d / "run.json").read_text())
        if rec.get("status") != "completed":
            continue
        for c in rec["configs"]:
            for g in c["gates"]:
                m = re.search(r"\((\d+)/(\d+)\)", g.get("detail") or "")
                if g["id"] not in floors or m is None:
                    continue
                k, n = int(m[1]), int(m[2])
                p = floor_p(k, n, floors[g["id"]])
                print(f"| {d.name} | {g['id'].split('/', 1)[1]} | {k}/{n} | {g['verdict']} | {floors[g['id']]} | "
                      f"{p:.3g} | {'yes' if p < share else 'no'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
