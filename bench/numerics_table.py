"""The divergence the numerics noise produces (docs/numerics.md): read run folders of
evalrun runs made with ``EVALRUN_NUMERICS_NOISE`` and print, per run and task, the share of
completions identical (same token ids) between reference and spec_sync, the accuracy
discordance (questions whose gate-pipeline verdict differs), the reference's gap at each
first divergence (its top log-probabilities there), and spec_sync's mean acceptance
length; then, across the runs given, the same variant against itself (run i vs run i+1)
and the spread of the acceptance length.

Usage::

    python bench/numerics_table.py RUN_DIR [RUN_DIR ...] [--baseline reference] [--candidate spec_sync]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def samples(run_dir: Path, rel: str) -> dict[str, dict]:
    """Question id -> sample of one samples file."""
    return {s["question_id"]: s for s in map(json.loads, (run_dir / rel).read_text().splitlines())}


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """The first position where two token lists differ (the shorter's end), None when equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def gap(ref: dict, d: int, token: int) -> float | None:
    """The reference's log-probability gap between its token and ``token`` at position ``d``
    (None: not among its top log-probabilities, or none recorded)."""
    tops = ref.get("top_logprobs")
    if not tops or d >= len(tops):
        return None
    top = dict(map(tuple, tops[d]))
    return top[ref["token_ids"][d]] - top[token] if token in top else None


def compare(ra: dict[str, dict], rb: dict[str, dict], pipe: str) -> dict:
    """Identical share, accuracy discordance and first-divergence gaps of two sample sets."""
    qs = sorted(set(ra) & set(rb))
    gaps: list[float | None] = []
    same = 0
    disc = 0
    for q in qs:
        a, b = ra[q]["token_ids"] or [], rb[q]["token_ids"] or []
        d = first_divergence(a, b)
        if d is None:
            same += 1
        else:
            gaps.append(gap(ra[q], d, b[d]) if d < len(b) and d < len(a) else None)
        disc += ra[q]["correct"].get(pipe) != rb[q]["correct"].get(pipe)
    judged = [g for g in gaps if g is not None]
    return {"n": len(qs), "identical": same, "discordant": disc, "gaps": judged,
            "max_gap": max(judged) if judged else None, "unjudged": len(gaps) - len(judged)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--baseline", default="reference")
    ap.add_argument("--candidate", default="spec_sync")
    a = ap.parse_args()
    per_run = []
    for run in a.runs:
        rec = json.loads((run / "run.json").read_text())
        noise = rec.get("numerics_noise")
        print(f"## {run.name}: numerics noise {noise['spec'] + ' = ' + str(noise['level_nats']) if noise else 'off'}")
        got = {}
        for c in rec["configs"]:
            vb, vc = c["variants"][a.baseline], c["variants"][a.candidate]
            for t, tr in vb["tasks"].items():
                if t not in vc["tasks"]:
                    continue
                pipe = c.get("pipeline") if c.get("pipeline") in tr["accuracy"] else next(iter(tr["accuracy"]))
                ref, cand = samples(run, tr["samples"]), samples(run, vc["tasks"][t]["samples"])
                r = compare(ref, cand, pipe)
                sd = vc["tasks"][t].get("spec_decode") or {}
                mal = sd.get("mean_acceptance_length")
                got[(c["name"], t)] = (ref, cand, mal, pipe)
                mg = "-" if r["max_gap"] is None else f"{r['max_gap']:.3f}"
                acc = {v: c["variants"][v]["tasks"][t]["accuracy"].get(pipe) for v in c["variants"]
                       if t in c["variants"][v]["tasks"]}
                print(f"{c['name']}/{t}: identical {r['identical']}/{r['n']}, accuracy discordant {r['discordant']}, "
                      f"divergences {r['n'] - r['identical']} (judged {len(r['gaps'])}, max gap {mg} nats, "
                      f"unjudged {r['unjudged']}), {a.candidate} acceptance length {mal}; {pipe} accuracy {acc}")
        per_run.append(got)
    if len(per_run) > 1:
        print("## across runs")
        for key in per_run[0]:
            runs = [g[key] for g in per_run if key in g]
            mals = [m for _, _, m, _ in runs if m is not None]
            for i in range(len(runs) - 1):
                for side, idx in ((a.baseline, 0), (a.candidate, 1)):
                    r = compare(runs[i][idx], runs[i + 1][idx], runs[i][3])
                    print(f"{key[0]}/{key[1]} {side} run {i + 1} vs {i + 2}: identical {r['identical']}/{r['n']}, "
                          f"accuracy discordant {r['discordant']}")
            if len(mals) > 1:
                print(f"{key[0]}/{key[1]} {a.candidate} acceptance length over {len(mals)} runs: "
                      f"min {min(mals):.3f} max {max(mals):.3f} sd {statistics.stdev(mals):.3f}")


if __name__ == "__main__":
    main()
