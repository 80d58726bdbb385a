#!/usr/bin/env python3
"""What asking for top-k log-probabilities costs the reference, and whether it changes greedy output.

Not a test: it prints measurements, never pass/fail (the engine test
``tests/e2e/test_divergence_engine.py`` asserts the token ids). One server of the CPU
list's ``reference`` variant (the trained tiny hybrid) answers the same tasks in
alternating passes without and with ``logprobs: k`` (``return_tokens_as_token_ids``),
so both sides see the same warm server and the same load. Run from the repository
root, on a shared machine under the engine lock::

    flock /tmp/evalrun-engine.lock python bench/logprobs_cost.py --data-dir DIR

Prints per pass the request-phase wall seconds, per side the median, the ratio
with / without, the completions whose token ids differ between the sides (expected:
none), and the reference's top two log-probabilities at ``--show`` (a question id).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/tiny-qwen3next-mtp-cpu.yaml")
    ap.add_argument("--variant", default="reference")
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--k", type=int, default=5, help="top-k log-probabilities asked for (default 5)")
    ap.add_argument("--passes", type=int, default=3, help="passes per side, alternating (default 3)")
    ap.add_argument("--show", default="gsm8k/test/2", help="question whose top-2 gaps are printed")
    ap.add_argument("--json", type=Path, default=None, help="also write the measurements here")
    a = ap.parse_args(argv)

    from harness.config.loader import load_config
    from harness.config.plan import build_plan
    from harness.engine.session import VariantSession
    from harness.models.resolve import resolve_model
    from harness.report.progress import Progress
    from harness.tasks import prepare_task

    cfg = load_config(Path(a.config))
    plan = build_plan([cfg])
    vp = next(v for v in plan.configs[0].variants if v.name == a.variant)
    model = resolve_model(cfg.model, Progress())
    argv_ = [model if x == cfg.model else x for x in vp.argv]
    tasks = {}
    for t in plan.configs[0].tasks:
        try:
            tasks[t.name] = (t, prepare_task(t.name, t.spec, a.data_dir, False, base_dir=Path(cfg.path).parent))
        except Exception as e:  # noqa: BLE001 - an optional task without data is left out, said
            print(f"task {t.name}: left out: {e}", file=sys.stderr)
    log = Path(tempfile.mkdtemp(prefix="evalrun-logprobs-")) / "server.log"
    times: dict[str, list[float]] = {"without": [], "with": []}
    ids: dict[tuple[str, str], dict[str, tuple]] = {}
    tops: dict[str, tuple] = {}
    with VariantSession(vp.id, argv_, dict(vp.env), log, cfg.startup_max_wait_seconds,
                        cfg.request_timeout_seconds, cfg.max_concurrency, speculative=False) as s:
        for i in range(a.passes):
            for side in ("without", "with"):
                total = 0.0
                for name, (t, pt) in tasks.items():
                    out = s.run_task(pt.requests, t.spec.max_tokens, t.spec.temperature, t.spec.seed, pt.stop,
                                     logprobs=a.k if side == "with" else None)
                    total += out.seconds
                    bad = [c.error for c in out.completions if c.error]
                    if bad:
                        print(f"{side} pass {i}: {len(bad)} errors, e.g. {bad[0]}", file=sys.stderr)
                        return 2
                    for c in out.completions:
                        ids.setdefault((side, c.request_id), {})[i] = c.token_ids
                        if c.top_logprobs is not None:
                            tops[c.request_id] = c.top_logprobs
                times[side].append(total)
                print(f"pass {i} {side:7s} logprobs: {total:.2f} s", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    qids = sorted({q for _, q in ids})
    differ = [q for q in qids if len({v for side in ("without", "with") for v in ids[(side, q)].values()}) > 1]
    print(f"median without {med['without']:.2f} s, with k={a.k} {med['with']:.2f} s: "
          f"ratio {med['with'] / med['without']:.3f}")
    print(f"questions: {len(qids)}; token ids differing across passes or sides: {len(differ)} {differ[:10]}")
    gaps = []
    if a.show in tops:
        for pos in tops[a.show]:
            gaps.append(round(pos[0][1] - pos[1][1], 3) if len(pos) > 1 else None)
        print(f"{a.show}: top-1 minus top-2 log-probability per position (nats): {gaps}")
    if a.json:
        a.json.write_text(json.dumps({"times": times, "median": med, "k": a.k, "questions": len(qids),
                                      "differ": differ, "gaps": {a.show: gaps}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
