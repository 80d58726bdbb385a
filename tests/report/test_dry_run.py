"""harness.report.dry_run, through ``evalrun --dry-run``: the nightly's schedule and cost
previewed from any host (``--dry-run --gpus 8`` on a host without GPUs plans the 8-device
node and says the devices are assumed; a real run with ``--gpus 8`` there refuses before
anything starts), ``--variant`` lists only the chosen variants, commands paste into a
shell, detectable drops by hand, the subset-size warning's margin. No engine."""

from __future__ import annotations

import json
import math
import shlex
import textwrap
from pathlib import Path
from statistics import NormalDist

import pytest

from harness.cli import main
from harness.config.loader import load_config
from harness.engine import devices as D
from harness.report.dry_run import subset_warnings

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "model_lists" / "models-h200.txt"
PY = "/usr/bin/python3"  # no torch here: the device probe finds none


@pytest.fixture
def cpu_host(monkeypatch):
    """No CUDA_VISIBLE_DEVICES, no NVML: a host without GPUs, whatever this machine is."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(D, "_nvml_count", lambda: None)


@pytest.mark.usefixtures("cpu_host")
def test_dry_run_with_gpus_plans_the_node_on_a_cpu_host(capsys, tmp_path):
    assert main(["--config", str(H200), "--dry-run", "--json", "--gpus", "8", "--python", PY,
                 "--results-dir", str(tmp_path)]) == 0
    plan = json.loads(capsys.readouterr().out)
    whole = plan[0]["cost"]["list"]
    assert whole["devices"] == [str(i) for i in range(8)] and whole["gpu_seconds"] > 0
    assert any("planned on 8 device(s) from --gpus 8, although this host has 0" in n for n in whole["notes"])
    # the 8-way Nemotron Super servers take the whole node; the 4-way ones two at a time
    slots = [s for c in plan for s in c["cost"]["schedule"]]
    assert {len(s["devices"]) for s in slots} == {8, 4}
    assert main(["--config", str(H200), "--dry-run", "--gpus", "8", "--python", PY,
                 "--results-dir", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "8 device(s) (0,1,2,3,4,5,6,7)" in text and "CPU host" not in text


@pytest.mark.usefixtures("cpu_host")
def test_dry_run_without_gpus_on_a_cpu_host_stays_sequential(capsys, tmp_path):
    assert main(["--config", str(H200), "--dry-run", "--python", PY, "--results-dir", str(tmp_path)]) == 0
    assert "CPU host (no devices); sequential" in capsys.readouterr().out


@pytest.mark.usefixtures("cpu_host")
def test_a_run_with_gpus_on_a_host_without_them_refuses(capsys, tmp_path):
    code = main(["--config", str(H200), "--gpus", "8", "--python", PY, "--results-dir", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert "--gpus 8: asks for 8 device(s), this host has 0" in err and "only --dry-run" in err
    assert not any(tmp_path.iterdir())  # refused before a run folder exists


def test_count_above_the_devices_is_refused_and_planned_only_by_the_dry_run():
    with pytest.raises(D.DeviceError, match="asks for 8 device.s., this host has 4"):
        D.cap_devices(("0", "1", "2", "3"), "8")
    assert D.dry_run_devices(("0", "1", "2", "3"), "8")[0] == tuple(str(i) for i in range(8))
    assert D.dry_run_devices(("0", "1", "2", "3"), "2") == (("0", "1"), None)


def test_dry_run_variant_lists_only_the_chosen_variants(capsys):
    assert main(["--config", "models-h200.txt", "--dry-run", "--variant", "reference"]) == 0
    out = capsys.readouterr().out
    assert "variant reference:" in out and "variant spec_sync:" not in out and "variant spec_async:" not in out
    assert "variants left out (--variant): spec_sync, spec_async" in out
    assert "--speculative-config" not in out.split("variants left out")[0]
    assert main(["--config", "models-h200.txt", "--dry-run", "--json", "--variant", "spec_async"]) == 0
    plan = json.loads(capsys.readouterr().out)
    for c in plan:
        assert [v["name"] for v in c["variants"]] == ["spec_async"]
        assert {g["variant"] for g in c["gates"]} == {"spec_async"}
        assert all(g["baseline"] in (None, "spec_async") for g in c["gates"])


def test_dry_run_command_pastes_into_a_shell(tmp_path, capsys):
    cfg = tmp_path / "q.yaml"
    cfg.write_text(textwrap.dedent("""\
        model_name: "org/my model"
        accuracy_threshold: 0.5
        server_args: >-
          --served-model-name "name with spaces" --chat-template '{{ x }}'
          --speculative-config '{"method":"mtp","num_speculative_tokens":2}'
        env: {A_VAR: "two words"}
        """))
    assert main(["--config", str(cfg), "--dry-run", "--python", "/usr/bin/python3"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "variant spec_sync:" in x)
    cmd = out.splitlines()[out.splitlines().index(line) + 1].split("command: ", 1)[1]
    words = shlex.split(cmd)
    env = [w for w in words[:5] if "=" in w and not w.startswith("-")]
    argv = words[len(env):]
    # sorted assignments: the config's, vLLM's test's start-up timeout and process start
    # method (vLLM form), and evalrun's dev endpoint
    assert env == ["A_VAR=two words", "VLLM_ENGINE_READY_TIMEOUT_S=1200", "VLLM_SERVER_DEV_MODE=1",
                   "VLLM_WORKER_MULTIPROC_METHOD=spawn"]
    # vLLM's test's server: `vllm serve MODEL ...` (RemoteOpenAIServer), the console
    # script named as such, run in --python's interpreter as its entry point module
    assert argv[:3] == ["vllm", "serve", "org/my model"]
    assert "vllm = /usr/bin/python3 -m vllm.entrypoints.cli.main" in out
    assert argv[argv.index("--port") + 1] == "8000"               # filled, not "{port}"
    assert argv[argv.index("--served-model-name") + 1] == "name with spaces"
    assert argv[argv.index("--chat-template") + 1] == "{{ x }}"
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {"method": "mtp", "num_speculative_tokens": 2}



def test_dry_run_states_detectable_drops(tmp_path, capsys):
    cfg = tmp_path / "m.yaml"
    cfg.write_text(
        textwrap.dedent("""\
        model_name: org/m
        accuracy_threshold: 0.9
        tolerance: 0.05
        num_questions: 200
        calibration_questions: 1319
        server_args: >-
          --speculative-config '{"method": "mtp", "num_speculative_tokens": 2}'
        """)
    )
    assert main(["--config", str(cfg), "--dry-run", "--json"]) == 0
    (plan,) = json.loads(capsys.readouterr().out)
    (dd,) = plan["detectable_drops"]
    z = NormalDist().inv_cdf
    n, p = 200, 0.9
    assert dd["floor"]["test_drop"] == pytest.approx((z(0.95) + z(0.8)) * math.sqrt(p * (1 - p) / n))
    # finite-population margin for 200 of 1319 calibration questions (Cochran, Theorem 2.2)
    margin = z(0.95) * math.sqrt(p * (1 - p) * (1319 - n) / (n * (1319 - 1)))
    assert dd["floor"]["margin"] == pytest.approx(margin)
    assert dd["floor"]["gate_drop"] == pytest.approx(0.05 + margin + z(0.8) * math.sqrt(p * (1 - p) / n))
    # paired: solve Connor's equation d sqrt(n) = z_a sqrt(psi) + z_b sqrt(psi - d^2) by bisection
    psi = 0.05
    lo, hi = 0.0, psi
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid * math.sqrt(n) - z(0.95) * math.sqrt(psi) - z(0.8) * math.sqrt(psi - mid * mid) < 0:
            lo = mid
        else:
            hi = mid
    assert [q["test_drop"] for q in dd["paired"]] == pytest.approx([lo, lo])  # two gated comparisons
    assert main(["--config", str(cfg), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert f"detects drops >= {lo:.3f} assuming discordance 0.05" in text
    assert "threshold measured on 1319 questions, this run asks 200" in text


def test_subset_warning_numbers(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text("model_name: a/b\naccuracy_threshold: 0.9\nnum_questions: 200\n")
    [w] = subset_warnings(load_config(p))
    # one-sided 95% finite-population margin, Cochran 1977 Thm 2.2: z * sqrt(p(1-p)(N-n)/(n(N-1)))
    z = 1.6448536269514722
    margin = z * math.sqrt(0.9 * 0.1 * (1319 - 200) / (200 * 1318))
    assert w.margin == pytest.approx(margin, rel=1e-9)
    assert w.floor == pytest.approx(0.82) and w.fair_floor == pytest.approx(0.82 - margin, abs=1e-6)
    assert "calibration_questions: 1319" in w.message
    # no warning when the run covers the set, or when calibration_questions is given
    p.write_text("model_name: a/b\naccuracy_threshold: 0.9\n")
    assert subset_warnings(load_config(p)) == []
    p.write_text("model_name: a/b\naccuracy_threshold: 0.9\nnum_questions: 200\ncalibration_questions: 1319\n")
    assert subset_warnings(load_config(p)) == []


def test_the_dry_run_says_when_numerics_noise_is_on(monkeypatch, capsys):
    """EVALRUN_NUMERICS_NOISE reaches every server a run starts, so the plan names it; unset,
    the plan says nothing of it (docs/numerics.md)."""
    monkeypatch.delenv("EVALRUN_NUMERICS_NOISE", raising=False)
    assert main(["--config", str(H200), "--dry-run"]) == 0
    assert "numerics noise" not in capsys.readouterr().out
    monkeypatch.setenv("EVALRUN_NUMERICS_NOISE", "0.25")
    assert main(["--config", str(H200), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "numerics noise: 0.25 (0.25 nats; EVALRUN_NUMERICS_NOISE)" in out and "a fresh seed per server start" in out


def test_the_json_says_which_false_fail_estimate_is_the_runs(capsys):
    """With the default budget the old family-wise estimate is labelled as not applying;
    the budget's bound is the run's (docs/gates.md, "The false-alarm budget")."""
    assert main(["--config", str(H200), "--dry-run", "--json"]) == 0
    for entry in json.loads(capsys.readouterr().out):
        assert entry["family_false_fail"]["applies"] is False
        assert entry["false_alarm_budget"]["false_fail_bound"] <= 0.01 + 1e-12  # Holm: at most the budget
