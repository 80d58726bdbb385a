"""Traffic shapes through the whole CLI on the FAKE server (tests/fake_vllm.py).

The fake stands in for what the CPU engine cannot produce: prefix caching with a
Mamba/GDN hybrid and MTP (docs/cpu-engine.md, "Traffic shapes on the CPU"). Its
simulated prefix cache works in whole blocks of 16 tokens as vLLM's does
(``KVCacheManager.get_computed_blocks``), so the counters below are computed here
from the shape alone: 4 prompts of 96 tokens sharing a 64-token prefix (4 blocks),
each sent cold, then warm.

* cold pass: the first prompt to arrive hits nothing, each of the 3 others the 4
  shared blocks: 3 x 64 = 192 hit tokens;
* warm pass: every prompt was seen whole, so each hits floor((96 - 1) / 16) = 5
  blocks: 4 x 80 = 320 hit tokens, above the proof's bound 4 x 64 = 256;
* prompt tokens: 2 x 4 x 96 = 768, queried all of them.

With prefix caching off in the fake's effective settings (``/server_info``), every gate
of the shape's task is NOT RUN with the reason and the run is not passed.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from harness.models.training import SHIPPED_DIR
from tests.fake_run import run_cli, servers_gone

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

TOKENIZER = SHIPPED_DIR / "tiny-qwen3next-mtp-arith"


def _config(tmp_path: Path, cache_flag: str, spec_env: dict | None = None) -> Path:
    text = textwrap.dedent(f"""\
        model: fake-model
        server_args: --tokenizer {TOKENIZER} {cache_flag}
        startup_max_wait_seconds: 30
        request_timeout_seconds: 30
        max_concurrency: 2
        variants:
          reference: {{}}
          spec:
            speculative_config: {{method: mtp, num_speculative_tokens: 2}}
            env: {json.dumps(spec_env or {})}
        tasks:
          prefix:
            kind: shape
            shape: {{kind: prefix_reuse, prefix_tokens: 64, prompt_tokens: 96, prompts: 4}}
            max_tokens: 8
            gates: {{accuracy_threshold: null}}
        gates: {{min_acceptance_length: null}}
        comparisons:
          - {{baseline: reference, candidate: spec, tasks: [prefix], max_accuracy_drop: null}}
        """)
    p = tmp_path / "prefix.yaml"
    p.write_text(text)
    return p


def _gates(rec: dict) -> dict[str, dict]:
    return {g["id"].split("/", 1)[1]: g for g in rec["configs"][0]["gates"]}


def test_prefix_reuse_is_proven_and_passes_on_an_engine_with_a_prefix_cache(tmp_path):
    code = run_cli(tmp_path, _config(tmp_path, "--enable-prefix-caching"))
    rec = json.loads((tmp_path / "results" / "r" / "run.json").read_text())
    assert servers_gone(rec)
    gates = _gates(rec)
    assert code == 0 and rec["passed"] is True, {k: g["detail"] for k, g in gates.items() if g["verdict"] != "PASS"}
    for v in ("reference", "spec"):
        t = rec["configs"][0]["variants"][v]["tasks"]["prefix"]
        c = t["engine_counters"]
        assert c["prompt_tokens"] == 768 and c["prefix_cache_queries"] == 768
        assert c["prefix_cache_hits"] == 192 + 320
        assert t["shape"]["problems"] == [] and t["shape"]["not_run"] is None
        assert t["shape"]["places"] == {"cold": 4, "warm": 4}
        assert "bound 256 = 4 prompts x 4 blocks of 16 (cache_config.block_size of /server_info)" in t["shape"]["notes"]
        assert "warm pass: prefix cache hits/queries 320/384" in t["shape"]["notes"]
        assert "warm outputs equal cold outputs on 4/4 prompts" in t["shape"]["notes"]
    assert gates["spec/prefix/shape_proven"]["verdict"] == "PASS"
    match = gates["reference->spec/prefix/min_output_match"]
    assert match["verdict"] == "PASS" and match["observed"] == 1.0


def test_a_warm_cache_that_changes_answers_fails_output_match_against_the_reference(tmp_path):
    # the spec variant's answers change once its prompt hit the cache: 3 cold + 4 warm of 8;
    # within the variant only the prompt that arrived first cold (no hit) differs warm
    run_cli(tmp_path, _config(tmp_path, "--enable-prefix-caching", {"FAKE_WARM_CHANGES": "1"}))
    rec = json.loads((tmp_path / "results" / "r" / "run.json").read_text())
    gates = _gates(rec)
    match = gates["reference->spec/prefix/min_output_match"]
    assert match["verdict"] == "FAIL" and match["observed"] == 1 / 8
    notes = rec["configs"][0]["variants"]["spec"]["tasks"]["prefix"]["shape"]["notes"]
    assert any("warm outputs equal cold outputs on 3/4 prompts (differ: warm/" in n for n in notes), notes


def test_prefix_reuse_is_not_run_where_the_effective_settings_say_prefix_caching_is_off(tmp_path):
    code = run_cli(tmp_path, _config(tmp_path, "--no-enable-prefix-caching"))
    rec = json.loads((tmp_path / "results" / "r" / "run.json").read_text())
    assert servers_gone(rec)
    gates = _gates(rec)
    prefix = {k: g for k, g in gates.items() if "/prefix/" in k}
    assert prefix and all(g["verdict"] == "NOT RUN" for g in prefix.values()), prefix
    assert gates["reference/prefix/shape_proven"]["detail"] == (
        "not run: prefix caching is off on prefix/reference: enable_prefix_caching false in /server_info, "
        "mamba_cache_mode none")
    # NOT RUN is never passed: the verdict is None (not judged), as for a variant not applicable
    assert rec["passed"] is None and rec["exit_code"] == code == 0
