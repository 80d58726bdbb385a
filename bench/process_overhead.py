#!/usr/bin/env python3
"""Process-overhead benchmark: one whole ``evalrun`` process against vLLM's GSM8K script,
side by side on the stub server (bench/stub_server.py), in one run. Not a test: it prints
measurements and the ratio, never pass/fail.

Run from the repository root with the project's venv::

    .venv/bin/python bench/process_overhead.py --data-dir DATA/gsm8k [--repeats 2] [--latency-ms 500] \
        [--check instant|real] [--no-preflight-cache]

What is timed (wall seconds of the whole process, start to exit, medians over
``--repeats`` interleaved runs):

* ``evalrun``: ``python -m harness.cli --config <one variant, GSM8K 1319 questions, 5-shot>
  --python <stub wrapper>``: the real CLI, pre-launch check (``--check``), the server
  lifecycle (the stub is started as the server), 1319 requests at once, judging, statistics, the run record and every report.
* ``vllm-script``: a script doing what vLLM's ``tests/evals/gsm8k/gsm8k_eval.py`` does in
  its process: import its modules, read the GSM8K test and train files, build the 5-shot
  prompts, send every question at once with aiohttp + ``tqdm.asyncio.gather``, score by the
  last integer, print the accuracy. Its server is started before the clock (the script
  expects a running server), so evalrun's column includes a stub start-up the other does not.

``--check instant`` answers the pre-launch check at once (an interpreter with vLLM
imported already); ``--check real`` (default) runs it with the installed vLLM's parser
(about 11 s). ``--no-preflight-cache`` makes every evalrun run check (nothing cached).
Results and how they were taken: docs/benchmarks.md ("The whole process against vLLM's
script").

``--profile DIR`` also writes ``DIR/evalrun.prof`` (cProfile of the evalrun process) and
``DIR/importtime.txt`` (``python -X importtime``), to see where the fixed work goes.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STUB = REPO / "bench" / "stub_server.py"

VLLM_SCRIPT = r'''
import ast, asyncio, json, sys, time
import aiohttp, numpy as np, regex as re
from tqdm.asyncio import tqdm

url, data_dir, shots = sys.argv[1], sys.argv[2], 5
def load(p):
    return [json.loads(l) for l in open(p)]
train, test = load(f"{data_dir}/train.jsonl"), load(f"{data_dir}/test.jsonl")
few = "".join(f"Question: {x['question']}\nAnswer: {x['answer']}\n\n" for x in train[:shots])
prompts = [few + f"Question: {x['question']}\nAnswer:" for x in test]
labels = [int(x["answer"].split("####")[-1].strip().replace(",", "")) for x in test]

def value(s):
    nums = re.findall(r"\d+", s.replace(",", ""))
    try:
        return ast.literal_eval(nums[-1]) if nums else -9999999
    except SyntaxError:
        return -9999999

async def call(session, prompt):
    data = {"prompt": prompt, "max_tokens": 256, "stop": ["Question", "Assistant:", "<|separator|>"],
            "temperature": 0.0, "seed": 42}
    async with session.post(f"{url}/v1/completions", json=data) as r:
        r.raise_for_status()
        return (await r.json())["choices"][0]["text"]

async def main():
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as s:
        return await tqdm.gather(*[call(s, p) for p in prompts], desc="Evaluating")

t0 = time.time()
answers = asyncio.run(main())
acc = float(np.mean([value(a) == y for a, y in zip(answers, labels)]))
print(json.dumps({"accuracy": acc, "latency": time.time() - t0, "num_questions": len(prompts)}))
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: Answers the pre-launch check at once, every command accepted (``--check instant``):
#: what the check costs when the servers' interpreter has vLLM already imported.
INSTANT_CHECK = r'''
import json, sys
items = json.load(sys.stdin)
print("EVALRUN_PREFLIGHT " + json.dumps({"python": sys.executable, "version": "stub", "import_error": None,
      "results": [{"id": it["id"], "ok": True, "error": None} for it in items]}), flush=True)
'''


def stub_wrapper(tmp: Path, check: str) -> Path:
    """An executable that stands in for the servers' interpreter: a probe run by path
    (``harness/engine/probes/*.py``: the engine-build probe; the pre-launch check with
    ``check`` ``real``) goes to this Python, which has vLLM; with ``check`` ``instant`` the
    pre-launch check (``server_args.py``) is answered at once (:data:`INSTANT_CHECK`);
    anything else starts the stub server."""
    answer = tmp / "instant_check.py"
    answer.write_text(INSTANT_CHECK)
    w = tmp / "python-stub"
    instant = (f'case "$1" in */probes/server_args.py) exec {sys.executable} {answer} ;; esac'
               if check == "instant" else "")
    w.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$1" in */probes/*.py)
        {instant}
        exec {sys.executable} "$@";; esac
        exec {sys.executable} {STUB} "$@"
        """))
    w.chmod(0o755)
    return w


def config(tmp: Path, data_dir: Path) -> Path:
    p = tmp / "overhead.yaml"
    p.write_text(textwrap.dedent("""\
        name: overhead
        model: stub-model
        startup_max_wait_seconds: 60
        max_concurrency: 2000
        variants:
          reference: {}
        tasks:
          gsm8k: {kind: gsm8k, num_fewshot: 5, max_tokens: 256}
        """))
    return p


def run_evalrun(tmp: Path, cfg: Path, wrapper: Path, data_dir: Path, k: int, env: dict,
                prefix: list[str] | None = None, cache: bool = True) -> float:
    cmd = [*(prefix or [sys.executable]), "-m", "harness.cli", "--config", str(cfg), "--python", str(wrapper),
           "--results-dir", str(tmp / "results"), "--data-dir", str(data_dir), "--run-id", f"r{k}",
           "--quiet", "--no-baseline", *([] if cache else ["--no-preflight-cache"])]
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - t0
    rec = tmp / "results" / f"r{k}" / "run.json"
    ran = rec.exists() and '"num_requests": 1319' in rec.read_text()
    if not ran:
        sys.exit(f"evalrun did not run the 1319 requests (exit {r.returncode}):\n{r.stderr[-3000:]}")
    CACHED[k] = bool((json.loads(rec.read_text()).get("preflight") or {}).get("cached"))
    return wall


#: run index -> whether its pre-launch check's all-clear came from the cache.
CACHED: dict[int, bool] = {}


def run_vllm(script: Path, url: str, data_dir: Path, env: dict) -> float:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(script), url, str(data_dir)], capture_output=True, text=True, env=env, check=False)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f"the vLLM-style script failed:\n{r.stderr[-3000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, required=True, help="folder with GSM8K test.jsonl and train.jsonl")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--latency-ms", type=float, default=500.0)
    ap.add_argument("--profile", type=Path, default=None, metavar="DIR")
    ap.add_argument("--check", choices=("real", "instant"), default="real",
                    help="the pre-launch check: the installed vLLM's parser (real), or answered at once (instant)")
    ap.add_argument("--no-preflight-cache", action="store_true",
                    help="every evalrun run checks (passes --no-preflight-cache): nothing cached")
    a = ap.parse_args()
    data_dir = a.data_dir.resolve()
    env = {**os.environ, "STUB_LATENCY_MS": str(a.latency_ms), "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        wrapper, cfg = stub_wrapper(tmp, a.check), config(tmp, data_dir)
        script = tmp / "gsm8k_like.py"
        script.write_text(VLLM_SCRIPT)
        port = free_port()
        stub = subprocess.Popen([sys.executable, str(STUB), "--port", str(port)], env=env)
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    time.sleep(0.1)
            ev, vl = [], []
            for k in range(a.repeats):
                vl.append(run_vllm(script, url, data_dir, env))
                ev.append(run_evalrun(tmp, cfg, wrapper, data_dir, k, env, cache=not a.no_preflight_cache))
            if a.profile:
                a.profile.mkdir(parents=True, exist_ok=True)
                run_evalrun(tmp, cfg, wrapper, data_dir, 900, env,
                            [sys.executable, "-m", "cProfile", "-o", str(a.profile / "evalrun.prof")],
                            cache=not a.no_preflight_cache)
                r = subprocess.run([sys.executable, "-X", "importtime", "-c", "import harness.cli, harness.run.runner"],
                                   cwd=REPO, env=env, capture_output=True, text=True, check=False)
                (a.profile / "importtime.txt").write_text(r.stderr)
        finally:
            stub.terminate()
            stub.wait(10)
    e, v = statistics.median(ev), statistics.median(vl)
    print(f"stub latency {a.latency_ms:g} ms, 1319 GSM8K questions, 5-shot, one variant, {a.repeats} repeat(s), "
          f"pre-launch check {a.check}" + (", --no-preflight-cache" if a.no_preflight_cache else ""))
    print(f"evalrun (whole process)     {e:6.2f} s   runs: "
          + ", ".join(f"{x:.2f}" + (" (pre-launch check cached)" if CACHED.get(k) else " (pre-launch check ran)")
                      for k, x in enumerate(ev)))
    print(f"vLLM-style gsm8k script     {v:6.2f} s   runs: {', '.join(f'{x:.2f}' for x in vl)}")
    print(f"ratio evalrun / vLLM script {e / v:6.2f}   (goal: <= 1.3)")


if __name__ == "__main__":
    main()
