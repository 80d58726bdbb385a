"""Divergences the reference's recorded distribution cannot judge (its own tokens differ from
the baseline's before the divergence) scored at the baseline's prefix on the reference's
server, started again (harness/run/prefix_steps.py), end to end on the fake server under its
GPU-like numerics (tests/fake_numerics.py: a scored prefix is answered by the fake model
without noise). Deterministic: one request at a time (the batch shapes fixed) and a fixed
noise seed; level 6 (the fake's 0.08 nats) makes the baseline and the candidate flip together
away from the reference and then apart, which ``gpu`` does on too few questions to test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.faults.noise import NOISE_ENV, NOISE_SEED_ENV

from .. import fake_numerics as fn
from ..conftest import FAKE_VLLM

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

REPO = Path(__file__).resolve().parents[2]


def test_divergences_off_the_references_path_are_scored_at_the_baselines_prefix(tmp_path, monkeypatch):
    cfg = tmp_path / "fake-noise.yaml"
    text = (REPO / "bench" / "false_alarms" / "fake-noise.yaml").read_text()
    cfg.write_text(text.replace("per_request_metrics: true\n", "per_request_metrics: true\nmax_concurrency: 1\n"))
    monkeypatch.setenv(NOISE_ENV, "6")
    monkeypatch.setenv(NOISE_SEED_ENV, "1")
    code = main(["--config", str(cfg), "--python", str(FAKE_VLLM), "--results-dir", str(tmp_path / "results"),
                 "--run-id", "r", "--quiet", "--no-baseline"])
    run = tmp_path / "results" / "r"
    rec = json.loads((run / "run.json").read_text())
    assert code == 0, rec["configs"][0]["gates"]
    c = rec["configs"][0]
    comp = next(x for x in c["comparisons"] if (x["baseline"], x["candidate"]) == ("spec_sync", "spec_async"))
    scored = [d for d in comp["divergence"]["divergences"] if d["source"] == "reference_at_prefix"]
    assert scored, comp["divergence"]
    # the step is recorded, its server has its own log, and every scored divergence has its line
    (step,) = [s for s in c["scoring"] if s.get("purpose") == "prefix"]
    assert step["scorer"] == "reference" and step["scored"] == ["spec_sync->spec_async/arith"]
    assert step["error"] is None and step["completions"] == 2 * len(scored)
    assert (run / "logs" / "fake-noise" / "reference.prefix.log").is_file()
    lines = [json.loads(x) for x in
             (run / "samples" / "fake-noise" / "spec_async" / "arith.prefix_scores.spec_sync.jsonl").read_text()
             .splitlines()]
    by_q = {x["question_id"]: x for x in lines}
    for d in scored:
        s = by_q[d["question_id"]]
        assert s["error"] is None and s["position"] == d["position"]
        assert (s["baseline_token"], s["candidate_token"]) == (d["baseline_token"], d["candidate_token"])
        assert s["gap_nats"] == pytest.approx(s["baseline_logprob"] - s["candidate_logprob"])
        assert d["gap_nats"] == pytest.approx(max(0.0, s["gap_nats"]), abs=1e-6)
        # the fake flips only at near ties: both tokens are its top two there, a margin < TIE_MARGIN_MAX apart
        assert {s["baseline_rank"], s["candidate_rank"]} == {1, 2}
        assert abs(d["gap_nats"]) < fn.TIE_MARGIN_MAX and d["verdict"] == "explained"
        assert "scored at the baseline's prefix on reference's server" in d["reason"]
    gate = next(g for g in c["gates"] if g["id"] == "fake-noise/spec_sync->spec_async/arith/min_output_match")
    assert f"{len(scored)} judged on reference's server at the baseline's prefix" in gate["detail"]
    assert "widened by 48 = 8 x the numerics noise's 6 nats" in gate["detail"]
