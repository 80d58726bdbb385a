#!/usr/bin/env python3
"""The sampled verdict (``sampled_equivalence``, docs/gates.md "Sampled verdict") measured.

Not a test: it prints measurements, never pass/fail. Three commands:

``simulate [--reps R]``
    The test's false-alarm rate at alpha 0.05 on a CORRECT sampler with known per-question
    distributions (8 tokens x 6 positions per question, drawn by inverse CDF), for
    independent draws (each question its own uniforms: ``seed_mode: per_question`` or no
    seed) and for one shared seed (every question of a side draws the same uniforms:
    ``seed_mode: same``), at n = 30 and 80. No engine.

``power [--reps R] [--n N]``
    The gate's power against a distortion that KEEPS the target's mean log-probability:
    at each position the sampler draws from ``w * softmax(logits / 0.25) + (1 - w) *
    uniform`` (too sharp on some steps, too flat on others, as random temperatures are),
    ``w`` chosen per position so that the expected target log-probability of the drawn
    token equals the target's own. Rejection rates at alpha 0.05 on n questions (default
    80) of the mean log-probability test alone, of the share of target-top-1 tokens alone
    and of the gate's maxT test of both; the same for a flatter sampler (temperature 1.15,
    which the mean log-probability sees: what the maxT costs it) and a correct one (false alarms).
    No engine.

``null --repeats N``
    The null case on the REAL engine, N times: ``configs/tiny-qwen3next-mtp-cpu-sampled.yaml``
    with only ``reference`` and ``reference_reseeded`` (the same server, other seeds), the
    task seed moved by 1000 per repeat so each repeat is a fresh draw; every run under
    ``flock /tmp/evalrun-engine.lock``. Prints each repeat's verdict, p-value, shift, sd and
    t, the pass count, and the scoring step's seconds.

``cost``
    The sampled run against the greedy run of the same variants on the same engine: the
    sampled config as it is (reference, reference_reseeded, spec_sync at temperature 1.0 with
    the scoring step) and its greedy twin (reference and spec_sync at temperature 0 with the
    output-match gate and the reference's log-probabilities); per run the servers' start-up,
    evaluation and teardown seconds, the scoring step, the whole wall time, and the ratios.

Usage (from the repository root, evalrun importable)::

    python bench/sampled_verdict.py simulate
    python bench/sampled_verdict.py power
    python bench/sampled_verdict.py null --repeats 5
    python bench/sampled_verdict.py cost
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "tiny-qwen3next-mtp-cpu-sampled.yaml"
LOCK = "/tmp/evalrun-engine.lock"


def _side(n: int, shared: bool, rng: random.Random) -> list[float]:
    """Mean log-probability per token of one side's n completions (6 tokens each)."""
    common = [rng.random() for _ in range(6)]
    out = []
    for q in range(n):
        qr = random.Random(q)
        lp = 0.0
        for i in range(6):
            logits = [qr.gauss(0, 1.5) for _ in range(8)]
            top = max(logits)
            w = [math.exp(x - top) for x in logits]
            tot, u, acc, pick = sum(w), common[i] if shared else rng.random(), 0.0, 7
            for t, x in enumerate(w):
                acc += x / tot
                if u < acc:
                    pick = t
                    break
            lp += math.log(w[pick] / tot)
        out.append(lp / 6)
    return out


def simulate(reps: int) -> None:
    """Print the false-alarm rates of the sign-flip test under H0 (see the module doc)."""
    from harness.analysis.sampled import sampled_test  # noqa: PLC0415 - only this command needs evalrun
    from harness.records.completions import TargetScore  # noqa: PLC0415

    def scores(means: list[float]) -> dict[str, TargetScore]:
        return {f"q/{i}": TargetScore(f"q/{i}", 6, 6 * m) for i, m in enumerate(means)}

    rng = random.Random(11)
    print("| draws | n | repeats | false alarms at alpha 0.05 |\n| --- | --- | --- | --- |")
    for shared in (False, True):
        for n in (30, 80):
            hits = 0
            for _ in range(reps):
                st = sampled_test(scores(_side(n, shared, rng)), scores(_side(n, shared, rng)), "sim", resamples=999)
                hits += st is not None and st.p_value < 0.05
            print(f"| {'one shared seed' if shared else 'independent'} | {n} | {reps} | {hits / reps:.3f} |")


def _position(q: int, i: int) -> list[float]:
    """The target's probabilities of 8 tokens at position i of question q (as :func:`_side`)."""
    qr = random.Random(f"{q}/{i}")
    logits = [qr.gauss(0, 1.5) for _ in range(8)]
    top = max(logits)
    w = [math.exp(x - top) for x in logits]
    return [x / sum(w) for x in w]


def _distorted(p: list[float]) -> list[float]:
    """A sampler's distribution with the same expected target log-probability as ``p``:
    ``w * sharp + (1 - w) * uniform``, sharp = p at temperature 0.25 (module doc)."""
    lp = [math.log(x) for x in p]
    sharp = [x ** 4 for x in p]
    sharp = [x / sum(sharp) for x in sharp]
    want = sum(x * y for x, y in zip(p, lp))
    es, eu = sum(x * y for x, y in zip(sharp, lp)), sum(lp) / len(lp)
    w = (want - eu) / (es - eu)
    return [w * s + (1 - w) / len(p) for s in sharp]


def _flat(p: list[float]) -> list[float]:
    """``p`` at temperature 1.15: flatter, a lower expected target log-probability."""
    w = [x ** (1 / 1.15) for x in p]
    return [x / sum(w) for x in w]


def _completion(q: int, bad: str, rng: random.Random) -> tuple[float, int]:
    """One question's 6-token completion by sampler ``bad`` (``""`` correct, ``distorted``,
    ``flat``): (sum of target log-probabilities, target-top-1 tokens)."""
    lp, top1 = 0.0, 0
    for i in range(6):
        p = _position(q, i)
        pick = rng.choices(range(8), weights=_distorted(p) if bad == "distorted" else _flat(p) if bad else p)[0]
        lp += math.log(p[pick])
        top1 += p[pick] == max(p)
    return lp, top1


def power(reps: int, n: int) -> None:
    """Print the rejection rates of the three tests on a distorted and a correct sampler (module doc)."""
    from harness.analysis.sampled import sampled_test  # noqa: PLC0415 - only this command needs evalrun
    from harness.records.completions import TargetScore  # noqa: PLC0415

    def side(bad: str, rng: random.Random) -> dict[str, TargetScore]:
        out = {}
        for q in range(n):
            lp, top1 = _completion(q, bad, rng)
            out[f"q/{q}"] = TargetScore(f"q/{q}", 6, lp, top1=top1)
        return out

    rng = random.Random(5)
    print("| candidate sampler | n | repeats | mean log-prob test | top-1 share test | gate (maxT of both) | "
          "mean shift (nats/token) | mean top-1 shift |\n| --- | --- | --- | --- | --- | --- | --- | --- |")
    names = {"distorted": "distorted, same mean log-prob", "flat": "flatter (temperature 1.15)",
             "": "correct (false alarms)"}
    for bad, name in names.items():
        hits = [0, 0, 0]
        shift = top = 0.0
        for _ in range(reps):
            st = sampled_test(side("", rng), side(bad, rng), "sim", resamples=999)
            assert st is not None and st.logprob_p_value is not None and st.top1_p_value is not None
            hits = [h + (x < 0.05) for h, x in zip(hits, (st.logprob_p_value, st.top1_p_value, st.p_value))]
            shift, top = shift + st.shift / reps, top + (st.top1_shift or 0.0) / reps
        print(f"| {name} | {n} | {reps} | {hits[0] / reps:.3f} | {hits[1] / reps:.3f} | {hits[2] / reps:.3f} | "
              f"{shift:+.4f} | {top:+.4f} |")


def _run(cfg: dict, run_id: str, results: Path) -> tuple[dict, float]:
    """Run evalrun on ``cfg`` (written to a temporary file) under the engine lock; the record and wall seconds."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False, prefix="bench-sampled-") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)
        path = Path(f.name)
    try:
        t0 = time.monotonic()
        subprocess.run(["flock", LOCK, sys.executable, "-m", "harness.cli", "--config", str(path), "--results-dir",
                        str(results), "--run-id", run_id, "--no-baseline", "--quiet"],
                       cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
        wall = time.monotonic() - t0
    finally:
        path.unlink()
    return json.loads((results / run_id / "run.json").read_text()), wall


def _base() -> dict:
    cfg = yaml.safe_load(CONFIG.read_text())
    cfg["name"] = "bench-sampled"
    return cfg


def null(repeats: int, results: Path, first: int = 0) -> None:
    """The null comparison ``repeats`` times on the real engine (see the module doc),
    repeats ``first`` .. ``first + repeats - 1`` (task seed 42 + 1000 k)."""
    passed = 0
    print("| repeat | task seed | verdict | p | shift (nats/token) | sd | t | scoring step s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for k in range(first, first + repeats):
        cfg = _base()
        cfg["variants"] = {"reference": {}, "reference_reseeded": cfg["variants"]["reference_reseeded"]}
        cfg.pop("expected_failures", None)  # they name spec_sync's gates, not planned here
        cfg["tasks"]["arith"]["seed"] = 42 + 1000 * k
        cfg["comparisons"] = [cfg["comparisons"][0]]
        rec, _ = _run(cfg, f"null-{k}-{int(time.time())}", results)
        c = rec["configs"][0]
        g = next(x for x in c["gates"] if x["kind"] == "sampled_equivalence")
        sc = c.get("scoring") or [{}]
        st = next(iter((sc[0].get("sampled") or {}).values()), {})
        passed += g["passed"] is True
        print(f"| {k + 1} | {cfg['tasks']['arith']['seed']} | {'pass' if g['passed'] else g['passed']} | "
              f"{st.get('p_value', float('nan')):.3f} | {st.get('shift', float('nan')):+.4f} | "
              f"{st.get('sd', float('nan')):.4f} | {st.get('t', float('nan')):.2f} | {sc[0].get('seconds')} |")
    print(f"\nnull comparison passed {passed} of {repeats}")


def _seconds(rec: dict) -> dict[str, float]:
    c = rec["configs"][0]
    vs = c["variants"].values()
    out = {k: sum(v.get(f"{k}_seconds") or 0 for v in vs) for k in ("startup", "evaluation", "teardown")}
    out["scoring"] = sum(s.get("seconds") or 0 for s in c.get("scoring") or [])
    return out


def cost(results: Path, sampled_run: Path | None) -> None:
    """The sampled run against its greedy twin (see the module doc); ``sampled_run``: the
    folder of a run of the sampled config as it is, instead of running it again."""
    sampled = _base()
    greedy = _base()
    greedy["variants"] = {k: v for k, v in greedy["variants"].items() if k != "reference_reseeded"}
    greedy["tasks"]["arith"].update(temperature=0.0, seed_mode="same")
    greedy.pop("expected_failures", None)  # the sampling bug's gates: none of them fails greedy
    greedy["comparisons"] = [{"baseline": "reference", "candidate": "spec_sync", "max_accuracy_drop": 0.05,
                              "min_output_match": 0.95}]
    rows = []
    for name, cfg in (("greedy (reference, spec_sync)", greedy), ("sampled (reference, reference_reseeded, "
                                                                   "spec_sync, scoring)", sampled)):
        if cfg is sampled and sampled_run is not None:
            rec = json.loads((sampled_run / "run.json").read_text())
            p = rec["provenance"]
            wall = (_when(p["ended_at"]) - _when(p["started_at"]))
        else:
            rec, wall = _run(cfg, f"cost-{name.split()[0]}-{int(time.time())}", results)
        rows.append((name, _seconds(rec), wall))
    print("| run | start-up s | evaluation s | teardown s | scoring step s | wall s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, s, wall in rows:
        print(f"| {name} | {s['startup']:.1f} | {s['evaluation']:.1f} | {s['teardown']:.1f} | {s['scoring']:.1f} | "
              f"{wall:.1f} |")
    (_, g, gw), (_, s, sw) = rows
    print(f"\nwall ratio sampled / greedy: {sw / gw:.2f}; scoring step / greedy wall: {s['scoring'] / gw:.2f}")


def _when(stamp: str) -> float:
    from datetime import datetime  # noqa: PLC0415

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("simulate").add_argument("--reps", type=int, default=400)
    pw = sub.add_parser("power")
    pw.add_argument("--reps", type=int, default=200)
    pw.add_argument("--n", type=int, default=80)
    nl = sub.add_parser("null")
    nl.add_argument("--repeats", type=int, default=5)
    nl.add_argument("--first", type=int, default=0)
    sub.add_parser("cost").add_argument("--sampled-run", type=Path, default=None)
    ap.add_argument("--results-dir", type=Path, default=Path(tempfile.gettempdir()) / "evalrun-bench-sampled")
    a = ap.parse_args()
    if a.cmd == "simulate":
        simulate(a.reps)
    elif a.cmd == "power":
        power(a.reps, a.n)
    elif a.cmd == "null":
        null(a.repeats, a.results_dir, a.first)
    else:
        cost(a.results_dir, a.sampled_run)


if __name__ == "__main__":
    main()
