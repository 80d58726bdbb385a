#!/usr/bin/env python3
"""GPU scheduling benchmark: the H200 list's shape on a simulated 8-GPU node, run one
server at a time and packed (variants side by side on disjoint devices), in one run.

Not a test: it prints measurements and ratios, never pass/fail. Run from the
repository root with the project's venv::

    .venv/bin/python bench/gpu_schedule.py

What runs: for every config of ``model_lists/models-h200.txt`` a FAKE config
(``tests/fake_vllm.py``: there are no GPUs here) with the same variants and the same
device need as the real one (``--tensor-parallel-size`` read from the real config by
:func:`harness.engine.devices.variant_need`), a start-up delay scaled down from the
real engine's (``--scale`` seconds per real minute; the real start-ups assumed are in
:data:`STARTUP_MINUTES`), and ``--questions`` requests answered after
``--latency`` seconds each at ``--concurrency`` in flight. The node is
``CUDA_VISIBLE_DEVICES=0,...,7``; each fake server records the devices it was given and
its start and stop times, from which the servers' lifetimes are measured.

Printed per mode (``--max-servers 1`` = sequential, and packed): GPU-seconds (sum over
servers of lifetime x devices), the lower bound ``max(GPU-seconds / 8, longest server)``,
the servers' span (first server start to last server stop: what the schedule decides)
and the whole process's wall seconds, each against the lower bound, and the seconds
outside any server (imports, the pre-launch check, data, reports: evalrun's fixed work,
shown as its own line, not hidden in the ratio); then packed / sequential for both.

Last results (``--scale 2``: start-ups 12 s, 6 s and 8 s; 12 requests of 0.1 s per
variant; 2 shared cores): sequential 163.8 s whole process, servers' span 160.6 s,
against a lower bound of 118.3 s (1.39x / 1.36x); packed 129.3 s whole process, span
125.9 s, lower bound 119.6 s (1.08x / 1.05x; goal 1.15x); 3.2-3.4 s outside any server
(the fake interpreter answers the pre-launch check without importing vLLM); packed /
sequential 0.79 (span 0.78).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.config.model_list import load_model_list
from harness.config.plan import build_plan
from harness.engine.devices import variant_need

FAKE = REPO / "tests" / "fake_vllm.py"
EIGHT = "0,1,2,3,4,5,6,7"
#: Real start-up minutes assumed per config (weights, compile, graphs on an H200 node).
STARTUP_MINUTES = {"Nemotron-3-Super-120B-A12B-BF16": 6.0, "Nemotron-3-Nano-30B-A3B-BF16": 3.0,
                   "Qwen3-Next-80B-A3B-Instruct": 4.0}


def fake_configs(folder: Path, scale: float, questions: int, latency: float, concurrency: int,
                 log: Path) -> tuple[Path, list[tuple[str, int, int]]]:
    """Write one fake config per H200 config; returns the list file and
    ``(config, variants, need)`` per config."""
    plan = build_plan(load_model_list(REPO / "model_lists" / "models-h200.txt"))
    shape, names = [], []
    for cp in plan.configs:
        need = variant_need(cp.variants[0].argv, cp.variants[0].id)
        start = STARTUP_MINUTES.get(cp.name, 4.0) * scale
        env = {"FAKE_MODE": f"slow_start:{start}", "FAKE_LATENCY": str(latency), "FAKE_DEVICES_LOG": str(log)}
        lines = []
        for vp in cp.variants:
            spec = ("{speculative_config: {method: mtp, num_speculative_tokens: 2}}"
                    if vp.speculative_config is not None else "{}")
            lines.append(f"  {vp.name}: {spec}")
        text = textwrap.dedent(f"""\
            name: {cp.name}
            model: fake-model
            server_args: "--tensor-parallel-size {need}"
            startup_max_wait_seconds: 120
            max_concurrency: {concurrency}
            env: {json.dumps(env)}
            tasks:
              gsm8k: {{kind: synthetic, num_questions: {questions}, num_fewshot: 1, max_tokens: 8}}
            variants:
            """) + "\n".join(lines) + "\n"
        (folder / f"{cp.name}.yaml").write_text(text)
        names.append(cp.name)
        shape.append((cp.name, len(cp.variants), need))
    lst = folder / "models.txt"
    lst.write_text("".join(n + ".yaml\n" for n in names))
    return lst, shape


def run_mode(lst: Path, folder: Path, log: Path, run_id: str, *extra: str) -> dict:
    """One evalrun process on the fake list; wall seconds and the servers' lifetimes."""
    log.unlink(missing_ok=True)
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "--config", str(lst), "--python", str(FAKE),
         "--results-dir", str(folder / "results"), "--run-id", run_id, "--quiet", "--no-baseline", *extra],
        cwd=REPO, capture_output=True, text=True, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": EIGHT},
    )
    wall = time.monotonic() - t0
    servers: dict[int, dict] = {}
    for line in log.read_text().splitlines():
        e = json.loads(line)
        servers.setdefault(e["pid"], {"devices": e["devices"]})[e["event"]] = e["t"]
    done = [s for s in servers.values() if "stop" in s]
    life = [(s["stop"] - s["start"], len((s["devices"] or "").split(","))) for s in done]
    gpu = sum(t * n for t, n in life)
    bound = max(gpu / 8, max(t for t, _ in life))
    span = max(s["stop"] for s in done) - min(s["start"] for s in done)  # first server start .. last stop
    return {"exit": out.returncode, "wall": wall, "span": span, "servers": len(life), "gpu_seconds": gpu,
            "lower_bound": bound, "ratio": wall / bound, "span_ratio": span / bound, "outside": wall - span,
            "stderr": out.stderr[-2000:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=2.0,
                    help="fake start-up seconds per real start-up minute (2: a 6-minute start-up takes 12 s, "
                         "so start-ups weigh against evalrun's fixed seconds about as on a node)")
    ap.add_argument("--questions", type=int, default=12, help="requests per variant")
    ap.add_argument("--latency", type=float, default=0.1, help="seconds per request")
    ap.add_argument("--concurrency", type=int, default=4, help="requests in flight per server")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="evalrun-gpu-bench-") as tmp:
        folder = Path(tmp)
        log = folder / "devices.jsonl"
        lst, shape = fake_configs(folder, a.scale, a.questions, a.latency, a.concurrency, log)
        print("shape of models-h200.txt on a simulated 8-GPU node (CUDA_VISIBLE_DEVICES=0,...,7), fake engine:")
        for name, nv, need in shape:
            print(f"  {name}: {nv} variants x {need} GPUs, start-up {STARTUP_MINUTES.get(name, 4.0) * a.scale:.1f} s "
                  f"(real ~{STARTUP_MINUTES.get(name, 4.0):.0f} min)")
        print(f"  requests: {a.questions} per variant, {a.latency} s each, {a.concurrency} in flight")
        res = {"sequential": run_mode(lst, folder, log, "seq", "--max-servers", "1"),
               "packed": run_mode(lst, folder, log, "packed")}
        for mode, r in res.items():
            print(f"{mode:>10}: exit {r['exit']}, {r['servers']} servers, {r['gpu_seconds']:.0f} GPU-s, "
                  f"lower bound {r['lower_bound']:.1f} s")
            print(f"{'':>10}  servers' span {r['span']:.1f} s = {r['span_ratio']:.2f}x the lower bound "
                  "(first server start .. last server stop)")
            print(f"{'':>10}  whole process {r['wall']:.1f} s = {r['ratio']:.2f}x the lower bound, of which "
                  f"{r['outside']:.1f} s outside any server (imports, pre-launch check, data, reports)")
            if r["exit"] not in (0, 1):
                print(r["stderr"], file=sys.stderr)
        print(f"packed / sequential: whole process {res['packed']['wall'] / res['sequential']['wall']:.2f}, "
              f"servers' span {res['packed']['span'] / res['sequential']['span']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
