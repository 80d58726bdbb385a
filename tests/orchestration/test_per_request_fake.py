"""Per-request acceptance on the fake server (vLLM 0.32's ``--per-request-spec-decode-metrics``):
every speculative sample carries its own counts at any concurrency, their sums are the task's
counters, and a disagreement fails the acceptance gates closed naming both figures. The fake
stands in for the engine here because a counter disagreement cannot be made on demand."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_with_fake, write_fake_spec_config

pytestmark = pytest.mark.integration

N = 12


def spec_samples(tmp_path) -> list[dict]:
    path = tmp_path / "results" / "r" / "samples" / "fake" / "spec" / "gsm8k.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_each_speculative_sample_carries_its_own_counts_at_concurrency(tmp_path, gsm8k_dir):
    cfg = write_fake_spec_config(tmp_path, N)
    cfg.write_text(cfg.read_text() + "max_concurrency: 4\n")
    code, rec = run_with_fake(tmp_path, cfg, gsm8k_dir)
    spec = rec["configs"][0]["variants"]["spec"]
    assert spec["argv"][spec["argv"].index("--per-request-spec-decode-metrics") + 1] == "detailed"
    task = spec["tasks"]["gsm8k"]
    rows = spec_samples(tmp_path)
    assert len(rows) == N
    # the fake's model (tests/fake_vllm.py, FAKE_METRICS=ok): 4 verify steps of 2 drafts, 2 accepted per request
    for r in rows:
        assert r["spec_decoding"]["num_spec_steps"] == 4 and r["spec_decoding"]["num_draft_tokens"] == 8
        assert (r["spec_drafts"], r["spec_draft_tokens"], r["spec_accepted_tokens"]) == (4, 8, 2)
        assert r["spec_accepted_per_pos"] == [2, 0]
        assert r["sent_after_start_s"] >= 0
    c = task["spec_decode_counters"]
    assert (c["drafts"], c["draft_tokens"], c["accepted_tokens"]) == (4 * N, 8 * N, 2 * N)
    assert task["acceptance_ci_requests"] == N and task["mean_acceptance_length_ci"] is not None
    assert task["acceptance_ci_reason"] is None
    assert code == 0, [g for g in rec["configs"][0]["gates"] if g["verdict"] == "FAIL"]
    md = (tmp_path / "results" / "r" / "summary.md").read_text()
    # 8 tokens per answer (ids 5 6 7 8 in the fake), the steps at positions 1..4 in bin [0, 16): 2 of 8 accepted
    assert "## Per-request acceptance" in md and "[0,16) 0.25" in md
    assert "by prompt length: Spearman" not in md  # every answer accepts alike: no trend to compute
    assert 'data-figure="along-output"' in (tmp_path / "results" / "r" / "summary.html").read_text()
    ref_rows = (tmp_path / "results" / "r" / "samples" / "fake" / "reference" / "gsm8k.jsonl").read_text()
    assert "spec_decoding" not in ref_rows and "sent_after_start_s" not in ref_rows


def test_sums_that_disagree_with_metrics_fail_the_acceptance_gates(tmp_path, gsm8k_dir, monkeypatch):
    monkeypatch.setenv("FAKE_PER_REQUEST", "mismatch")  # one verify step more per answer than /metrics counts
    code, rec = run_with_fake(tmp_path, write_fake_spec_config(tmp_path, N), gsm8k_dir)
    task = rec["configs"][0]["variants"]["spec"]["tasks"]["gsm8k"]
    assert task["spec_decode"] is None
    err = task["spec_decode_error"]
    assert f"drafts (num_spec_steps): requests sum to {5 * N}, /metrics difference {4 * N}" in err
    assert f"draft tokens (num_draft_tokens): requests sum to {10 * N}, /metrics difference {8 * N}" in err
    acc = [g for g in rec["configs"][0]["gates"]
           if g["id"].startswith("fake/spec/gsm8k/") and ("acceptance" in g["kind"] or g["kind"] == "drafts_observed")]
    assert acc and all(g["verdict"] == "FAIL" for g in acc), acc
    assert task["mean_acceptance_length_ci"] is None
    assert code == 1
