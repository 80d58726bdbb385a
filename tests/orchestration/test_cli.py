"""harness.cli: the dry run of the H200 list shows the exact commands; arguments refused
before anything runs exit 2; the console script works without vLLM."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

REPO = Path(__file__).resolve().parents[2]


def dry_run_json(capsys, *args) -> list:
    assert main(["--config", *args, "--dry-run", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_h200_dry_run_json_three_variants_with_flags(capsys):
    plan = dry_run_json(capsys, "models-h200.txt")
    names = [c["name"] for c in plan]
    assert len(names) == 3
    super_ = next(c for c in plan if "Super-120B" in c["name"])
    by = {v["name"]: v["argv"] for v in super_["variants"]}
    # the three variants on the engine's default runner (V1 twins are an opt-in, below)
    assert list(by) == ["reference", "spec_sync", "spec_async"]
    ref, sync, asyn = by["reference"], by["spec_sync"], by["spec_async"]
    assert ref[1:4] == ["-m", "vllm.entrypoints.cli.main", "serve"]  # `vllm serve`, as RemoteOpenAIServer
    assert "--speculative-config" not in ref
    assert "--async-scheduling" not in ref and "--no-async-scheduling" not in ref
    i = sync.index("--speculative-config")
    assert json.loads(sync[i + 1]) == {"method": "mtp", "num_speculative_tokens": 5}
    # vLLM's test's order: server_args, --trust-remote-code, the access-log flag, then
    # evalrun's variant flags, host and port, and RemoteOpenAIServer's --seed 0
    assert sync[sync.index("--trust-remote-code") + 1] == "--disable-uvicorn-access-log"
    assert sync[i + 2] == "--no-async-scheduling" and asyn[i + 2] == "--async-scheduling"
    # evalrun's addition to a speculative variant: vLLM's per-request acceptance
    assert sync[i + 3:i + 5] == asyn[i + 3:i + 5] == ["--per-request-spec-decode-metrics", "detailed"]
    assert sync[-6:] == ["--host", "127.0.0.1", "--port", "{port}", "--seed", "0"]
    for flag, val in (("--tensor-parallel-size", "8"), ("--max-model-len", "4096"), ("--host", "127.0.0.1")):
        assert ref[ref.index(flag) + 1] == val
    assert "--enable-expert-parallel" in ref
    assert ref[4] == "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16"
    # the variants differ only by the speculative flags
    assert [a for a in sync if a not in ("--speculative-config", sync[i + 1], "--no-async-scheduling",
                                         "--per-request-spec-decode-metrics", "detailed")] == ref
    for c in plan:
        assert [v["name"] for v in c["variants"]] == ["reference", "spec_sync", "spec_async"]
        assert all(v["model_runner"] is None for v in c["variants"])
    twins = dry_run_json(capsys, "models-h200.txt", "--v1-runner-variants")
    assert all(c["cost"]["list"]["v1_runner_twins"] is None for c in twins)  # asked for: nothing left to state
    for c in twins:
        v1 = True  # --v1-runner-variants: every config's three variants also on V1
        names = ["reference", "spec_sync", "spec_async"]
        assert [v["name"] for v in c["variants"]] == names + ([n + "_v1" for n in names] if v1 else [])
        for v in c["variants"]:
            assert v["env"]["VLLM_SERVER_DEV_MODE"] == "1"
            if v["name"].endswith("_v1"):
                assert v["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "0" and v["model_runner"] == "v1"
                twin = next(x for x in c["variants"] if x["name"] == v["name"][:-3])
                assert v["argv"] == twin["argv"] and "VLLM_USE_V2_MODEL_RUNNER" not in twin["env"]
            # only the non-speculative reference asks for log-probabilities
            assert v["logprobs"] == (5 if v["name"].startswith("reference") else None)
        comps = {(g["baseline"], g["variant"]) for g in c["gates"] if g["kind"] == "min_output_match"}
        if v1:
            assert {("reference_v1", "spec_async_v1"), ("spec_sync_v1", "spec_async_v1")} <= comps


def test_h200_dry_run_states_what_v1_twins_would_cost(capsys):
    [first, *_] = plan = dry_run_json(capsys, "models-h200.txt")
    t = first["cost"]["list"]["v1_runner_twins"]
    assert t["passes"] == 9 == len(t["variants"]) and all(v.endswith("_v1") for v in t["variants"])
    # each twin costs what its default-runner variant costs (same command, same questions)
    assert t["gpu_seconds"] == pytest.approx(first["cost"]["list"]["gpu_seconds"])
    assert all(c["cost"]["list"]["v1_runner_twins"] == t for c in plan)
    assert main(["--config", "models-h200.txt", "--dry-run"]) == 0
    assert "V1-runner twins: not run" in capsys.readouterr().out


def test_h200_dry_run_text_shows_gates_and_tasks(capsys):
    assert main(["--config", "models-h200.txt", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "accuracy_floor >= 0.85" in out  # 0.93 - 0.08
    assert "questions=1319" in out and "fewshot=5" in out
    assert "--no-async-scheduling" in out and "min_acceptance_length" in out


def test_list_with_missing_entry_exits_2_naming_it(tmp_path, capsys):
    lst = tmp_path / "models-x.txt"
    lst.write_text("Qwen3-Next-80B-A3B-Instruct.yaml\ndoes-not-exist.yaml\n")
    assert main(["--config", str(lst), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "does-not-exist.yaml" in err and f"{lst}:2" in err


def test_unknown_variant_filter_exits_2(capsys):
    assert main(["--config", "models-h200.txt", "--variant", "nope", "--dry-run"]) == 2
    assert "no such variant" in capsys.readouterr().err


def test_console_script_help_and_dry_run_without_vllm():
    """The installed entry point works and the dry run never imports vLLM."""
    code = (
        "import sys; from harness.cli import main; rc = main(['--config','models-h200.txt','--dry-run']);"
        "assert 'vllm' not in sys.modules and 'torch' not in sys.modules, 'dry run imported the engine'; sys.exit(rc)"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    h = subprocess.run([sys.executable, "-m", "harness.cli", "--help"], cwd=REPO, capture_output=True, text=True)
    assert "exit codes" in h.stdout and "--dry-run" in h.stdout


def test_a_run_id_that_is_not_a_folder_name_is_refused(tmp_path, capsys):
    for bad in ("../outside", "a/b", "x" * 300):
        assert main(["--config", "models-cpu.txt", "--run-id", bad, "--results-dir", str(tmp_path)]) == 2
        assert "argument --run-id: name " in capsys.readouterr().err
        assert main(["merge", str(tmp_path), "--run-id", bad, "--results-dir", str(tmp_path)]) == 2
    assert list(tmp_path.iterdir()) == []



def test_a_dry_run_piped_into_head_ends_quietly():
    """``evalrun --config models-h200.txt --dry-run | head -1``: the reader closes the pipe;
    no traceback, exit 0 (a real pipe, a real subprocess)."""
    p = subprocess.Popen([sys.executable, "-m", "harness.cli", "--config", "models-h200.txt", "--dry-run"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.readline()
    p.stdout.close()  # as head does after its line
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "BrokenPipeError" not in err
