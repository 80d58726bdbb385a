"""Runner behaviour under engine failures, with a FAKE server (tests/fake_vllm.py).

The real engine cannot be made to crash mid-run, hang a request or die at start-up on
demand; everything else is tested against the real vLLM server in test_e2e_engine.py.
The tasks are evalrun's synthetic arithmetic set, so these tests never skip for want
of GSM8K data.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from harness.cli import main

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

FAKE = Path(__file__).resolve().parents[1] / "fake_vllm.py"


def config(tmp_path: Path, ref_env: dict, spec_env: dict, timeout: float = 30, concurrency: int = 2,
           startup: float = 30, extra_gates: str = "") -> Path:
    text = textwrap.dedent(
        f"""\
        model: fake-model
        false_alarm_budget: null  # a handful of questions: no paired test reaches a share of the budget
        startup_max_wait_seconds: {startup}
        request_timeout_seconds: {timeout}
        max_concurrency: {concurrency}
        variants:
          reference:
            env: {json.dumps(ref_env)}
          spec:
            speculative_config: {{method: mtp, num_speculative_tokens: 2}}
            env: {json.dumps(spec_env)}
        tasks:
          gsm8k: {{kind: synthetic, num_questions: 6, num_fewshot: 1, max_tokens: 8}}
        comparisons:
          - {{baseline: reference, candidate: spec}}
        {extra_gates}"""
    )
    p = tmp_path / "fake.yaml"
    p.write_text(text)
    return p


def run(tmp_path, cfg, python: str = str(FAKE)) -> tuple[int, dict, Path]:
    code = main([
        "--config", str(cfg), "--python", python,
        "--results-dir", str(tmp_path / "results"), "--run-id", "r", "--quiet",
    ])
    run_dir = tmp_path / "results" / "r"
    return code, json.loads((run_dir / "run.json").read_text()), run_dir


def test_clean_fake_run_passes_and_writes_record(tmp_path):
    code, rec, run_dir = run(tmp_path, config(tmp_path, {"FAKE_MODE": "ok"}, {"FAKE_MODE": "ok"}))
    assert code == 0 and rec["passed"] is True and rec["exit_code"] == 0
    c = rec["configs"][0]
    spec = c["variants"]["spec"]["tasks"]["gsm8k"]
    # the fake server adds 4 drafts and 2 accepted tokens per request: 6 requests
    assert spec["spec_decode"]["drafts"] == 24 and spec["spec_decode"]["accepted_tokens"] == 12
    assert spec["spec_decode"]["mean_acceptance_length"] == pytest.approx(1.5)
    assert spec["spec_decode"]["acceptance_rate"] == pytest.approx(12 / 48)
    assert c["comparisons"][0]["output_match_rate"] == 1.0
    lines = (run_dir / spec["samples"]).read_text().splitlines()
    assert len(lines) == 6
    log = (run_dir / c["variants"]["spec"]["log"]).read_text()
    assert "--speculative-config" in log.splitlines()[0]
    assert (run_dir / "summary.md").read_text().startswith("# evalrun run r")


def test_crash_mid_run_keeps_samples_counts_errors_apart(tmp_path):
    # one request in flight at a time, so exactly requests 4, 5 and 6 fail
    cfg = config(tmp_path, {"FAKE_MODE": "ok"}, {"FAKE_MODE": "crash_after:3"}, concurrency=1)
    code, rec, run_dir = run(tmp_path, cfg)
    spec = rec["configs"][0]["variants"]["spec"]
    t = spec["tasks"]["gsm8k"]
    assert t["num_requests"] == 6 and t["error_count"] == 3
    assert t["scored"]["flexible-numeric"] == 3          # errors are not scored as wrong
    assert "died" in spec["error"]
    samples = [json.loads(x) for x in (run_dir / t["samples"]).read_text().splitlines()]
    errs = [s for s in samples if s["error"]]
    assert len(errs) == 3 and all(s["question_id"] in s["error"] for s in errs)
    gates = {g["id"].split("/", 1)[1]: g for g in rec["configs"][0]["gates"]}
    assert gates["spec/gsm8k/max_error_rate"]["passed"] is False
    assert code == 1  # a gate failed


def test_hung_request_times_out_as_error(tmp_path):
    cfg = config(tmp_path, {"FAKE_MODE": "ok"}, {"FAKE_MODE": "hang_after:4"}, timeout=2)
    code, rec, _ = run(tmp_path, cfg)
    t = rec["configs"][0]["variants"]["spec"]["tasks"]["gsm8k"]
    assert t["error_count"] >= 2
    assert code == 1


def test_server_exit_at_start_is_could_not_run_and_other_variant_still_runs(tmp_path):
    cfg = config(tmp_path, {"FAKE_MODE": "ok"}, {"FAKE_MODE": "exit_on_start"})
    code, rec, run_dir = run(tmp_path, cfg)
    v = rec["configs"][0]["variants"]
    assert "exited with code 3" in v["spec"]["error"] and "simulated start-up failure" in v["spec"]["error"]
    assert v["reference"]["tasks"]["gsm8k"]["status"] == "ran"
    gates = {g["id"].split("/", 1)[1]: g for g in rec["configs"][0]["gates"]}
    assert gates["spec/gsm8k/drafts_observed"]["verdict"] == "NOT RUN"
    assert code == 2 and rec["status"] == "incomplete"


def test_missing_required_data_exits_2(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    cfg = config(tmp_path, {}, {})
    cfg.write_text(cfg.read_text().replace("kind: synthetic", "kind: gsm8k"))
    code = main(["--config", str(cfg), "--python", str(FAKE), "--data-dir", str(tmp_path / "nowhere"),
                 "--results-dir", str(tmp_path / "results"), "--run-id", "r", "--quiet"])
    assert code == 2


def test_reusing_a_run_id_is_refused(tmp_path, capsys):
    cfg = config(tmp_path, {"FAKE_MODE": "ok"}, {"FAKE_MODE": "ok"})
    code, _, run_dir = run(tmp_path, cfg)
    assert code == 0
    before = (run_dir / "run.json").read_text()
    code2 = main(["--config", str(cfg), "--python", str(FAKE),
                  "--results-dir", str(tmp_path / "results"), "--run-id", "r", "--quiet"])
    assert code2 == 2 and "choose another --run-id" in capsys.readouterr().err
    assert (run_dir / "run.json").read_text() == before
