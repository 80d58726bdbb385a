"""Divergences judged by the reference's own distribution, and the model runner.

Fake-engine runs in both directions (tests/fake_vllm.py ``near_tie`` / ``confident``:
the CPU engine cannot be made to flip a near-tie on 30% of the questions on demand),
plus unit tests of the classification, the logprobs parser and the runner facts. The
real-engine side is tests/e2e/test_divergence_engine.py.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from harness.analysis.comparison import reference_variant
from harness.analysis.divergence import classify_divergences
from harness.analysis.measurements import Measurements
from harness.cli import main
from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.engine.client import parse_top_logprobs
from harness.engine.info import model_runner_fact, runner_of_class
from harness.records.samples import Sample, read_jsonl, write_jsonl
from harness.tasks import prepare_task

from ..conftest import (
    FAKE_VLLM,
    run_with_fake,
    write_fake_spec_config,
    write_fake_vllm_form,
)

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

FAKE = FAKE_VLLM
N = 200


def vllm_form(tmp_path: Path, extra: str = "", env: str = "") -> Path:
    return write_fake_vllm_form(tmp_path, N, env + extra)


def run(tmp_path, cfg, gsm8k_dir, monkeypatch, **env) -> tuple[int, dict]:
    for k in ("FAKE_MODE", "FAKE_RUNNER", "FAKE_SPEC_RUNNER", "FAKE_SPEC_MODE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the fake's model is a name, not a hub repo
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return run_with_fake(tmp_path, cfg, gsm8k_dir)


def gates_of(rec, kind):
    return {g["id"].split("/", 1)[1]: g for g in rec["configs"][0]["gates"] if g["kind"] == kind}


def chosen_share(tmp_path, gsm8k_dir, share) -> int:
    """How many prompts the fake picks (the same rule as tests/fake_vllm.py ``chosen``),
    computed from the prompts the run sent (the request log is not kept, so rebuild them)."""
    c = load_config(tmp_path / "Fake-Model-BF16.yaml")
    pt = prepare_task("gsm8k", c.tasks["gsm8k"], gsm8k_dir)
    return sum(random.Random(hashlib.sha256(r.prompt.encode()).hexdigest()).random() < share for r in pt.requests)


# --------------------------------------------------------------------------- fake engine, both directions


def test_near_ties_on_30pct_pass_every_output_match_gate_without_a_rerun(tmp_path, gsm8k_dir, monkeypatch):
    code, rec = run(tmp_path, vllm_form(tmp_path), gsm8k_dir, monkeypatch, FAKE_MODE="near_tie:0.3")
    c = rec["configs"][0]
    want = chosen_share(tmp_path, gsm8k_dir, 0.3)
    assert 0.2 * N < want < 0.4 * N
    by = {(x["baseline"], x["candidate"]): x for x in c["comparisons"]}
    for cand in ("spec_sync", "spec_async"):
        comp = by[("reference", cand)]
        assert comp["compared"] - comp["matched"] == want  # deterministic: exactly the fake's share
        dv = comp["divergence"]
        assert dv["reference"] == "reference" and dv["explained"] == want and dv["unexplained"] == 0
        for d in dv["divergences"]:
            # 7 at -0.688, 9 at -0.698: the candidate took the runner-up, 0.01 nats down
            assert (d["position"], d["baseline_token"], d["candidate_token"], d["reference_token"]) == (2, 7, 9, 7)
            assert d["gap_nats"] == pytest.approx(0.01) and d["candidate_rank"] == 2 and d["verdict"] == "explained"
        assert comp["rerun_reason"].startswith("not run: every divergence was judged")
    # both speculative variants take the same token: nothing to classify between them
    assert by[("spec_sync", "spec_async")]["matched"] == N
    assert c["variants"]["reference"]["tasks"]["gsm8k"].get("rerun") is None
    om = gates_of(rec, "min_output_match")
    assert len(om) == 3 and all(g["passed"] is True and g["observed"] == 1.0 for g in om.values())
    assert f"{want} explained" in om["reference->spec_async/gsm8k/min_output_match"]["detail"]
    assert code == 0
    # the reference's samples carry the top-k; the speculative variants' do not
    ref = [json.loads(x) for x in (tmp_path / "results/r/samples/Fake-Model-BF16/reference/gsm8k.jsonl").open()]
    spec = [json.loads(x) for x in (tmp_path / "results/r/samples/Fake-Model-BF16/spec_async/gsm8k.jsonl").open()]
    assert all(len(s["top_logprobs"]) == len(s["token_ids"]) and len(s["top_logprobs"][0]) == 5 for s in ref)
    assert all("top_logprobs" not in s for s in spec)


def test_confident_divergences_on_10pct_fail_output_match_naming_them(tmp_path, gsm8k_dir, monkeypatch):
    code, rec = run(tmp_path, vllm_form(tmp_path), gsm8k_dir, monkeypatch, FAKE_MODE="confident:0.1")
    c = rec["configs"][0]
    want = chosen_share(tmp_path, gsm8k_dir, 0.1)
    assert want > 5
    om = gates_of(rec, "min_output_match")
    for cand in ("spec_sync", "spec_async"):
        g = om[f"reference->{cand}/gsm8k/min_output_match"]
        assert g["passed"] is False and g["observed"] == pytest.approx((N - want) / N)
        assert len(g["questions"]) == want and f"{want} unexplained" in g["detail"]
        comp = next(x for x in c["comparisons"] if x["candidate"] == cand and x["baseline"] == "reference")
        assert comp["divergence"]["unexplained"] == want
        # -0.01 - (-4.61) = 4.6 nats: far above the 0.5-nat default
        assert all(d["gap_nats"] == pytest.approx(4.6) for d in comp["divergence"]["divergences"])
    assert om["spec_sync->spec_async/gsm8k/min_output_match"]["passed"] is True
    assert code == 1
    # the summary lists them worst first, with tokens, gap and verdict
    md = (tmp_path / "results" / "r" / "summary.md").read_text()
    assert "### Divergences judged by the reference's distribution (worst first)" in md
    assert md.count("| 7 -> 9 | 4.600 | UNEXPLAINED |") == 2 * want
    assert "model runner v1 (server log)" in md


def test_confident_divergences_fail_even_with_a_noisy_rerun(tmp_path, gsm8k_dir, monkeypatch):
    # the config asks for the rerun (noise_runs: 2): its noise does not excuse a divergence
    # the reference's distribution judges confident
    cfg = vllm_form(tmp_path, "evalrun:\n  noise_runs: 2\n")
    code, rec = run(tmp_path, cfg, gsm8k_dir, monkeypatch, FAKE_MODE="confident:0.1")
    c = rec["configs"][0]
    assert c["variants"]["reference"]["tasks"]["gsm8k"]["rerun"] is not None
    comp = c["comparisons"][0]
    assert comp["rerun_reason"] == "ran: asked by the config (noise_runs 2, noise_runs_when always)"
    assert gates_of(rec, "min_output_match")["reference->spec_async/gsm8k/min_output_match"]["passed"] is False
    assert code == 1


def test_near_tie_threshold_is_per_config(tmp_path, gsm8k_dir, monkeypatch):
    # a threshold below the fake's 0.01-nat ties turns them into failures
    cfg = vllm_form(tmp_path, "evalrun:\n  near_tie_nats: 0.005\n  noise_runs: 1\n")
    code, rec = run(tmp_path, cfg, gsm8k_dir, monkeypatch, FAKE_MODE="near_tie:0.3")
    g = gates_of(rec, "min_output_match")["reference->spec_async/gsm8k/min_output_match"]
    assert g["passed"] is False and "near-tie <= 0.005 nats" in g["detail"]
    assert code == 1


# --------------------------------------------------------------------------- model runner


def test_every_variant_records_its_model_runner_from_the_log(tmp_path, gsm8k_dir, monkeypatch):
    code, rec = run(tmp_path, vllm_form(tmp_path), gsm8k_dir, monkeypatch, FAKE_MODE="ok")
    for v in rec["configs"][0]["variants"].values():
        assert v["model_runner"]["runner"] == "v1" and v["model_runner"]["source"] == "server log"
        assert "using the V1 model runner instead" in v["model_runner"]["detail"]
    ve = gates_of(rec, "variant_effective")
    assert all(g["passed"] is True and "model runner v1 (server log)" in g["detail"] for g in ve.values())
    assert code == 0


def test_mixed_runners_fail_variant_effective_naming_both(tmp_path, gsm8k_dir, monkeypatch):
    code, rec = run(tmp_path, vllm_form(tmp_path), gsm8k_dir, monkeypatch, FAKE_MODE="ok", FAKE_SPEC_RUNNER="v2")
    ve = gates_of(rec, "variant_effective")
    g = ve["reference/variant_effective"]
    assert g["passed"] is False
    assert "reference ran v1" in g["detail"] and "spec_async ran v2" in g["detail"]
    assert "spec_sync ran v2" in g["detail"]
    # the two speculative variants ran the same runner as each other, but each is compared with the reference
    assert ve["spec_sync/variant_effective"]["passed"] is False
    assert "reference ran v1" in ve["spec_sync/variant_effective"]["detail"]
    assert code == 1


def test_unknown_runner_fails_closed(tmp_path, gsm8k_dir, monkeypatch):
    code, rec = run(tmp_path, vllm_form(tmp_path), gsm8k_dir, monkeypatch, FAKE_MODE="ok", FAKE_RUNNER="none")
    ve = gates_of(rec, "variant_effective")
    assert all(g["passed"] is False and "model runner unknown" in g["detail"] for g in ve.values())
    assert rec["configs"][0]["variants"]["reference"]["model_runner"]["runner"] == "unknown"
    assert code == 1


NATIVE = """\
name: fake-native
model: fake/model
startup_max_wait_seconds: 30
variants:
  reference: {{model_runner: v2}}
  spec_v1:
    speculative_config: {{method: mtp, num_speculative_tokens: 2}}
    model_runner: v1
tasks:
  gsm8k: {{kind: gsm8k, num_questions: 20, num_fewshot: 1, max_tokens: 8}}
gates: {{accuracy_threshold: 0.0}}
comparisons:
  - {{baseline: reference, candidate: spec_v1{extra}}}
"""


@pytest.mark.parametrize("allow", [False, True])
def test_model_runner_key_sets_vllms_switch_and_mixed_runners_can_be_allowed(tmp_path, gsm8k_dir, monkeypatch, allow):
    cfg = tmp_path / "fake-native.yaml"
    cfg.write_text(NATIVE.format(extra=", allow_mixed_runners: true" if allow else ""))
    code, rec = run(tmp_path, cfg, gsm8k_dir, monkeypatch, FAKE_MODE="ok")
    vs = rec["configs"][0]["variants"]
    assert vs["reference"]["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    assert vs["spec_v1"]["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    assert vs["reference"]["model_runner"]["runner"] == "v2" and vs["spec_v1"]["model_runner"]["runner"] == "v1"
    ve = gates_of(rec, "variant_effective")
    assert ve["reference/variant_effective"]["passed"] is allow
    assert code == (0 if allow else 1)


def test_requested_runner_not_used_fails(tmp_path, gsm8k_dir, monkeypatch):
    cfg = tmp_path / "fake-native.yaml"
    cfg.write_text(NATIVE.format(extra=", allow_mixed_runners: true"))
    code, rec = run(tmp_path, cfg, gsm8k_dir, monkeypatch, FAKE_MODE="ok", FAKE_RUNNER="v1")
    g = gates_of(rec, "variant_effective")["reference/variant_effective"]
    assert g["passed"] is False and "requested v2" in g["detail"] and "ran v1" in g["detail"]
    assert code == 1


def test_runner_facts_from_plugin_classes_and_log_lines():
    v1 = "vllm.v1.worker.cpu_model_runner.CPUModelRunner (a vllm.v1.worker.gpu_model_runner.GPUModelRunner)"
    assert runner_of_class(v1) == "v1"
    assert runner_of_class("vllm.v1.worker.gpu.model_runner.GPUModelRunner") == "v2"
    assert runner_of_class("vllm.v1.worker.cpu.model_runner.CPUModelRunner") == "v2"
    assert runner_of_class("somewhere.Else") is None
    # the plugin wins over the log
    f = model_runner_fact([v1], "INFO Using V2 Model Runner")
    assert (f.runner, f.source) == ("v1", "evalrun plugin")
    f = model_runner_fact(
        [], "x\nWARNING Model Runner V2 does not yet support ngram; using the V1 model runner instead.\n")
    assert (f.runner, f.source) == ("v1", "server log") and "ngram" in f.detail
    assert model_runner_fact([], "INFO [gpu_worker.py:518] Using V2 Model Runner").runner == "v2"
    assert model_runner_fact([], "nothing here").runner == "unknown"
    mixed = model_runner_fact([v1, "vllm.v1.worker.gpu.model_runner.GPUModelRunner"], "")
    assert mixed.runner == "unknown" and "different runners" in mixed.detail


# --------------------------------------------------------------------------- classification, by hand


def S(qid, ids, top=None, variant="x", ok=True):
    return Sample(config="c", variant=variant, task="t", question_id=qid, prompt_hash="h", gold="1",
                  completion=" ".join(map(str, ids)), token_ids=tuple(ids), finish_reason="stop",
                  top_logprobs=top, error=None if ok else "request q: HTTP 500")


def dist(*pairs):
    return tuple(sorted(pairs, key=lambda p: -p[1]))


def test_classification_by_the_references_gap():
    conf = dist((1, -0.01), (2, -6.0))
    ref = [
        S("tie", [1, 5, 3], (conf, dist((5, -0.70), (6, -0.90), (7, -3.0)), conf)),
        S("far", [1, 5, 3], (conf, dist((5, -0.10), (6, -2.60), (7, -3.0)), conf)),
        S("out", [1, 5, 3], (conf, dist((5, -0.10), (6, -2.60), (7, -3.0)), conf)),
        S("same", [1, 5, 3], (conf, conf, conf)),
        S("ends", [1, 5, 3], (conf, conf, conf)),
    ]
    cand = [S("tie", [1, 6, 3]), S("far", [1, 6, 3]), S("out", [1, 9, 3]), S("same", [1, 5, 3]), S("ends", [1])]
    r = classify_divergences(ref, cand, ref, "reference", 0.5, baseline_is_reference=True)
    assert r.compared == 5
    by = {d.question_id: d for d in r.divergences}
    assert set(by) == {"tie", "far", "out", "ends"}
    assert by["tie"].verdict == "explained" and by["tie"].gap_nats == pytest.approx(0.2)
    assert by["tie"].candidate_rank == 2
    assert by["far"].verdict == "unexplained" and by["far"].gap_nats == pytest.approx(2.5)
    # outside the top 3: at least top-1 minus the 3rd (-0.10 - -3.0 = 2.9 nats)
    assert by["out"].verdict == "unexplained" and not by["out"].in_top_k and by["out"].gap_nats == pytest.approx(2.9)
    assert by["ends"].verdict == "unexplained" and by["ends"].candidate_token is None
    # worst first: the unexplained by decreasing gap (an ended completion counts as infinite)
    assert [d.question_id for d in r.divergences] == ["ends", "out", "far", "tie"]
    # the threshold is inclusive: a gap of exactly 2.5 at near_tie 2.5 is explained
    r2 = classify_divergences(ref, cand, ref, "reference", 2.5, baseline_is_reference=True)
    assert {d.question_id for d in r2.explained} == {"tie", "far"}


def test_speculative_baseline_uses_the_reference_where_its_prefix_is_the_same():
    conf = dist((1, -0.01), (2, -6.0))
    tie = dist((5, -0.70), (6, -0.75))
    other = dist((2, -0.01), (1, -6.0))  # the reference was confident in its own token 2
    ref = [S("same-prefix", [1, 5, 3], (conf, tie, conf), variant="reference"),
           S("other-prefix", [2, 5, 3], (conf, tie, conf), variant="reference"),
           S("other-confident", [2, 5, 3], (other, tie, conf), variant="reference"),
           S("no-logprobs", [1, 5, 3], None, variant="reference")]
    base = [S(q, [1, 5, 3]) for q in ("same-prefix", "other-prefix", "other-confident", "no-logprobs")]
    cand = [S(q, [1, 6, 3]) for q in ("same-prefix", "other-prefix", "other-confident", "no-logprobs")]
    r = classify_divergences(base, cand, ref, "reference", 0.5, baseline_is_reference=False)
    by = {d.question_id: d for d in r.divergences}
    assert by["same-prefix"].verdict == "explained" and by["same-prefix"].source == "reference_prefix"
    # the baseline left the reference at token 0 with a token the reference's distribution
    # puts at least as high as its own (gap <= 0.5): explained by the reference's paths
    assert by["other-prefix"].verdict == "explained" and by["other-prefix"].source == "reference_paths"
    # left where the reference was confident (6 nats): cannot be explained, falls back
    assert by["other-confident"].verdict == "unexplained" and by["other-confident"].source == "none"
    assert "prefix differs from the baseline's at token 0" in by["other-confident"].reason
    assert by["no-logprobs"].verdict == "unexplained" and "no log-probabilities" in by["no-logprobs"].reason
    # with a rerun of the baseline that diverged on a question, the fallback calls it noise
    r = classify_divergences(base, cand, ref, "reference", 0.5, False, noise_ids={"other-confident"})
    by = {d.question_id: d for d in r.divergences}
    assert by["other-confident"].verdict == "noise" and by["no-logprobs"].verdict == "unexplained"
    assert "rerun did not diverge here" in by["no-logprobs"].reason
    with pytest.raises(ValueError):
        classify_divergences(base, cand, ref, "reference", -1.0, False)
    with pytest.raises(ValueError):
        classify_divergences(base, cand, ref, "reference", math.nan, False)


# --------------------------------------------------------------------------- the logprobs answer


def choice(tokens, tlps, tops, ids):
    return {"text": "x", "token_ids": ids, "logprobs": {"tokens": tokens, "token_logprobs": tlps,
                                                          "top_logprobs": tops, "text_offset": [0] * len(tokens)}}


def test_parse_top_logprobs_reads_vllms_token_id_form():
    c = choice(["token_id:5", "token_id:9"], [-0.5, -3.0],
               [{"token_id:5": -0.5, "token_id:6": -1.0}, {"token_id:8": -0.1, "token_id:7": -2.0}], [5, 9])
    got = parse_top_logprobs(c, "q1")
    assert got == (((5, -0.5), (6, -1.0)), ((8, -0.1), (7, -2.0), (9, -3.0)))  # sampled 9 added, sorted


@pytest.mark.parametrize("bad,msg", [
    ({"text": "x", "token_ids": [5]}, "has none"),
    (choice(["5"], [-0.5], [{"5": -0.5}], [5]), "not 'token_id:N'"),
    (choice(["token_id:5"], [-0.5], [{"token_id:5": -0.5}], [5, 6]), "1 logprobs positions for 2 token ids"),
    (choice(["token_id:5"], [-0.5, -1.0], [{"token_id:5": -0.5}], [5]), "differ in length"),
    (choice(["token_id:6"], [-0.5], [{"token_id:6": -0.5}], [5]), "is not token id 5"),
])
def test_parse_top_logprobs_fails_closed_naming_the_request(bad, msg):
    with pytest.raises(ValueError) as e:
        parse_top_logprobs(bad, "gsm8k/test/7")
    assert "gsm8k/test/7" in str(e.value) and msg in str(e.value)


def test_top_logprobs_round_trip_in_jsonl_and_are_left_out_when_absent(tmp_path):
    a = S("q", [1, 2], (dist((1, -0.01), (3, -5.0)), dist((2, -0.2), (4, -0.3))))
    b = S("r", [1, 2])
    write_jsonl(tmp_path / "s.jsonl", [a, b])
    lines = (tmp_path / "s.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["top_logprobs"] == [[[1, -0.01], [3, -5.0]], [[2, -0.2], [4, -0.3]]]
    assert "top_logprobs" not in json.loads(lines[1])
    assert read_jsonl(tmp_path / "s.jsonl") == [a, b]


def test_calibrate_recommends_near_tie_nats_from_a_good_builds_gaps(tmp_path, gsm8k_dir, monkeypatch, capsys):
    # a good build whose only divergences are 0.01-nat near-ties: 1.5 x 0.01, rounded up
    monkeypatch.setenv("FAKE_MODE", "near_tie:0.3")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = write_fake_spec_config(tmp_path, 30)
    args = ["calibrate", "--config", str(cfg), "--python", str(FAKE), "--data-dir", str(gsm8k_dir),
            "--results-dir", str(tmp_path / "res"), "--run-id", "cal", "--quiet", "--repeat", "2",
            "--json", str(tmp_path / "c.json")]
    assert main(args) == 0
    sm = json.loads((tmp_path / "c.json").read_text())
    ce = sm["configs"][0]["comparisons"][0]
    assert ce["divergence_gaps"] and all(g == pytest.approx(0.01) for g in ce["divergence_gaps"])
    rec = sm["configs"][0]["recommended"]["comparisons"][0]
    assert rec["near_tie_nats"] == math.ceil(1.5 * max(ce["divergence_gaps"]) * 100) / 100
    assert "near_tie_nats" in capsys.readouterr().out


def test_vllm_form_model_runner_applies_to_every_derived_variant(tmp_path):
    c = load_config(vllm_form(tmp_path, "evalrun:\n  model_runner: v1\n"))
    runners = {n: v.model_runner for n, v in c.variants.items()}
    assert runners == dict.fromkeys(["reference", "spec_sync", "spec_async"], "v1")
    assert {v.env["VLLM_USE_V2_MODEL_RUNNER"] for v in build_plan([c]).configs[0].variants} == {"0"}
    both = load_config(vllm_form(tmp_path, "evalrun:\n  v1_runner_variants: true\n"))
    assert [n for n in both.variants] == ["reference", "spec_sync", "spec_async", "reference_v1", "spec_sync_v1",
                                           "spec_async_v1"]
    assert {(x.baseline, x.candidate) for x in both.comparisons} >= {
        ("reference_v1", "spec_async_v1"), ("reference_v1", "spec_sync_v1"), ("spec_sync_v1", "spec_async_v1")}
    assert both.variants["spec_sync_v1"].speculative_config == both.variants["spec_sync"].speculative_config


def test_the_reference_of_a_speculative_baseline_is_one_on_the_same_runner():
    with_lp = [S("q", [1], (dist((1, -0.1)),))]
    c = NS(variants={"reference": NS(speculative_config=None, model_runner=None),
                     "spec": NS(speculative_config={"method": "mtp"}, model_runner=None),
                     "reference_v1": NS(speculative_config=None, model_runner="v1"),
                     "spec_v1": NS(speculative_config={"method": "mtp"}, model_runner="v1")})
    m = Measurements()
    for v, xs in {"reference": with_lp, "reference_v1": with_lp,
                  "spec": [S("q", [1])], "spec_v1": [S("q", [1])]}.items():
        m.task_record(v, "t").samples = xs
    assert reference_variant(c, m, "spec_v1", "t") == "reference_v1"
    assert reference_variant(c, m, "spec", "t") == "reference"
    assert reference_variant(c, m, "reference_v1", "t") == "reference_v1"  # the baseline itself
    m.task_record("reference", "t").samples = m.task_record("reference_v1", "t").samples = [
        S("q", [1])
    ]  # nobody asked for logprobs
    assert reference_variant(c, m, "spec", "t") is None
