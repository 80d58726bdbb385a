"""harness.records.baselines and the gates against them: baselines (update + gating, on
constructed samples and with the fake server) and the output-match gate judged against
noise (a rerun of the baseline variant; the noise tests themselves are in
tests/analysis/test_noise.py). Expected p-values are computed here from
binomial / hypergeometric sums with math.comb, not with harness code. ``--update-baseline``
writes what ran and names what was left out.
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import pytest

from harness.analysis.gates import baseline_notes, evaluate_gate, judged_baseline_gates
from harness.analysis.measurements import Measurements
from harness.analysis.noise import output_noise_rerun
from harness.analysis.scoring import output_match
from harness.cli import main
from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.records.baselines import BASELINE_SCHEMA, BaselineDoc, load_baseline, token_ids_hash, write_baselines
from harness.records.measures import SpecDecodeCountersRecord, SpecDecodeRecord
from harness.records.samples import Sample, write_jsonl
from harness.run.config_steps import stored_baseline
from tests.record_factory import typed
from tests.sample_factory import binom_tail_ge
from tests.sample_factory import gsm8k_sample as s

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

FAKE = Path(__file__).resolve().parents[1] / "fake_vllm.py"


def native_config(tmp_path, extra_gates="", comparison="{baseline: reference, candidate: spec}") -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(textwrap.dedent(f"""\
        name: c
        model: m
        false_alarm_budget: null
        variants:
          reference: {{}}
          spec: {{speculative_config: {{method: mtp, num_speculative_tokens: 2}}}}
        tasks:
          gsm8k: {{num_questions: 10}}
        gates:
          max_error_rate: 0.0
        {extra_gates}
        comparisons:
          - {comparison}
        """))
    return p


def baseline_doc(questions_by_variant: dict, mal: float | None = 2.0, store_questions=True) -> dict:
    variants = {}
    for v, samples in questions_by_variant.items():
        ok = [x for x in samples if x.ok]
        task = {
            "correct": {"flexible-numeric": sum(x.correct["flexible-numeric"] for x in ok)},
            "scored": {"flexible-numeric": len(ok)},
            # no per-position counts: the per-position gate is not judged (a note says so)
            "spec_decode": {"mean_acceptance_length": mal} if v == "spec" and mal is not None else None,
            "mean_acceptance_length_ci": None,
        }
        if store_questions:
            task["questions"] = {x.question_id: {"prompt_hash": x.prompt_hash, "correct": dict(x.correct),
                                                 "error": x.error, "completion": x.completion,
                                                 "token_ids_sha256": token_ids_hash(x.token_ids)}
                                 for x in samples}
        variants[v] = {"tasks": {"gsm8k": task}}
    return {"schema": BASELINE_SCHEMA, "config": "c", "source_run": {"run_id": "good"},
            "pipeline": "flexible-numeric", "variants": variants}


def _complete(doc: dict) -> dict:
    """Fill the fields a written baseline always has (not under test here)."""
    doc = dict(doc, written_at="2026-11-30T00:00:00+00:00")
    doc["source_run"] = dict(doc["source_run"], path="/nowhere")
    for v in doc["variants"].values():
        for t in v["tasks"].values():
            t.setdefault("num_requests", t["scored"]["flexible-numeric"])
            t.setdefault("error_count", 0)
            t.setdefault("accuracy", {})
            t.setdefault("accuracy_ci", {})
            if t.get("spec_decode"):
                t["spec_decode"] = dict({"drafts": 1.0, "draft_tokens": 2.0, "accepted_tokens": 1.0},
                                         **t["spec_decode"])
            for q in t.get("questions", {}).values():
                q.setdefault("gold", "5")
    return doc


def evaluate_baseline_gates(doc: dict, cfg, samples_by: dict, m: Measurements):
    """The planned baseline gates of ``cfg`` judged against ``doc`` (as the runner does)."""
    (cp,) = build_plan([cfg]).configs
    m.baseline = BaselineDoc.model_validate(_complete(doc))
    for (v, t), xs in samples_by.items():
        m.task_record(v, t).samples = xs
    return judged_baseline_gates(cp.baseline_gates, m), baseline_notes(cp.baseline_gates, m)


def baseline_gates_for_run(bdir: Path, cfg, m: Measurements):
    """The runner's baseline step for one config: (info as JSON, gate results)."""
    (cp,) = build_plan([cfg]).configs
    info = stored_baseline(bdir, cfg.name, m)
    return info.model_dump(exclude_defaults=True), judged_baseline_gates(cp.baseline_gates, m)


def measurements(mal_now=2.0):
    m = Measurements()
    c = SpecDecodeCountersRecord(100, 200, (mal_now - 1) * 100, ((mal_now - 1) * 100, 0))
    m.task_record("spec", "gsm8k").spec = SpecDecodeRecord.from_counters(c)
    return m


# ----------------------------------------------------------------- baseline gates, constructed


def test_same_results_pass_and_drop_fails_with_the_lost_questions(tmp_path):
    cfg = load_config(native_config(tmp_path))
    base = {v: [s(f"q{i}", True, variant=v) for i in range(10)] for v in ("reference", "spec")}
    doc = baseline_doc(base)
    results, notes = evaluate_baseline_gates(doc, cfg, {("reference", "gsm8k"): base["reference"],
                                                        ("spec", "gsm8k"): base["spec"]}, measurements())
    assert [(g.id, g.passed) for g in results] == [
        ("c/reference/gsm8k/baseline_accuracy_drop", True),
        ("c/spec/gsm8k/baseline_accuracy_drop", True),
        ("c/spec/gsm8k/baseline_acceptance_length_drop", True),
    ] and notes == ["spec/gsm8k: the baseline has no per-position acceptance, not gated"]
    now = [s(f"q{i}", i >= 3, variant="spec") for i in range(10)]          # q0..q2 lost
    results, _ = evaluate_baseline_gates(doc, cfg, {("reference", "gsm8k"): base["reference"],
                                                    ("spec", "gsm8k"): now}, measurements(mal_now=1.85))
    g = {x.kind + "/" + x.variant: x for x in results}
    acc = g["baseline_accuracy_drop/spec"]
    assert acc.passed is False and acc.observed == pytest.approx(0.3) and acc.questions == ("q0", "q1", "q2")
    assert f"p={binom_tail_ge(3, 3):.4g}" in acc.detail and "drop 0.3000 > 0.05" in acc.detail
    mal = g["baseline_acceptance_length_drop/spec"]
    assert mal.passed is False and mal.observed == pytest.approx(0.15) and mal.limit == 0.1


def test_significant_drop_below_the_limit_fails(tmp_path):
    # 400 questions, 10 lost and 0 gained: drop 0.025 <= 0.05, but one-sided p = 2^-10
    cfg = load_config(native_config(tmp_path))
    base = [s(f"q{i}", True, variant="reference") for i in range(400)]
    now = [s(f"q{i}", i >= 10, variant="reference") for i in range(400)]
    doc = baseline_doc({"reference": base})
    results, notes = evaluate_baseline_gates(doc, cfg, {("reference", "gsm8k"): now}, measurements())
    (g,) = results
    assert g.observed == pytest.approx(0.025) and g.passed is False
    assert f"p={binom_tail_ge(10, 10):.4g} < alpha 0.05" in g.detail
    assert notes == ["spec/gsm8k: not in the baseline, not gated against it"]


def test_improvement_never_fails(tmp_path):
    cfg = load_config(native_config(tmp_path))
    base = [s(f"q{i}", i < 2, variant="reference") for i in range(40)]
    now = [s(f"q{i}", True, variant="reference") for i in range(40)]
    (g,), _ = evaluate_baseline_gates(baseline_doc({"reference": base}), cfg, {("reference", "gsm8k"): now},
                                      measurements())
    assert g.passed is True and g.observed == pytest.approx(-38 / 40)


def test_unpaired_fallback_uses_fisher_exact(tmp_path):
    cfg = load_config(native_config(tmp_path))
    base = [s(f"q{i}", i < 18, variant="reference") for i in range(20)]        # 18/20
    now = [s(f"q{i}", i < 12, variant="reference") for i in range(20)]         # 12/20
    doc = baseline_doc({"reference": base}, store_questions=False)
    (g,), _ = evaluate_baseline_gates(doc, cfg, {("reference", "gsm8k"): now}, measurements())
    # one-sided Fisher: P(X >= 18) for X ~ Hypergeometric(40 total, 30 right, 20 drawn)
    p = sum(math.comb(30, x) * math.comb(10, 20 - x) for x in range(18, 21)) / math.comb(40, 20)
    assert "unpaired" in g.detail and f"p={p:.4g}" in g.detail
    assert g.passed is False and g.observed == pytest.approx(0.3)


def test_prompt_changes_are_not_paired_and_not_run_is_not_run(tmp_path):
    cfg = load_config(native_config(tmp_path))
    base = [s(f"q{i}", True, variant="reference") for i in range(10)]
    now = [s(f"q{i}", True, variant="reference", phash="new" if i < 4 else None) for i in range(10)]
    (g,), _ = evaluate_baseline_gates(baseline_doc({"reference": base}), cfg, {("reference", "gsm8k"): now},
                                      measurements())
    assert "paired on 6 questions" in g.detail and "4 question(s) have a different prompt" in g.detail
    m = measurements()
    m.variant_record("reference").not_run = "server failed to start"
    (g,), _ = evaluate_baseline_gates(baseline_doc({"reference": base}), cfg, {}, m)
    assert g.passed is None and g.verdict == "NOT RUN"


def test_corrupt_or_foreign_baseline_fails_loudly(tmp_path):
    cfg = load_config(native_config(tmp_path))
    bdir = tmp_path / "b"
    bdir.mkdir()
    info, res = baseline_gates_for_run(bdir, cfg, Measurements())
    assert info == {"path": str(bdir / "c.json"), "found": False} and res == []
    (bdir / "c.json").write_text("{not json")
    info, (g,) = baseline_gates_for_run(bdir, cfg, Measurements())
    assert g.kind == "baseline_readable" and g.passed is False and "not a JSON baseline" in g.detail
    (bdir / "c.json").write_text(json.dumps({"schema": "something-else/9"}))
    with pytest.raises(ValueError, match="something-else/9"):
        load_baseline(bdir / "c.json")


# ----------------------------------------------------------------- baseline: update + gate, fake server


def fake_config(tmp_path, mode="ok") -> Path:
    p = tmp_path / "fake.yaml"
    p.write_text(textwrap.dedent(f"""\
        model: fake-model
        false_alarm_budget: null
        startup_max_wait_seconds: 30
        max_concurrency: 1
        variants:
          reference: {{env: {{FAKE_MODE: ok}}}}
          spec:
            speculative_config: {{method: mtp, num_speculative_tokens: 2}}
            env: {{FAKE_MODE: "{mode}"}}
        tasks:
          gsm8k: {{num_questions: 6, num_fewshot: 1, max_tokens: 8}}
        comparisons:
          - {{baseline: reference, candidate: spec}}
        """))
    return p


def run_cli(tmp_path, cfg, gsm8k_dir, rid, *extra):
    code = main(["--config", str(cfg), "--python", str(FAKE), "--data-dir", str(gsm8k_dir),
                 "--results-dir", str(tmp_path / "res"), "--run-id", rid, "--quiet", *extra])
    return code, json.loads((tmp_path / "res" / rid / "run.json").read_text())


def test_update_baseline_then_gate_against_it(tmp_path, gsm8k_dir):
    cfg = fake_config(tmp_path)
    code, rec = run_cli(tmp_path, cfg, gsm8k_dir, "good", "--update-baseline")
    assert code == 0
    bpath = tmp_path / "res" / "baselines" / "fake.json"
    doc = json.loads(bpath.read_text())
    assert doc["schema"] == BASELINE_SCHEMA and doc["source_run"]["run_id"] == "good"
    # per-question correctness and prompt hashes, exactly as in the samples on disk
    rows = [json.loads(x) for x in (tmp_path / "res/good/samples/fake/spec/gsm8k.jsonl").read_text().splitlines()]
    qs = doc["variants"]["spec"]["tasks"]["gsm8k"]["questions"]
    assert {r["question_id"]: (r["prompt_hash"], r["correct"]) for r in rows} == {
        q: (v["prompt_hash"], v["correct"]) for q, v in qs.items()}
    assert doc["variants"]["spec"]["tasks"]["gsm8k"]["spec_decode"]["mean_acceptance_length"] == 1.5

    code, rec = run_cli(tmp_path, cfg, gsm8k_dir, "next")
    c = rec["configs"][0]
    assert code == 0 and c["baseline"]["found"] and c["baseline"]["source_run_id"] == "good"
    kinds = sorted(g["kind"] for g in c["gates"] if g["kind"].startswith("baseline"))
    assert kinds == ["baseline_acceptance_length_drop", "baseline_accuracy_drop", "baseline_accuracy_drop",
                     "baseline_position_acceptance_drop"]
    assert all(g["passed"] for g in c["gates"])
    assert "gated against baseline" in (tmp_path / "res/next/summary.md").read_text()

    # a better baseline than the build now delivers: accuracy and acceptance drop since it
    for q in qs.values():
        q["correct"] = {"strict-numeric": True, "flexible-numeric": True}
    doc["variants"]["spec"]["tasks"]["gsm8k"]["spec_decode"]["mean_acceptance_length"] = 1.8
    bpath.write_text(json.dumps(doc))
    code, rec = run_cli(tmp_path, cfg, gsm8k_dir, "worse")
    failed = {g["id"]: g for g in rec["configs"][0]["gates"] if g["passed"] is False}
    assert code == 1 and set(failed) == {"fake/spec/gsm8k/baseline_accuracy_drop",
                                         "fake/spec/gsm8k/baseline_acceptance_length_drop"}
    assert sorted(failed["fake/spec/gsm8k/baseline_accuracy_drop"]["questions"]) == sorted(qs)
    assert failed["fake/spec/gsm8k/baseline_acceptance_length_drop"]["observed"] == pytest.approx(0.3)
    # --no-baseline skips it; --baseline DIR chooses another folder (empty: no gates)
    code, rec = run_cli(tmp_path, cfg, gsm8k_dir, "nob", "--no-baseline")
    assert code == 0 and rec["configs"][0].get("baseline") is None
    code, rec = run_cli(tmp_path, cfg, gsm8k_dir, "other", "--baseline", str(tmp_path / "elsewhere"))
    assert code == 0 and rec["configs"][0]["baseline"]["found"] is False


def test_failing_run_does_not_update_the_baseline(tmp_path, gsm8k_dir, capsys):
    cfg = fake_config(tmp_path, mode="crash_after:3")
    code, _ = run_cli(tmp_path, cfg, gsm8k_dir, "bad", "--update-baseline")
    assert code == 1
    assert not (tmp_path / "res" / "baselines" / "fake.json").exists()
    assert "baseline of fake not updated: gates not passed" in capsys.readouterr().err


# ----------------------------------------------------------------- output match against noise


def _output_gate(tmp_path, comparison):
    cfg = load_config(native_config(tmp_path, comparison=comparison))
    (cp,) = build_plan([cfg]).configs
    return next(g for g in cp.gates if g.kind == "min_output_match")


def test_output_match_gate_judged_against_noise(tmp_path):
    g = _output_gate(tmp_path, "{baseline: reference, candidate: spec, noise_runs: 2, alpha: 0.05}")
    assert g.alpha == 0.05 and "noise" in g.description
    base = [s(f"q{i}", True, ids=(1, 2, 3), variant="reference") for i in range(20)]
    rerun = [s(f"q{i}", True, ids=(1, 2, 4) if i < 3 else (1, 2, 3), variant="reference") for i in range(20)]
    key = ("reference", "spec", "gsm8k")

    def judge(cand):
        m = Measurements()
        m.comparison_record(*key).match = output_match(base, cand)
        m.comparison_record(*key).noise = output_noise_rerun(base, rerun, cand)
        return evaluate_gate(g, m)

    # candidate differs exactly where the reference differs from itself: noise, passes
    same_as_noise = [s(f"q{i}", True, ids=(1, 2, 5) if i < 3 else (1, 2, 3)) for i in range(20)]
    r = judge(same_as_noise)
    assert r.passed is True and r.observed == pytest.approx(17 / 20) and r.limit is None
    assert "judged against noise" in r.detail
    # candidate differs on 8 more questions than the noise: P(Bin(8, .5) >= 8) < 0.05, fails
    worse = [s(f"q{i}", True, ids=(1, 2, 5) if i < 11 else (1, 2, 3)) for i in range(20)]
    r = judge(worse)
    assert r.passed is False and r.questions == tuple(f"q{i}" for i in range(3, 11))
    assert f"p={binom_tail_ge(8, 8):.4g}" in r.detail
    # zero noise: exact equality is required (limit 1.0), one mismatch fails
    m = Measurements()
    one = [s(f"q{i}", True, ids=(1, 2, 5) if i == 0 else (1, 2, 3)) for i in range(20)]
    m.comparison_record(*key).match = output_match(base, one)
    m.comparison_record(*key).noise = output_noise_rerun(base, base, one)
    r = evaluate_gate(g, m)
    assert r.passed is False and r.limit == 1.0 and "exact limit 1.0 applies" in r.detail


def test_noise_rerun_with_the_fake_server(tmp_path, gsm8k_dir):
    cfg = fake_config(tmp_path)
    text = cfg.read_text().replace("candidate: spec}", "candidate: spec, noise_runs: 2}")
    cfg.write_text(text + "per_request_metrics: true\n")
    code, rec = run_cli(tmp_path, cfg, gsm8k_dir, "n")
    c = rec["configs"][0]
    ref = c["variants"]["reference"]["tasks"]["gsm8k"]
    assert ref["rerun"]["samples"] == "samples/fake/reference/gsm8k.rerun.jsonl"
    assert (tmp_path / "res/n" / ref["rerun"]["samples"]).is_file()
    assert c["comparisons"][0]["noise"]["source"] == "rerun" and c["comparisons"][0]["noise"]["noise_rate"] == 0
    # per-request counts: the fake server adds 4 drafts and 2 accepted tokens per request
    spec = c["variants"]["spec"]["tasks"]["gsm8k"]
    rows = [json.loads(x) for x in (tmp_path / "res/n" / spec["samples"]).read_text().splitlines()]
    assert [(r["spec_drafts"], r["spec_accepted_tokens"]) for r in rows] == [(4.0, 2.0)] * 6
    assert spec["per_request_totals"]["drafts"] == spec["spec_decode"]["drafts"] == 24
    assert spec["mean_acceptance_length_ci"] == [1.5, 1.5] and spec["acceptance_ci_reason"] is None
    assert code == 0


def _sample(qid, variant="v", task="t"):
    return Sample("c", variant, task, qid, "h" + qid, "5", completion="#### 5", token_ids=(1, 2),
                  finish_reason="stop", answers={"strict-numeric": "5", "flexible-numeric": "5"},
                  correct={"strict-numeric": True, "flexible-numeric": True})


def test_update_baseline_writes_what_ran_and_names_what_was_left_out(tmp_path):
    run_dir = tmp_path / "run"
    write_jsonl(run_dir / "samples/c/v/t.jsonl", [_sample("q0"), _sample("q1")])
    g_pass = {"id": "c/v/t/max_error_rate", "kind": "max_error_rate", "variant": "v", "task": "t", "passed": True,
              "op": "<="}
    g_nr = {"id": "c/v/extra/max_error_rate", "kind": "max_error_rate", "variant": "v", "task": "extra",
            "passed": None, "op": "<=", "detail": "not run: data not available (optional task)"}
    raw = {"run_id": "r1", "configs": [{
        "name": "c", "gates": [g_pass, g_nr], "comparisons": [],
        "variants": {"v": {"tasks": {"t": {"samples": "samples/c/v/t.jsonl", "num_requests": 2}}}},
    }]}
    rec = typed(raw)
    [(name, path, msg)] = write_baselines(rec, run_dir, tmp_path / "b")
    assert path == tmp_path / "b" / "c.json" and path.exists()
    doc = json.loads(path.read_text())
    assert sorted(doc["variants"]["v"]["tasks"]) == ["t"]
    assert sorted(doc["variants"]["v"]["tasks"]["t"]["questions"]) == ["q0", "q1"]
    assert "left out" in msg and "v/extra" in msg and "data not available (optional task)" in msg
    # a failed gate, or a variant whose server failed, still writes nothing
    raw["configs"][0]["gates"][0]["passed"] = False
    assert write_baselines(typed(raw), run_dir, tmp_path / "b2")[0][1] is None
    raw["configs"][0]["gates"][0]["passed"] = True
    raw["configs"][0]["variants"]["v"]["error"] = "server failed to start"
    [(_, p2, m2)] = write_baselines(typed(raw), run_dir, tmp_path / "b3")
    assert p2 is None and "server failed to start" in m2
