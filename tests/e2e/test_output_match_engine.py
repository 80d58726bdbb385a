"""Output match against noise on the REAL vLLM CPU engine: the state-corruption fault
(``fault: state-rollback``, evalrun's vLLM plugin) still fails the output-match gate
under the rule the vLLM form now uses by default (the baseline rerun as the noise
reference, test at alpha 0.001), and answer-level agreement is reported beside it.
The benign direction (15% token-level noise passes) needs GPU-like numerics, which the
CPU engine does not have: tests/analysis/test_output_match_noise.py uses a fake server for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ..conftest import vllm_available

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]


def test_state_rollback_fails_output_match_against_noise(tmp_path):
    if not vllm_available():
        pytest.skip("vLLM is not installed in this interpreter")
    cfg = tmp_path / "rollback-noise.yaml"
    cfg.write_text(textwrap.dedent("""\
        model: builtin:tiny-qwen3next-mtp-arith
        server_args: --dtype bfloat16 --max-model-len 2048 --no-enable-prefix-caching --enforce-eager
        env: {VLLM_CPU_KVCACHE_SPACE: 1}
        startup_max_wait_seconds: 600
        variants:
          reference: {}
          spec_state_rollback:
            speculative_config: {method: mtp, num_speculative_tokens: 2}
            async_scheduling: false
            fault: state-rollback
        tasks:
          arith: {kind: synthetic, num_questions: 40, num_fewshot: 3, max_tokens: 32}
        comparisons:
          - {baseline: reference, candidate: spec_state_rollback, noise_runs: 2, output_match_alpha: 0.001,
             max_accuracy_drop: null}
        """))
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "--config", str(cfg), "--results-dir", str(out),
                           "--run-id", "r", "--no-baseline"], cwd=REPO, capture_output=True, text=True,
                          timeout=3000, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    rec_path = out / "r" / "run.json"
    assert rec_path.is_file(), proc.stderr[-4000:]
    rec = json.loads(rec_path.read_text())
    c = rec["configs"][0]
    comp = c["comparisons"][0]
    # recompute output match from the samples on disk (independent of the harness)
    def ids(path):
        return {s["question_id"]: s["token_ids"] for s in map(json.loads, (out / "r" / path).read_text().splitlines())}
    ref = ids(c["variants"]["reference"]["tasks"]["arith"]["samples"])
    rerun = ids(c["variants"]["reference"]["tasks"]["arith"]["rerun"]["samples"])
    cand = ids(c["variants"]["spec_state_rollback"]["tasks"]["arith"]["samples"])
    same = sum(ref[q] == cand[q] for q in ref)
    noise = sum(ref[q] != rerun[q] for q in ref)
    assert comp["matched"] == same and comp["noise"]["noise_mismatched"] == noise
    assert same < len(ref)  # the fault changes outputs
    gate = next(g for g in c["gates"] if g["kind"] == "min_output_match")
    print(f"\noutput match {same}/{len(ref)}, reference rerun mismatches {noise}/{len(ref)}, "
          f"answer agreement {comp['answer_agreement']['agreed']}/{comp['answer_agreement']['compared']}; "
          f"gate: {gate['detail']}")
    assert gate["passed"] is False, gate["detail"]
    assert "answer-level agreement" in gate["detail"]
    assert comp["answer_agreement"]["compared"] == len(ref)
    assert proc.returncode == 1
