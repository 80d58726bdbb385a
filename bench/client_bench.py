#!/usr/bin/env python3
"""Client benchmark: evalrun's request phase side by side with vLLM's own GSM8K client
and lm-eval's ``local-completions``, on one stub server (bench/stub_server.py).

Not a test: it prints measurements and ratios, never pass/fail. Run from the
repository root with the project's venv, on cores as quiet as you can get them::

    .venv/bin/python bench/client_bench.py --data-dir DIR

What is compared, on the same 1319 GSM8K 5-shot prompts (evalrun's prompts):

* ``evalrun``: :class:`harness.engine.session.VariantSession` (its server lifecycle
  starts the stub; start-up is not timed) ``run_task`` with the runner's progress bar
  (``--progress``: the rich bar as at a terminal, drawn into /dev/null as vLLM's tqdm bar
  is here) + the task stage's ``judge_completions``: exactly the request phase of a
  run, at ``--concurrency``.
* ``vllm-client``: vLLM's ``tests/evals/gsm8k/gsm8k_eval.py`` request loop. That file is
  not part of the installed ``vllm`` package, so its loop is REIMPLEMENTED here as it
  reads: one ``aiohttp.ClientSession(timeout=ClientTimeout(total=600))`` with its
  default connector (aiohttp's limit: 100 connections) unless ``--max-concurrency``
  is given, every question gathered at once with ``tqdm.asyncio.tqdm.gather``, the
  body ``{prompt, max_tokens, stop, temperature, seed}``, and its scoring (last
  integer of the text). Pass ``--vllm-src DIR`` (a vLLM checkout) to import the real
  ``call_vllm_api`` from ``DIR/tests/evals/gsm8k/gsm8k_eval.py`` instead.
* ``lm-eval``: ``lm_eval.models.openai_completions.LocalCompletionsAPI`` (the
  ``local-completions`` model) ``generate_until`` with ``num_concurrent`` =
  ``--concurrency``, skipped when lm-eval is not installed (``pip install lm-eval``).

Measured per client: request-phase wall seconds and client CPU seconds (this process's
user + system time, ``time.process_time``; the stub runs in other processes), timed as
vLLM's client times its own ``latency`` (the requests only); then the CPU of scoring the
answers (evalrun: both pipelines and the samples; vLLM: its last-integer rule; lm-eval:
its flexible-extract regex), shown added per request, medians over ``--repeats`` interleaved runs. Every client's modules are imported before the clocks start.
``--stall-runs N`` then repeats evalrun's request phase N
times at ``--stall-concurrency`` in flight with a 60 s request timeout and counts runs
in which any request needed a retry or took longer than 10 s (a stall).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.config.schema import TaskSpec  # noqa: E402
from harness.engine.server import free_port  # noqa: E402
from harness.tasks import prepare_task  # noqa: E402

STUB = REPO / "bench" / "stub_server.py"
STOP = ["Question", "Assistant:", "<|separator|>"]


def start_stub(latency_ms: float) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "STUB_LATENCY_MS": str(latency_ms)}
    proc = subprocess.Popen([sys.executable, str(STUB), "--port", str(port)], env=env)
    import httpx

    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("stub server did not start")


def measure(fn) -> tuple[float, float, object]:
    """(wall seconds, this process's CPU seconds, fn's result) of one call."""
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


def with_scoring(phase, score) -> tuple[float, float, float, object]:
    """Request phase timed like vLLM's client times its ``latency`` (the requests only),
    then scoring: (wall s, request-phase CPU s, scoring CPU s, scored result)."""
    wall, cpu, out = measure(phase)
    _, cpu_score, scored = measure(lambda: score(out))
    return wall, cpu, cpu_score, scored


# ------------------------------------------------------------------ evalrun


def evalrun_progress(mode: str):
    """evalrun's progress as a run shows it: ``terminal`` = the rich bar (drawn into
    /dev/null as if stderr were a terminal), ``log`` = plain lines (CI), ``none``."""
    if mode == "none":
        return None
    from rich.console import Console

    from harness.report.progress import Progress

    return Progress(Console(file=open(os.devnull, "w"), force_terminal=mode == "terminal", width=120))


def run_evalrun(requests, latency_ms: float, concurrency: int, timeout: float = 600, progress: str = "terminal"):
    from harness.engine.session import VariantSession
    from harness.tasks.judging import judge_completions

    log = Path(tempfile.mkdtemp()) / "stub.log"
    argv = [sys.executable, str(STUB), "--port", "{port}"]
    sess = VariantSession("bench/evalrun", argv, {"STUB_LATENCY_MS": str(latency_ms)}, log,
                          startup_timeout=60, request_timeout=timeout, max_concurrency=concurrency,
                          speculative=False)
    prog = evalrun_progress(progress)

    def phase():  # as the runner does: a bar per task, advanced by every completion
        bar = prog.bar("bench/evalrun gsm8k", len(requests)) if prog else None
        try:
            return sess.run_task(requests, max_tokens=256, temperature=0.0, seed=42, stop=STOP,
                                 on_done=(lambda c: bar.advance(c.ok)) if bar else None)
        finally:
            if bar:
                bar.close()

    with sess:
        return with_scoring(
            phase, lambda out: (out, judge_completions("bench", "reference", "gsm8k", requests, out.completions)))


# ------------------------------------------------------------------ vLLM's client


def run_vllm_client(prompts, url: str, max_concurrency: int | None, vllm_src: str | None):
    import ast

    import aiohttp
    import regex as re
    from tqdm.asyncio import tqdm

    if vllm_src:
        sys.path.insert(0, str(Path(vllm_src) / "tests" / "evals" / "gsm8k"))
        from gsm8k_eval import call_vllm_api  # the real request function
    else:
        async def call_vllm_api(session, prompt, temperature, max_tokens, stop=None, url=None, seed=None):
            data = {"prompt": prompt, "max_tokens": max_tokens, "stop": stop}
            data.update({k: v for k, v in dict(temperature=temperature, seed=seed).items() if v is not None})
            try:
                async with session.post(f"{url}/v1/completions", json=data) as response:
                    response.raise_for_status()
                    result = await response.json()
                    return result["choices"][0]["text"], result.get("usage", {}).get("completion_tokens", 0)
            except Exception as e:  # noqa: BLE001 - as vLLM's client does
                print(f"Error calling vLLM API ({type(e).__name__}): {e}")
                return "", 0

    states = [""] * len(prompts)

    def answer_value(s: str) -> int:
        nums = re.findall(r"\d+", s.replace(",", ""))
        if not nums:
            return -9999999
        try:
            return ast.literal_eval(nums[-1])
        except SyntaxError:
            return -9999999

    async def main():
        async def get_answer(session, i):
            ans, _ = await call_vllm_api(session=session, prompt=prompts[i], temperature=0.0, max_tokens=256,
                                         stop=STOP, url=url, seed=42)
            states[i] = ans
            return ans

        timeout = aiohttp.ClientTimeout(total=600)
        connector = aiohttp.TCPConnector(limit=max_concurrency) if max_concurrency is not None else None
        with open(os.devnull, "w") as devnull:
            async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
                await tqdm.gather(*[get_answer(session, i) for i in range(len(prompts))], desc="Evaluating",
                                  file=devnull)

    return with_scoring(lambda: asyncio.run(main()), lambda _: [answer_value(s) for s in states])


# ------------------------------------------------------------------ lm-eval


def run_lm_eval(prompts, url: str, concurrency: int):
    try:
        from lm_eval.api.instance import Instance
        from lm_eval.models.openai_completions import LocalCompletionsAPI
    except ImportError as e:
        return None, f"not installed ({e})"
    lm = LocalCompletionsAPI(base_url=f"{url}/v1/completions", model="stub", num_concurrent=concurrency,
                             tokenizer_backend=None, tokenized_requests=False, max_retries=1, timeout=600)
    gen = {"until": STOP, "max_gen_toks": 256, "do_sample": False, "temperature": 0.0}
    reqs = [Instance(request_type="generate_until", doc={}, arguments=(p, gen), idx=i) for i, p in enumerate(prompts)]
    import re as _re

    def score(texts):  # lm-eval's gsm8k flexible-extract: the last number
        return [(_re.findall(r"(-?[$0-9.,]{2,})|(-?[0-9]+)", t) or [None])[-1] for t in texts]

    def phase():  # its request bar ignores disable_tqdm: drawn into /dev/null, as vLLM's is here
        with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):
            return lm.generate_until(reqs, disable_tqdm=True)

    return with_scoring(phase, score), None


# ------------------------------------------------------------------ main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, required=True, help="GSM8K folder (test.jsonl, train.jsonl)")
    ap.add_argument("--latency-ms", type=float, nargs="+", default=[500.0, 0.0],
                    help="stub latencies to measure (default: 500 0)")
    ap.add_argument("--concurrency", type=int, default=100,
                    help="evalrun max_concurrency and lm-eval num_concurrent (default 100 = vLLM's client default)")
    ap.add_argument("--vllm-max-concurrency", type=int, default=None,
                    help="vLLM client's --max-concurrency (default: not given, as vLLM's test runs it)")
    ap.add_argument("--vllm-src", default=None, help="a vLLM checkout: import its real call_vllm_api")
    ap.add_argument("--repeats", type=int, default=5, help="runs per client and latency; medians are shown")
    ap.add_argument("--no-lm-eval", action="store_true", help="skip lm-eval")
    ap.add_argument("--progress", choices=["terminal", "log", "none"], default="terminal",
                    help="evalrun's progress during its request phase, as a run shows it: the rich bar at a "
                         "terminal (default; drawn into /dev/null, as vLLM's client draws its tqdm bar), plain "
                         "lines as in CI logs, or none")
    ap.add_argument("--stall-runs", type=int, default=0, help="repeat evalrun's request phase N times for stalls")
    ap.add_argument("--stall-concurrency", type=int, default=256)
    args = ap.parse_args()

    # every client's modules are imported before any clock runs (import time is start-up,
    # not request phase; evalrun imports aiohttp lazily, on its first request)
    import aiohttp  # noqa: F401
    import regex  # noqa: F401
    import tqdm.asyncio  # noqa: F401

    import harness.engine.session
    import harness.report.progress
    try:
        import uvloop  # noqa: F401  (evalrun's event loop where installed; imported on the first task)
    except ImportError:
        pass
    import harness.tasks.judging  # noqa: F401
    if not args.no_lm_eval:
        try:
            import lm_eval.models.openai_completions  # noqa: F401
        except ImportError:
            pass
    pt = prepare_task("gsm8k", TaskSpec(kind="gsm8k", num_questions=1319, num_fewshot=5), args.data_dir)
    requests = pt.requests
    prompts = [r.prompt for r in requests]
    n = len(prompts)
    print(f"{n} GSM8K prompts (5-shot); load average {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores")
    import statistics

    for lat in args.latency_ms:
        runs: dict[str, list[tuple[float, float, float]]] = {}
        errs = 0
        for _ in range(args.repeats):  # clients interleaved, so slow phases of the machine hit all
            wall, cpu, cpu_s, (out, samples) = run_evalrun(requests, lat, args.concurrency, progress=args.progress)
            errs += sum(1 for s in samples if not s.ok)
            runs.setdefault("evalrun", []).append((wall, cpu, cpu_s))
            stub, url = start_stub(lat)
            try:
                wall, cpu, cpu_s, _ = run_vllm_client(prompts, url, args.vllm_max_concurrency, args.vllm_src)
                runs.setdefault("vllm-client", []).append((wall, cpu, cpu_s))
                if not args.no_lm_eval:
                    res, why = run_lm_eval(prompts, url, args.concurrency)
                    if res is None:
                        print(f"lm-eval: {why}")
                    else:
                        runs.setdefault("lm-eval local-completions", []).append(res[:3])
            finally:
                stub.terminate()
                stub.wait(10)
        rows = {k: tuple(statistics.median(x[i] for x in v) for i in range(3)) for k, v in runs.items()}
        print(f"\nstub latency {lat:g} ms, evalrun max_concurrency {args.concurrency} (progress: {args.progress}), "
              f"vLLM client max_concurrency {args.vllm_max_concurrency or 'default (100)'}; "
              f"median of {args.repeats} runs; evalrun errors {errs}; load average {os.getloadavg()[0]:.2f}")
        print("request phase = the requests only, as vLLM's client times its 'latency'; scoring after it")
        print(f"{'client':28} {'wall s':>7} {'cpu s':>6} {'cpu ms/req':>10} {'+scoring ms/req':>15} "
              f"{'wall/vllm':>9} {'cpu/vllm':>8} {'cpu+scoring/vllm':>16}")
        vw, vc, vs = rows["vllm-client"]
        for name, (w, c, sc) in rows.items():
            print(f"{name:28} {w:7.2f} {c:6.2f} {1000 * c / n:10.3f} {1000 * (c + sc) / n:15.3f} "
                  f"{w / vw:9.2f} {c / vc:8.2f} {(c + sc) / (vc + vs):16.2f}")
    if args.stall_runs:
        stalls = 0
        for i in range(args.stall_runs):
            wall, cpu, _, (out, samples) = run_evalrun(requests, args.latency_ms[0], args.stall_concurrency, timeout=60,
                                                       progress="none")
            slow = [c for c in out.completions if c.attempts > 1 or c.latency_s > 10]
            stalls += bool(slow)
            print(f"stall run {i + 1}: {wall:.2f} s, {len(slow)} slow or retried requests")
        print(f"\n{stalls} of {args.stall_runs} runs stalled at {args.stall_concurrency} in flight "
              f"(stub latency {args.latency_ms[0]:g} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
