"""Variants side by side on disjoint GPUs (harness/engine/pool.py, the runner's loops),
with the FAKE server (tests/fake_vllm.py): this machine has no GPU, so a simulated
8-GPU node is ``CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7`` in the environment and each fake
server records the ``CUDA_VISIBLE_DEVICES`` it was handed, its pid and its start and
stop times (``FAKE_DEVICES_LOG``). Expected device sets and overlaps are worked out
from the configs' tensor-parallel sizes by hand.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from harness.cli import main
from harness.engine.server import processes
from harness.tasks import judging

from ..conftest import alive, default_signals
from .test_runner_fake_server import FAKE

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

REPO = Path(__file__).resolve().parents[2]
EIGHT = "0,1,2,3,4,5,6,7"


def spec_config(tmp_path: Path, name: str, server_args: str, env: dict, variants: int = 3,
                variant_env: dict | None = None, extra: str = "") -> Path:
    """A native config of ``variants`` (reference, spec_sync, spec_async) on the fake (6 questions:
    the false-alarm budget off, as no paired test reaches a share of it there)."""
    names = ["reference", "spec_sync", "spec_async"][:variants]
    body = {
        "reference": "{}",
        "spec_sync": "{speculative_config: {method: mtp, num_speculative_tokens: 2}, async_scheduling: false}",
        "spec_async": "{speculative_config: {method: mtp, num_speculative_tokens: 2}, async_scheduling: true}",
    }
    lines = []
    for v in names:
        spec = body[v]
        if variant_env and v in variant_env:
            spec = spec[:-1] + (", " if spec != "{}" else "") + f"env: {json.dumps(variant_env[v])}}}"
        lines.append(f"  {v}: {spec}")
    text = textwrap.dedent(f"""\
        name: {name}
        model: fake-model
        false_alarm_budget: null
        server_args: "{server_args}"
        startup_max_wait_seconds: 60
        request_timeout_seconds: 30
        max_concurrency: 3
        env: {json.dumps(env)}
        tasks:
          gsm8k: {{kind: synthetic, num_questions: 6, num_fewshot: 1, max_tokens: 8}}
        variants:
        """) + "\n".join(lines) + "\n" + extra
    p = tmp_path / f"{name}.yaml"
    p.write_text(text)
    return p


def model_list(tmp_path: Path, *configs: Path) -> Path:
    p = tmp_path / "models.txt"
    p.write_text("".join(c.name + "\n" for c in configs))
    return p


def events(log: Path) -> dict[int, dict]:
    """pid -> {devices, start, stop} from the fake servers' device log."""
    out: dict[int, dict] = {}
    for line in log.read_text().splitlines():
        e = json.loads(line)
        out.setdefault(e["pid"], {"devices": e["devices"]})[e["event"]] = e["t"]
    return out


def overlapping(a: dict, b: dict) -> bool:
    return a["start"] < b["stop"] and b["start"] < a["stop"]


def run_cli(tmp_path: Path, cfg: Path, *extra: str) -> tuple[int, dict]:
    code = main(["--config", str(cfg), "--python", str(FAKE), "--results-dir", str(tmp_path / "results"),
                 "--run-id", "r", "--quiet", "--no-baseline", *extra])
    path = tmp_path / "results" / "r" / "run.json"
    return code, (json.loads(path.read_text()) if path.exists() else {})


def test_two_tp4_spec_configs_run_two_at_a_time_on_disjoint_halves(tmp_path, monkeypatch):
    """The issue's done-when: two TP4 configs of three variants each on 8 GPUs run two
    servers at a time, four devices each, disjoint while alive together, and take at most
    0.65x the servers' summed lifetime (one after another would be 1x; 0.5x is the bound)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", EIGHT)
    log = tmp_path / "devices.jsonl"
    env = {"FAKE_MODE": "slow_start:1.5", "FAKE_LATENCY": "0.05", "FAKE_DEVICES_LOG": str(log)}
    a = spec_config(tmp_path, "tp4a", "--tensor-parallel-size 4", env)
    b = spec_config(tmp_path, "tp4b", "-tp=4", env)
    code, rec = run_cli(tmp_path, model_list(tmp_path, a, b))
    assert code == 0, rec.get("configs")
    assert [c["name"] for c in rec["configs"]] == ["tp4a", "tp4b"]  # plan order kept
    ev = events(log)
    assert len(ev) == 6 and all("stop" in e for e in ev.values())
    halves = {"0,1,2,3", "4,5,6,7"}
    assert {e["devices"] for e in ev.values()} <= halves
    servers = list(ev.values())
    for i, x in enumerate(servers):
        for y in servers[i + 1:]:
            if overlapping(x, y):
                assert x["devices"] != y["devices"], (x, y)
    most = max(sum(1 for y in servers if y["start"] <= x["start"] < y["stop"]) for x in servers)
    assert most == 2
    wall = max(e["stop"] for e in servers) - min(e["start"] for e in servers)
    lifetime = sum(e["stop"] - e["start"] for e in servers)
    assert wall <= 0.65 * lifetime, (wall, lifetime)
    for c in rec["configs"]:  # each variant's server command got its devices in its environment
        assert {v["env"]["CUDA_VISIBLE_DEVICES"] for v in c["variants"].values()} <= halves
        assert c["comparisons"] == [] or all(x["output_match_rate"] == 1.0 for x in c["comparisons"])


def test_tp8_variants_get_all_eight_devices_one_at_a_time(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", EIGHT)
    log = tmp_path / "devices.jsonl"
    cfg = spec_config(tmp_path, "tp8", "--tensor-parallel-size 8", {"FAKE_DEVICES_LOG": str(log)}, variants=2)
    code, _ = run_cli(tmp_path, cfg)
    assert code == 0
    x, y = events(log).values()
    assert x["devices"] == y["devices"] == EIGHT
    assert not overlapping(x, y)


def test_cpu_host_runs_one_at_a_time_without_device_sets(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU: as this machine
    log = tmp_path / "devices.jsonl"
    cfg = spec_config(tmp_path, "cpu", "--tensor-parallel-size 4", {"FAKE_DEVICES_LOG": str(log)})
    code, rec = run_cli(tmp_path, cfg)
    assert code == 0
    servers = list(events(log).values())
    assert len(servers) == 3
    assert all(e["devices"] == "" for e in servers)  # inherited, never set per server
    assert all(not overlapping(x, y) for i, x in enumerate(servers) for y in servers[i + 1:])
    assert all("CUDA_VISIBLE_DEVICES" not in v["env"] for v in rec["configs"][0]["variants"].values())


def test_max_servers_one_runs_one_at_a_time_on_its_own_devices(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", EIGHT)
    log = tmp_path / "devices.jsonl"
    cfg = spec_config(tmp_path, "seq", "-tp 4", {"FAKE_DEVICES_LOG": str(log)}, variants=2)
    code, _ = run_cli(tmp_path, cfg, "--max-servers", "1")
    assert code == 0
    x, y = events(log).values()
    assert {x["devices"], y["devices"]} <= {"0,1,2,3"}  # the first aligned half each time
    assert not overlapping(x, y)


def test_a_variant_needing_more_devices_than_available_is_refused_before_any_server(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", EIGHT)
    log = tmp_path / "devices.jsonl"
    cfg = spec_config(tmp_path, "big", "--tensor-parallel-size 8 --pipeline-parallel-size 2",
                      {"FAKE_DEVICES_LOG": str(log)}, variants=1)
    code, rec = run_cli(tmp_path, cfg)
    assert code == 2 and rec == {}  # refused before the run folder exists
    assert "big/reference: needs 16 devices, only 8 available" in capsys.readouterr().err
    assert not log.exists()
    code, rec = run_cli(tmp_path, cfg, "--gpus", "4")  # --gpus caps what is available
    assert code == 2 and not log.exists()


def test_a_start_up_failure_does_not_stop_the_variant_beside_it(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", EIGHT)
    log = tmp_path / "devices.jsonl"
    cfg = spec_config(tmp_path, "half", "-tp 4", {"FAKE_DEVICES_LOG": str(log), "FAKE_MODE": "slow_start:1"},
                      variants=2, variant_env={"spec_sync": {"FAKE_MODE": "exit_on_start"}})
    code, rec = run_cli(tmp_path, cfg)
    assert code == 2
    v = rec["configs"][0]["variants"]
    assert v["spec_sync"]["server"]["status"] == "exited_early"
    assert v["reference"]["server"]["status"] == "ready"
    assert v["reference"]["tasks"]["gsm8k"]["num_requests"] == 6


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_while_two_servers_start_leaves_none_alive(tmp_path, sig):
    log = tmp_path / "devices.jsonl"
    cfg = spec_config(tmp_path, "sig", "-tp 4", {"FAKE_DEVICES_LOG": str(log), "FAKE_MODE": "slow_start:600",
                                                  "FAKE_CHILD": "1"}, variants=2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "--config", str(cfg), "--python", str(FAKE),
         "--results-dir", str(tmp_path / "results"), "--run-id", "r", "--quiet", "--no-baseline"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": EIGHT},
        preexec_fn=default_signals,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and (not log.exists() or len(log.read_text().splitlines()) < 2):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    time.sleep(0.5)  # both are waiting for /health
    pids = list(events(log))
    assert len(pids) == 2
    group = [m.pid for p in pids for m in psutil.Process(p).children(recursive=True)] + pids
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    deadline = time.monotonic() + 10
    while any(alive(p) for p in group) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in group if alive(p)]
    rec = json.loads((tmp_path / "results" / "r" / "run.json").read_text())
    assert rec["status"] == "interrupted"
    assert {v["server"]["status"] for v in rec["configs"][0]["variants"].values()} == {"interrupted"}, [
        (v["server"], v["error"]) for v in rec["configs"][0]["variants"].values()]
    assert "every server evalrun started was stopped" in err


def test_an_unexpected_error_in_one_variant_stops_every_server_and_names_its_place(tmp_path, monkeypatch):
    """An exception evalrun did not expect, raised in one variant's thread while the
    variant beside it is starting: every live server is stopped, the record says
    ``error`` with the stage, config and variant of the thread it happened in."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", EIGHT)
    log = tmp_path / "devices.jsonl"
    real = judging.judge_completions

    def judge(config, variant, task, requests, completions):
        if variant == "reference":
            raise RuntimeError("judging broke in reference")
        return real(config, variant, task, requests, completions)

    monkeypatch.setattr(judging, "judge_completions", judge)
    cfg = spec_config(tmp_path, "err", "-tp 4", {"FAKE_DEVICES_LOG": str(log)}, variants=2,
                      variant_env={"spec_sync": {"FAKE_MODE": "slow_start:600"}})
    t0 = time.monotonic()
    code, rec = run_cli(tmp_path, cfg)
    assert code == 2 and time.monotonic() - t0 < 60  # the slow one was stopped, not waited for
    assert rec["status"] == "error"
    err = rec["error"]
    assert (err["stage"], err["config"], err["variant"]) == ("judging", "err", "reference")
    assert "judging broke in reference" in err["message"]
    assert processes().unstopped() == {}
    servers = events(log)
    assert len(servers) == 2 and all("stop" in s for s in servers.values())


def test_a_rerun_for_noise_on_demand_gets_its_own_devices(tmp_path, monkeypatch):
    """``noise_runs_when: unexplained`` starts the baseline's server again after the
    variants: on a GPU node it too leases a device set of its need (never the whole node
    while other servers may run)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", EIGHT)
    log = tmp_path / "devices.jsonl"
    cfg = spec_config(tmp_path, "noise", "-tp 2", {"FAKE_DEVICES_LOG": str(log)}, variants=2,
                      variant_env={"spec_sync": {"FAKE_MODE": "corrupt"}},
                      extra="comparisons:\n  - {baseline: reference, candidate: spec_sync, noise_runs: 2, "
                            "noise_runs_when: unexplained, near_tie_nats: null}\n")
    code, rec = run_cli(tmp_path, cfg)
    assert code == 1  # the corrupt candidate fails its gates
    servers = events(log)
    assert len(servers) == 3  # reference, spec_sync, and the reference again for the rerun
    assert all(len(s["devices"].split(",")) == 2 for s in servers.values())
    assert rec["configs"][0]["variants"]["reference"]["tasks"]["gsm8k"]["rerun"] is not None


def _judging_recorder(monkeypatch, pause: float = 0.0) -> list[dict]:
    """Patch the request tasks' judging to note, per call, the variant and the wall time
    it started and ended (``pause`` seconds of CPU work in between)."""
    real = judging.judge_completions
    calls: list[dict] = []

    def judge(config, variant, task, requests, completions):
        t0 = time.time()
        time.sleep(pause)
        out = real(config, variant, task, requests, completions)
        calls.append({"variant": variant, "start": t0, "end": time.time()})
        return out

    monkeypatch.setattr(judging, "judge_completions", judge)
    return calls


def _variant_of(server: dict, rec: dict) -> str:
    """The variant whose server this device-log entry is (the pid in the record)."""
    (name,) = [v for c in rec["configs"] for v, x in c["variants"].items() if x["server"]["pid"] == server["pid"]]
    return name


def test_a_variant_is_judged_after_its_server_stopped_cpu_host(tmp_path, monkeypatch):
    """One at a time on a CPU host: every judging call of a variant starts after that
    variant's server logged its stop (the reference's inline noise rerun too)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    log = tmp_path / "devices.jsonl"
    calls = _judging_recorder(monkeypatch)
    cfg = spec_config(tmp_path, "cpu", "-tp 4", {"FAKE_DEVICES_LOG": str(log)}, variants=2,
                      extra="comparisons:\n  - {baseline: reference, candidate: spec_sync, noise_runs: 2, "
                            "noise_runs_when: always}\n")
    code, rec = run_cli(tmp_path, cfg)
    assert code == 0, rec.get("configs")
    servers = [dict(e, pid=pid) for pid, e in events(log).items()]
    assert len(servers) == 2
    stops = {_variant_of(s, rec): s["stop"] for s in servers}
    assert sorted(c["variant"] for c in calls) == ["reference", "reference", "spec_sync"]
    for c in calls:
        assert c["start"] > stops[c["variant"]], (c, stops)


def test_the_next_variant_starts_on_the_devices_while_the_last_one_is_judged(tmp_path, monkeypatch):
    """TP8 on 8 GPUs: one server at a time. The first variant's devices go back to the
    pool when its server stops, so the second server starts while the first variant is
    still being judged (3 s of judging here), not after."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", EIGHT)
    log = tmp_path / "devices.jsonl"
    calls = _judging_recorder(monkeypatch, pause=3.0)
    cfg = spec_config(tmp_path, "tp8", "-tp 8", {"FAKE_DEVICES_LOG": str(log)}, variants=2)
    code, rec = run_cli(tmp_path, cfg)
    assert code == 0, rec.get("configs")
    first, second = sorted(events(log).values(), key=lambda e: e["start"])
    assert first["devices"] == second["devices"] == EIGHT and not overlapping(first, second)
    judged_first = [c for c in calls if c["start"] > first["stop"] and c["start"] < second["start"]]
    assert len(judged_first) == 1, (calls, first, second)
    assert judged_first[0]["end"] > second["start"]  # the second server started during it
