"""Runs of evalrun on the FAKE server (tests/fake_vllm.py), shared by the tests of several
stages: a two-variant config, the command line that runs it, and the check that every server
it started is gone. The fake stands in for the engine only where a test needs a condition the
real one cannot produce on demand (malformed answers, a raise in a chosen stage, a full disk).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import psutil

from harness.cli import main
from harness.engine.server import processes

FAKE = Path(__file__).resolve().parent / "fake_vllm.py"
REPO = Path(__file__).resolve().parents[1]


def config(tmp_path: Path, ref_env: dict | None = None, spec_env: dict | None = None, n: int = 6,
           gates: str = "", budget: str = "null") -> Path:
    """A two-variant config (reference, spec) on the fake with one synthetic task of ``n``
    questions; each variant's ``env`` chooses the fake's behaviour. Returns its path.
    ``budget``: its ``false_alarm_budget``, off by default here: on 6 questions no paired
    test can reach a share of the budget (every accuracy gate would be report-only), and
    these tests are of the orchestration around verdicts, judged by the limits."""
    text = textwrap.dedent(
        f"""\
        model: fake-model
        false_alarm_budget: {budget}
        startup_max_wait_seconds: 30
        request_timeout_seconds: 30
        max_concurrency: 2
        variants:
          reference:
            env: {json.dumps(ref_env or {"FAKE_MODE": "ok"})}
          spec:
            speculative_config: {{method: mtp, num_speculative_tokens: 2}}
            env: {json.dumps(spec_env or {"FAKE_MODE": "ok"})}
        tasks:
          gsm8k: {{kind: synthetic, num_questions: {n}, num_fewshot: 1, max_tokens: 8}}
        comparisons:
          - {{baseline: reference, candidate: spec}}
        {gates}"""
    )
    p = tmp_path / "fake.yaml"
    p.write_text(text)
    return p


def run_cli(tmp_path: Path, cfg: Path, *extra: str) -> int:
    """``evalrun`` on ``cfg`` with the fake as the engine, run id ``r`` under ``tmp_path/results``;
    its exit code."""
    return main(["--config", str(cfg), "--python", str(FAKE), "--results-dir", str(tmp_path / "results"),
                 "--run-id", "r", "--quiet", "--no-baseline", *extra])


def servers_gone(rec: dict) -> bool:
    """No server process evalrun started is alive (exited, or a zombie awaiting its parent)."""
    for v in rec["configs"][0]["variants"].values():
        pid = (v.get("server") or {}).get("pid")
        if pid is None or not psutil.pid_exists(pid):
            continue
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return not processes().unstopped() and not [s for s in processes().live_servers() if s.alive()]
