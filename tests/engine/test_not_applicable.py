"""Variants the engine cannot run (vLLM's async-scheduling/drafter rule): planned as not
applicable, no server started, every gate of theirs NOT RUN with the reason, never
passed. The runner half uses the FAKE server (tests/fake_vllm.py), which reports the
rule's verdict as the real pre-launch check does; the real check is asked once, with the
installed vLLM (no server starts)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from harness.cli import main
from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.engine.preflight import ASYNC_NOT_SUPPORTED, ServerCommand, check_server_commands

from ..conftest import require_vllm

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

FAKE = Path(__file__).resolve().parents[1] / "fake_vllm.py"
GEN = Path(__file__).resolve().parents[1] / "data" / "vllm_gsm8k" / "generated"


def fake_run(tmp_path, cfg: Path, *extra: str) -> tuple[int, dict, Path]:
    code = main(["--config", str(cfg), "--python", str(FAKE), "--results-dir", str(tmp_path / "results"),
                 "--run-id", "r", "--quiet", "--no-baseline", *extra])
    run_dir = tmp_path / "results" / "r"
    return code, json.loads((run_dir / "run.json").read_text()), run_dir


def native(tmp_path: Path, env: str) -> Path:
    p = tmp_path / "na.yaml"
    p.write_text(textwrap.dedent(f"""\
        model: fake-model
        startup_max_wait_seconds: 30
        false_alarm_budget: null  # 6 questions: under a budget the paired gates are report-only
        env: {env}
        variants:
          reference: {{}}
          spec_sync: {{speculative_config: {{method: mtp, num_speculative_tokens: 2}}, async_scheduling: false}}
          spec_async: {{speculative_config: {{method: mtp, num_speculative_tokens: 2}}, async_scheduling: true}}
        tasks:
          arith: {{kind: synthetic, num_questions: 6, num_fewshot: 1, max_tokens: 8}}
        comparisons:
          - {{baseline: reference, candidate: spec_sync}}
          - {{baseline: reference, candidate: spec_async}}
        """))
    return p


def test_the_engines_own_refusal_makes_the_variant_not_applicable(tmp_path):
    code, rec, run_dir = fake_run(tmp_path, native(tmp_path, "{FAKE_MODE: ok, FAKE_ASYNC_REFUSED: '1'}"))
    [pb] = rec["preflight"]["problems"]
    assert pb["kind"] == ASYNC_NOT_SUPPORTED and pb["variant"] == "na/spec_async"
    c = rec["configs"][0]
    va = c["variants"]["spec_async"]
    assert va["server"]["status"] == "not_started" and "fake refusal" in va["error"]
    assert not list((run_dir / "logs").glob("*spec_async*"))  # no server was started
    mine = [g for g in c["gates"] if "spec_async" in g["id"]]
    assert mine and all(g["passed"] is None for g in mine)
    assert all("not applicable" in g["detail"] and "fake refusal" in g["detail"] for g in mine)
    others = [g for g in c["gates"] if "spec_async" not in g["id"]]
    assert others and all(g["passed"] is True for g in others)
    assert rec["passed"] is None  # not every gate judged: never a pass
    assert code == 0


def test_a_vllm_form_ngram_config_runs_spec_async_as_not_applicable(tmp_path, gsm8k_dir):
    cfg = tmp_path / "Ngram-fake.yaml"
    text = (GEN / "Ngram-drafter.yaml").read_text()
    text = text.replace('"Qwen/Qwen3-0.6B"', "fake-model").replace("num_questions: 1319", "num_questions: 6")
    text = text.replace("num_fewshot: 5", "num_fewshot: 1").replace(
        "accuracy_threshold: 0.40", "accuracy_threshold: 0.0"
    )
    cfg.write_text(
        text + "max_tokens: 8\nstartup_max_wait_seconds: 30\nenv: {FAKE_MODE: ok}\n"
        "evalrun: {noise_runs: 1}\naccuracy_threshold_note: ignored\n"
    )
    code, rec, run_dir = fake_run(tmp_path, cfg, "--data-dir", str(gsm8k_dir))
    c = rec["configs"][0]
    assert c["list_path"] == str(cfg) and [w["key"] for w in c["config_warnings"]] == ["accuracy_threshold_note"]
    assert c["variants"]["spec_async"]["error"].startswith("not applicable: vLLM refuses explicit async")
    assert c["variants"]["spec_sync"]["server"]["status"] == "ready"
    for g in c["gates"]:
        if "spec_async" in g["id"]:
            assert g["passed"] is None and "method 'ngram'" in g["detail"], g
    assert rec["passed"] is not True  # (the fake server also reports mtp as its effective method)


def test_the_installed_vllms_rule_refuses_async_with_ngram_and_allows_mtp():
    require_vllm()
    cmds = []
    for stem in ("Ngram-drafter", "MTP-dotted-space"):
        cfg = load_config(GEN / f"{stem}.yaml")
        [vp] = [v for v in build_plan([cfg], python=sys.executable).configs[0].variants if v.name == "spec_async"]
        cmds.append(ServerCommand(vp.id, cfg.path, tuple(a.replace("{port}", "8000") for a in vp.argv), {}))
    problems = check_server_commands(cmds)
    assert [(p.variant, p.kind) for p in problems] == [("Ngram-drafter/spec_async", ASYNC_NOT_SUPPORTED)]
    assert "only supported with EAGLE/MTP/Draft Model/NGram GPU/DSpark/DFlash" in problems[0].message
    assert "method 'ngram'" in problems[0].message
