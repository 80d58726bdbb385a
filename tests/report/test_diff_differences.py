"""``evalrun diff`` explains what it cannot pair."""

from __future__ import annotations

import json

from harness.report.diff import diff_runs
from harness.report.diff_render import render_diff_markdown
from tests.report.test_diff import sample, write_run


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
