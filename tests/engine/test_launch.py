"""How a planned command is executed (harness/engine/launch.py): ``vllm serve`` through the
console script's entry point, the pre-launch check's view of it, and which models are
fetched before the start-up clock (vLLM's RemoteOpenAIServer: every model that is not a
local folder)."""

from __future__ import annotations

from pathlib import Path

from harness.engine.launch import fetch_reason, launch_argv, parser_check_argv

SERVE = ["/py", "-m", "vllm.entrypoints.cli.main", "serve"]
LAUNCHER = Path(__file__).resolve().parents[2] / "harness" / "engine" / "launchers" / "vllm_cli.py"


def test_vllm_serve_runs_through_the_launcher_and_nothing_else_does():
    assert launch_argv([*SERVE, "org/m", "--port", "1"]) == ["/py", str(LAUNCHER), "serve", "org/m", "--port", "1"]
    old = ["/py", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]
    assert launch_argv(old) == old


def test_the_pre_launch_check_parses_the_same_flags_with_the_server_module():
    assert parser_check_argv([*SERVE, "org/m", "-tp", "2"]) == \
        ("vllm.entrypoints.openai.api_server", ["--model", "org/m", "-tp", "2"])
    assert parser_check_argv(["/py", "-m", "mod", "--x"]) == ("mod", ["--x"])
    assert parser_check_argv(["/py", "script.py"]) is None


def test_hub_models_are_fetched_local_and_offline_ones_untouched(tmp_path):
    assert fetch_reason([*SERVE, "deepseek-ai/DeepSeek-V4-Flash"], {}) is None
    assert fetch_reason([*SERVE, str(tmp_path)], {}) == f"{tmp_path} is a local folder"
    assert fetch_reason([*SERVE, "org/m"], {"HF_HUB_OFFLINE": "1"}) == "the hub is offline (HF_HUB_OFFLINE)"
    assert fetch_reason([*SERVE, "org/m"], {"HF_HUB_OFFLINE": "0"}) is None
    assert fetch_reason(["/py", "-m", "vllm.entrypoints.openai.api_server", "--model", "org/m"], {}) == \
        "not a vllm serve command"
