"""A vLLM-form config, with the speculative config written as dotted sub-keys, run on
the REAL vLLM CPU engine with the command vLLM's GSM8K test builds
(``--trust-remote-code --disable-uvicorn-access-log ... --seed 0``,
``VLLM_WORKER_MULTIPROC_METHOD=spawn``, ``VLLM_ENGINE_READY_TIMEOUT_S``): all three
derived variants start, and the engine's effective configuration is what was asked."""

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


def test_vllm_form_dotted_spec_config_runs_three_variants(tmp_path, gsm8k_dir):
    if not vllm_available():
        pytest.skip("vLLM is not installed in this interpreter")
    cfg = tmp_path / "Tiny-dotted-MTP.yaml"
    cfg.write_text(textwrap.dedent("""\
        model_name: builtin:tiny-qwen3next-mtp-arith
        accuracy_threshold: 0.0
        num_questions: 6
        num_fewshot: 2
        max_tokens: 48
        startup_max_wait_seconds: 600
        max_concurrency: 6
        env: {VLLM_CPU_KVCACHE_SPACE: 1}
        server_args: >-
          --dtype bfloat16 --max-model-len 2048 --no-enable-prefix-caching --enforce-eager
          --speculative_config.method mtp --speculative_config.num_speculative_tokens=2
        evalrun: {noise_runs: 1, min_output_match: 0.5}  # output match is not what this test checks
        """))
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "--config", str(cfg), "--results-dir", str(out),
                           "--run-id", "r", "--no-baseline", "--data-dir", str(gsm8k_dir)],
                          cwd=REPO, capture_output=True, text=True, timeout=2400,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    rec_path = out / "r" / "run.json"
    assert rec_path.is_file(), proc.stderr[-4000:]
    c = json.loads(rec_path.read_text())["configs"][0]
    assert list(c["variants"]) == ["reference", "spec_sync", "spec_async"]
    for name, v in c["variants"].items():
        assert v["server"]["status"] == "ready", (name, v.get("error"), proc.stderr[-3000:])
        argv = v["argv"]
        assert "--trust-remote-code" in argv and argv[-2:] == ["--seed", "0"]
        assert v["env"]["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
        assert v["env"]["VLLM_ENGINE_READY_TIMEOUT_S"] == "600"
        assert v["effective"]["effective"] is True, (name, v["effective"])
    assert c["variants"]["spec_async"]["requested"]["speculative_config"] == {
        "method": "mtp", "num_speculative_tokens": 2}
    gates = {g["id"]: g for g in c["gates"]}
    for name in ("spec_sync", "spec_async"):
        assert gates[f"Tiny-dotted-MTP/{name}/gsm8k/drafts_observed"]["passed"] is True
    print("\n" + "\n".join(f"{g['id']}: {g['passed']} {g['detail'][:90]}" for g in c["gates"]))
