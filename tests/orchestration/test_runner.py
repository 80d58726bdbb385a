"""The runner's sequence (harness/run/runner.py), with the FAKE server (tests/fake_vllm.py):
the order of a config's steps, the one :class:`ConfigRun` they share, and how often each
variant's server starts. The fake stands in for the engine because the count of server
starts is read from its own log (``FAKE_DEVICES_LOG``: one line per start and stop), which
the real engine does not write; nothing here depends on its answers beyond "ok" and
"corrupt".
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

import harness.run.runner as runner
from harness.cli import main
from harness.run.context import ConfigRun

from .test_runner_fake_server import FAKE

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)


def config(tmp_path: Path, spec_mode: str, comparison: str = "") -> tuple[Path, Path]:
    """A two-variant config on the fake whose servers log their starts; (config, log)."""
    log = tmp_path / "servers.jsonl"
    extra = f", {comparison}" if comparison else ""
    p = tmp_path / "fake.yaml"
    p.write_text(textwrap.dedent(f"""\
        model: fake-model
        false_alarm_budget: null  # a handful of questions: no paired test reaches a share of the budget
        startup_max_wait_seconds: 30
        request_timeout_seconds: 30
        max_concurrency: 2
        env: {{FAKE_DEVICES_LOG: {json.dumps(str(log))}}}
        variants:
          reference: {{}}
          spec:
            speculative_config: {{method: mtp, num_speculative_tokens: 2}}
            env: {{FAKE_MODE: {spec_mode}}}
        tasks:
          gsm8k: {{kind: synthetic, num_questions: 6, num_fewshot: 1, max_tokens: 8}}
        comparisons:
          - {{baseline: reference, candidate: spec{extra}}}
        """))
    return p, log


def run_cli(tmp_path: Path, cfg: Path) -> tuple[int, dict]:
    code = main(["--config", str(cfg), "--python", str(FAKE), "--results-dir", str(tmp_path / "results"),
                 "--run-id", "r", "--quiet"])
    return code, json.loads((tmp_path / "results" / "r" / "run.json").read_text())


def starts(log: Path) -> dict[str, int]:
    """Server starts per variant from the fake's own log: a speculative server's command
    carries ``--speculative-config``."""
    out = {"reference": 0, "spec": 0}
    for line in log.read_text().splitlines():
        e = json.loads(line)
        if e["event"] == "start":
            out["spec" if "--speculative-config" in e["args"] else "reference"] += 1
    return out


def spy(monkeypatch, calls: list[tuple[str, ConfigRun, str | None]], name: str) -> None:
    """Wrap the runner's ``name`` so each call notes (name, its ConfigRun, the variant)."""
    real = getattr(runner, name)

    def step(run, *rest, **kw):
        vp = rest[0] if rest and hasattr(rest[0], "name") else None
        calls.append((name, run, None if vp is None else vp.name))
        return real(run, *rest, **kw)

    monkeypatch.setattr(runner, name, step)


STEPS = ["select_variants", "prepare_tasks", "prepare_model", "run_variant", "rerun_for_noise", "judge_gates"]


def test_a_configs_steps_run_in_order_on_one_config_run(tmp_path, monkeypatch):
    calls: list[tuple[str, ConfigRun, str | None]] = []
    for name in STEPS:
        spy(monkeypatch, calls, name)
    cfg, log = config(tmp_path, "ok", "noise_runs: 2, noise_runs_when: always")
    code, rec = run_cli(tmp_path, cfg)
    assert code == 0, rec["configs"]
    # the inline noise rerun runs on the variants' own servers: no rerun_for_noise step
    assert [(n, v) for n, _, v in calls] == [
        ("select_variants", None), ("prepare_tasks", None), ("prepare_model", None),
        ("run_variant", "reference"), ("run_variant", "spec"), ("judge_gates", None)]
    runs = [r for _, r, _ in calls]
    # one config's run: the same records and measurements in every step; the model set once resolved
    assert len({id(r.result) for r in runs}) == 1 and len({id(r.measured) for r in runs}) == 1
    assert {r.model_ref for r in runs[:3]} == {""} and {r.model_ref for r in runs[3:]} == {"fake-model"}
    last = runs[-1]
    assert last.record.configs == [last.result] and list(last.prepared) == ["gsm8k"]
    assert last.result.model_path == rec["configs"][0]["model_path"] == "fake-model"
    assert last.run_dir == tmp_path / "results" / "r"
    assert starts(log) == {"reference": 1, "spec": 1}   # the inline rerun starts no server of its own
    ref_task = rec["configs"][0]["variants"]["reference"]["tasks"]["gsm8k"]
    rerun_file = tmp_path / "results" / "r" / ref_task["rerun"]["samples"]
    assert len(rerun_file.read_text().splitlines()) == 6


def test_a_rerun_for_noise_on_demand_starts_the_baseline_once_more(tmp_path, monkeypatch):
    calls: list[tuple[str, ConfigRun, str | None]] = []
    spy(monkeypatch, calls, "rerun_for_noise")
    cfg, log = config(tmp_path, "corrupt", "noise_runs: 2, noise_runs_when: unexplained, near_tie_nats: null")
    code, rec = run_cli(tmp_path, cfg)
    assert code == 1  # the corrupt candidate fails its gates
    assert [v for _, _, v in calls] == ["reference"]
    assert starts(log) == {"reference": 2, "spec": 1}
    run_dir = tmp_path / "results" / "r"
    assert (run_dir / "logs" / "fake" / "reference.rerun.log").is_file()
    ref_task = rec["configs"][0]["variants"]["reference"]["tasks"]["gsm8k"]
    assert len((run_dir / ref_task["rerun"]["samples"]).read_text().splitlines()) == 6


def test_a_server_that_dies_mid_task_is_not_started_again_and_the_other_variant_still_runs(tmp_path):
    cfg, log = config(tmp_path, "crash_after:3")
    code, rec = run_cli(tmp_path, cfg)
    assert code == 1  # the requests it lost fail the error-rate gate
    v = rec["configs"][0]["variants"]
    assert v["spec"]["server"]["status"] == "died_mid_task" and v["spec"]["tasks"]["gsm8k"]["error_count"] >= 3
    assert v["reference"]["tasks"]["gsm8k"]["num_requests"] == 6
    assert starts(log) == {"reference": 1, "spec": 1}
