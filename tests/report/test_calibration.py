"""harness.report.calibration: spread statistics and recommended tolerances checked against
hand computations on constructed runs."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from scipy import stats as st  # noqa: TID253 - the test's own reference; a cost of this file's collection only

from harness.report.calibration import binomial_variance, per_draft_se, render_calibration_markdown, spread, summarize
from tests.record_factory import typed


def test_spread_against_statistics_module():
    xs = [0.80, 0.84, 0.82, 0.79]
    sp = spread(xs + [None])
    assert sp["n_runs"] == 4 and sp["mean"] == pytest.approx(statistics.mean(xs))
    assert sp["sd"] == pytest.approx(statistics.stdev(xs))
    assert sp["sd_upper95"] == pytest.approx(statistics.stdev(xs) * math.sqrt(3 / st.chi2.ppf(0.05, 3)))
    assert (sp["min"], sp["max"]) == (0.79, 0.84)
    one = spread([0.5])
    assert one["sd"] is None and one["mean"] == 0.5
    assert spread([None])["mean"] is None


def test_per_draft_se_matches_the_draft_distribution():
    # accepted tokens per draft for 10 drafts with 3 speculative positions (prefix acceptance)
    a = [0, 1, 1, 2, 3, 3, 0, 2, 1, 3]
    q = [sum(x > i for x in a) / len(a) for i in range(3)]
    var = statistics.pvariance(a)
    assert per_draft_se(q, len(a)) == pytest.approx(math.sqrt(var / len(a)))
    assert per_draft_se(q, 0) is None and per_draft_se([None], 5) is None


def test_binomial_variance_is_agresti_coull():
    assert binomial_variance(0.5, 20) == pytest.approx((12 / 24) * (12 / 24) / 20)
    assert binomial_variance(0.0, 6) == pytest.approx((2 / 10) * (8 / 10) / 6)
    with pytest.raises(ValueError):
        binomial_variance(1.2, 10)


N = 50


REF = [40, 42, 41]          # reference correct of 50, runs 1..3


SPEC = [39, 41, 40]


MAL = [2.5, 2.6, 2.4]


NOISY = {2: ["q0", "q1"], 3: []}   # reference questions whose tokens differ from run 1


def build_run(root: Path, i: int) -> tuple[dict, Path]:
    run_dir = root / f"run{i}"
    variants = {}
    for v, k in (("reference", REF[i - 1]), ("spec", SPEC[i - 1])):
        rows = []
        for j in range(N):
            ids = [1, 2, 3]
            if v == "reference" and f"q{j}" in NOISY.get(i, []):
                ids = [1, 9, 3]
            right = j < k
            rows.append({"config": "cfg", "variant": v, "task": "gsm8k", "question_id": f"q{j}",
                         "prompt_hash": f"h{j}", "gold": "1", "completion": "x", "token_ids": ids,
                         "finish_reason": "stop", "answers": {}, "correct": {"strict-numeric": right,
                         "flexible-numeric": right}, "error": None, "attempts": 1, "latency_s": 0.0})
        rel = f"samples/cfg/{v}/gsm8k.jsonl"
        (run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / rel).write_text("".join(json.dumps(r) + "\n" for r in rows))
        sd = None
        if v == "spec":
            m = MAL[i - 1] - 1
            sd = {"drafts": 1000.0, "mean_acceptance_length": MAL[i - 1], "acceptance_rate": m / 2,
                  "per_position_acceptance": [0.9, m - 0.9]}
        variants[v] = {"tasks": {"gsm8k": {
            "status": "ran", "samples": rel, "accuracy": {"strict-numeric": k / N, "flexible-numeric": k / N},
            "scored": {"strict-numeric": N, "flexible-numeric": N}, "spec_decode": sd,
            "mean_acceptance_length_ci": None}}}
    ref_right = {f"q{j}" for j in range(REF[i - 1])}
    spec_right = {f"q{j}" for j in range(SPEC[i - 1])} | ({"q49"} if i == 2 else set())
    pc = {"n": N, "accuracy_a": REF[i - 1] / N, "accuracy_b": len(spec_right) / N,
          "a_only": sorted(ref_right - spec_right), "b_only": sorted(spec_right - ref_right)}
    rec = {"run_id": f"run{i}", "status": "completed", "exit_code": 0, "configs": [{
        "name": "cfg", "pipeline": "flexible-numeric", "variants": variants,
        "comparisons": [{"baseline": "reference", "candidate": "spec", "task": "gsm8k",
                         "output_match_rate": 1.0, "paired": pc}]}]}
    return typed(rec), run_dir


def test_summary_and_recommendations_by_hand(tmp_path):
    runs = [build_run(tmp_path, i) for i in (1, 2, 3)]
    sm = summarize(runs, k=3.0)
    (c,) = sm["configs"]
    ref = next(e for e in c["tasks"] if e["variant"] == "reference")
    spec = next(e for e in c["tasks"] if e["variant"] == "spec")
    acc = [x / N for x in REF]
    assert ref["accuracy"]["flexible-numeric"]["sd"] == pytest.approx(statistics.stdev(acc))
    # run-to-run output noise of the reference from the samples: 2/50 in run 2, 0 in run 3
    assert [(x["run"], x["mismatched"], x["compared"]) for x in ref["output_noise"]] == [(2, 2, 50), (3, 0, 50)]
    assert ref["output_noise"][0]["first_divergences"] == [["q0", 1], ["q1", 1]]
    # floor: threshold = highest mean; tolerance = max(thr - p + 3 sqrt(s^2 + pt(1-pt)/n))
    def sigma(ks):
        p = statistics.mean(ks) / N
        pt = (p * N + 2) / (N + 4)
        return p, math.sqrt(statistics.stdev([k / N for k in ks]) ** 2 + pt * (1 - pt) / N)
    (pr, sr), (ps, ss) = sigma(REF), sigma(SPEC)
    thr = max(pr, ps)
    tol = max(thr - pr + 3 * sr, thr - ps + 3 * ss)
    rec = c["recommended"]
    assert rec["gates"]["accuracy_threshold"] == round(thr, 4)
    assert rec["gates"]["tolerance"] == pytest.approx(math.ceil(tol * 1e4) / 1e4)
    assert rec["gates"]["calibration_questions"] == N
    # acceptance length: mean - 3 sqrt(s^2 + se^2), se from the per-draft distribution
    ses = []
    for m in MAL:
        q = [0.9, (m - 1) - 0.9]
        ea, ea2 = sum(q), q[0] + 3 * q[1]
        ses.append(math.sqrt((ea2 - ea * ea) / 1000))
    se = statistics.mean(ses)
    assert spec["sampling_se_mean_acceptance_length"] == pytest.approx(se)
    low = statistics.mean(MAL) - 3 * math.sqrt(statistics.stdev(MAL) ** 2 + se**2)
    assert rec["gates"]["min_acceptance_length"] == pytest.approx(math.floor(low * 1000) / 1000)
    # paired drop: per run (b - c)/n; variance max(mean Wald, psi/n)
    (cr,) = rec["comparisons"]
    drops = [(REF[i] - SPEC[i]) / N - (1 / N if i == 1 else 0) for i in range(3)]
    disc = [(1 + (1 if i == 1 else 0)) / N for i in range(3)]
    wald = [((1 + (i == 1)) / N**2 - ((1 - (i == 1)) ** 2) / N**3) for i in range(3)]
    psi = max(statistics.mean(disc), 1 / N)
    v = max(statistics.mean(wald), psi / N)
    want = max(0.0, statistics.mean(drops)) + 3 * math.sqrt(statistics.stdev(drops) ** 2 + v)
    assert cr["max_accuracy_drop"] == pytest.approx(math.ceil(want * 1e4) / 1e4)
    assert cr["expected_discordance"] == round(psi, 4)
    assert cr["noise_mismatch_rate"] == round((2 / 50 + 0) / 2, 4) and "min_output_match" not in cr
    # a clean build whose candidate already differs from the baseline on 10% of prompts
    # (bf16 numerics): that, not the smaller rerun noise, is the noise to judge against
    for rec, _ in runs:
        rec.configs[0].comparisons[0].output_match_rate = 0.9
    (cr2,) = summarize(runs, k=3.0)["configs"][0]["recommended"]["comparisons"]
    assert cr2["noise_mismatch_rate"] == pytest.approx(0.1) and "min_output_match" not in cr2
    md = render_calibration_markdown(sm)
    assert "accuracy_threshold: " + str(round(thr, 4)) in md
    assert "| reference | gsm8k | run 2 vs run 1 | 2/50 | 0.0400 | q0@1, q1@1 |" in md
    assert "Shewhart" in md and "Agresti-Coull" in md

