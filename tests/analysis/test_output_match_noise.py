"""Output match against noise, both directions.

GPU numerics make greedy outputs differ from run to run; a correct speculative build
must pass, a broken one must fail. The benign case needs a FAKE server
(tests/fake_vllm.py ``benign_noise``): the CPU engine is deterministic, so it cannot
produce GPU-like token-level noise on demand. The broken case on the REAL engine is
test_e2e_engine.py::test_state_rollback_fails_output_match_against_noise.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.loader import load_config
from harness.config.schema import ConfigError

from ..conftest import run_with_fake, write_fake_vllm_form

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

N = 400
#: per-pass flip probability q with 2q(1-q) = 0.15: two passes differ on 15% of questions
Q = 0.0811


def vllm_form(tmp_path: Path, extra: str = "") -> Path:
    return write_fake_vllm_form(tmp_path, N, extra)


def run(tmp_path, cfg, gsm8k_dir, env_mode, monkeypatch) -> tuple[int, dict]:
    monkeypatch.setenv("FAKE_MODE", env_mode)
    return run_with_fake(tmp_path, cfg, gsm8k_dir)


def om_gates(rec):
    return [g for g in rec["configs"][0]["gates"] if g["kind"] == "min_output_match"]


def test_benign_15pct_token_mismatch_passes(tmp_path, gsm8k_dir, monkeypatch):
    # the fake's noise flips near-ties (0.03 nats apart at the flipped position): the
    # reference's own distribution explains every divergence, so no rerun is needed
    code, rec = run(tmp_path, vllm_form(tmp_path), gsm8k_dir, f"benign_noise:{Q}", monkeypatch)
    c = rec["configs"][0]
    assert c["variants"]["reference"]["tasks"]["gsm8k"].get("rerun") is None
    assert c["variants"]["spec_sync"]["tasks"]["gsm8k"].get("rerun") is None
    for comp in c["comparisons"]:
        # token-level: about 15% of the questions differ (binomial sd ~1.8% at n=400)
        assert 0.78 < comp["output_match_rate"] < 0.92, comp["output_match_rate"]
        # answer-level: the fake's noise never changes the answer
        assert comp["answer_agreement"]["agreement_rate"] == 1.0
        dv = comp["divergence"]
        n_mism = comp["compared"] - comp["matched"]
        assert dv["reference"] == "reference" and dv["unexplained"] == 0 and dv["explained"] == n_mism > 0
        assert all(d["position"] == 3 and d["gap_nats"] in (0.0, 0.03) for d in dv["divergences"])
        assert comp["rerun_reason"].startswith("not run: every divergence was judged by reference's distribution")
    gates = om_gates(rec)
    assert len(gates) == 3 and all(g["passed"] is True for g in gates), [g["detail"] for g in gates]
    assert all(g["observed"] == 1.0 for g in gates)
    assert code == 0, [g["detail"] for g in c["gates"] if g["passed"] is not True]


def test_benign_noise_without_near_ties_reruns_the_baseline_on_demand(tmp_path, gsm8k_dir, monkeypatch):
    # near_tie_nats null: no distribution judges, so the mismatches need the noise rerun;
    # it runs after the candidates, on a new server of the baseline variant
    cfg = vllm_form(tmp_path, "evalrun:\n  near_tie_nats: null\n")
    code, rec = run(tmp_path, cfg, gsm8k_dir, f"benign_noise:{Q}", monkeypatch)
    c = rec["configs"][0]
    assert c["variants"]["reference"]["tasks"]["gsm8k"].get("rerun") is not None
    assert c["variants"]["spec_sync"]["tasks"]["gsm8k"].get("rerun") is not None
    assert (tmp_path / "results" / "r" / "logs" / "Fake-Model-BF16" / "reference.rerun.log").is_file()
    for comp in c["comparisons"]:
        assert comp["divergence"] is None
        assert comp["rerun_reason"] == "ran: mismatches and no reference distribution to judge them"
        assert comp["noise"]["noise_rate"] > 0.08
    gates = om_gates(rec)
    assert len(gates) == 3 and all(g["passed"] is True for g in gates), [g["detail"] for g in gates]
    assert code == 0


def test_corrupted_outputs_fail_against_the_same_noise(tmp_path, gsm8k_dir, monkeypatch):
    # spec variants corrupt every answer; the reference keeps its benign noise
    cfg = vllm_form(tmp_path)
    monkeypatch.setenv("FAKE_MODE", f"benign_noise:{Q}")
    text = cfg.read_text().replace("server_args: >-", "env: {FAKE_SPEC_MODE: corrupt}\nserver_args: >-")
    cfg.write_text(text)
    code, rec = run(tmp_path, cfg, gsm8k_dir, f"benign_noise:{Q}", monkeypatch)
    gates = {g["id"].split("/", 1)[1]: g for g in om_gates(rec)}
    assert gates["reference->spec_async/gsm8k/min_output_match"]["passed"] is False
    assert gates["reference->spec_sync/gsm8k/min_output_match"]["passed"] is False
    comp = rec["configs"][0]["comparisons"][0]
    assert comp["output_match_rate"] == 0.0 and comp["answer_agreement"]["agreement_rate"] == 0.0
    assert code == 1


def test_evalrun_block_is_validated_with_file_key_and_line(tmp_path):
    cfg = vllm_form(tmp_path, "evalrun:\n  max_concurency: 4\n")
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    msg = str(e.value)
    assert "evalrun.max_concurency" in msg and "max_concurrency" in msg and f"{cfg}:" in msg


def test_evalrun_block_sets_concurrency_noise_and_holm(tmp_path):
    c = load_config(vllm_form(tmp_path, "evalrun:\n  max_concurrency: 7\n  noise_mismatch_rate: 0.1\n"
                                        "  multiple_testing: holm\n"))
    assert c.max_concurrency == 7 and c.gates.multiple_testing == "holm"
    # a stored rate replaces the rerun unless noise_runs: 2 is written
    assert {x.noise_runs for x in c.comparisons} == {1}
    assert {x.noise_mismatch_rate for x in c.comparisons} == {0.1}
    d = load_config(vllm_form(tmp_path))
    assert d.max_concurrency == 100 and {x.noise_runs for x in d.comparisons} == {2}
