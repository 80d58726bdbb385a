"""Traffic shapes on the REAL vLLM CPU engine: one server (the trained tiny hybrid, MTP
with 2 speculative tokens, evalrun's ``spec-prompt-edge`` fault), the prompt-edges shape
and a small prefix-reuse shape that the CPU engine cannot produce (NOT RUN).

What only the real engine can show: the token-id prompts arrive untokenised and exact
(``vllm:prompt_tokens`` grows by exactly the sum of the shape's lengths, computed here
from the edges),
the shape's proof passes from the engine's own counters, and the fault's patched code
changes the accepted counts of the ``num_speculative_tokens + 1`` prompts (the
plugin's counters). Whether the gates catch it is the self-check's job
(configs/selfcheck-cpu.yaml, docs/FAULTS.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import vllm_available

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]

CONFIG = """\
name: shapes-cpu
model: builtin:tiny-qwen3next-mtp-arith
server_args: --dtype bfloat16 --max-model-len 2048 --no-enable-prefix-caching --enforce-eager
env: {VLLM_CPU_KVCACHE_SPACE: 1}
startup_max_wait_seconds: 600
max_concurrency: 8
variants:
  spec_prompt_edge:
    speculative_config: {method: mtp, num_speculative_tokens: 2}
    async_scheduling: false
    fault: spec-prompt-edge
tasks:
  edges:
    kind: shape
    shape: {kind: prompt_edges, speculative_tokens: [2], block_size: 256, prompts_per_length: 2}
    max_tokens: 16
  prefix:
    kind: shape
    shape: {kind: prefix_reuse, prefix_tokens: 64, prompt_tokens: 80, prompts: 2}
    max_tokens: 4
gates: {accuracy_threshold: null, min_acceptance_length: null}
"""


def test_a_shape_is_exact_in_tokens_and_proven_by_the_engines_counters(tmp_path):
    if not vllm_available():
        pytest.skip("vLLM is not installed in this interpreter")
    cfg = tmp_path / "shapes-cpu.yaml"
    cfg.write_text(CONFIG)
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "--config", str(cfg), "--results-dir", str(out),
                           "--run-id", "r", "--no-baseline"], cwd=REPO, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    run = out / "r" / "run.json"
    assert run.is_file(), proc.stderr[-4000:]
    rec = json.loads(run.read_text())
    v = rec["configs"][0]["variants"]["spec_prompt_edge"]
    t = v["tasks"]["edges"]
    # lengths edge + offset for edges 3 and 256 (the hybrid's block on vllm-cpu 0.32, which
    # the proof checks against /server_info), offsets -1, 0, +1, two prompts each
    want = 2 * sum(e + o for e in (3, 256) for o in (-1, 0, 1))
    assert v["engine"]["block_size"] == 256
    assert t["shape"]["prompt_tokens_sent"] == want
    assert t["engine_counters"]["prompt_tokens"] == want, t["engine_counters"]
    assert t["engine_counters"]["generation_tokens"] > 0 and t["shape"]["problems"] == []
    gates = {g["id"].split("/", 2)[2]: g for g in rec["configs"][0]["gates"]}
    assert gates["edges/shape_proven"]["verdict"] == "PASS", gates["edges/shape_proven"]["detail"]
    counts = v["plugin"]["counts"]
    assert counts.get("spec-prompt-edge.changed", 0) > 0 and v["plugin"]["exercised"] is True, counts
    # prefix reuse cannot happen here (--no-enable-prefix-caching, as every CPU config with
    # a GDN hybrid and MTP): the engine's own /server_info says so, and every gate of the
    # task is NOT RUN with that reason, never passed
    assert v["engine"]["enable_prefix_caching"] is False
    prefix = {k: g for k, g in gates.items() if k.startswith("prefix/")}
    assert prefix and all(g["verdict"] == "NOT RUN" for g in prefix.values()), prefix
    assert prefix["prefix/shape_proven"]["detail"].startswith(
        "not run: prefix caching is off on shapes-cpu/spec_prompt_edge: enable_prefix_caching false in /server_info")
    assert v["tasks"]["prefix"]["engine_counters"]["prefix_cache_hits"] == 0
    assert rec["passed"] is None
