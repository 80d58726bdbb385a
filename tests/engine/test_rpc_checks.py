"""Start-up checks called as vLLM's test calls them, on vLLM's real
config DeepSeek-V4-Flash-EPLB-TEP4.yaml and its extension eplb_checks.py (copied with their
source named: tests/data/vllm_gsm8k/configs/skips_and_checks/README.md). The server is an
httpx MockTransport answering as vLLM's ``POST /collective_rpc`` does
(``{"results": [one value per worker]}``); no process, no socket."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.engine.rpc_checks import missing_extension, run_checks, worker_extension

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm_gsm8k" / "configs" / "skips_and_checks"
EPLB = DATA / "DeepSeek-V4-Flash-EPLB-TEP4.yaml"
NAMES = yaml.safe_load(EPLB.read_text())["startup_rpc_checks"]


def vllm_endpoint(answer):
    """A transport answering ``POST /collective_rpc`` with ``answer(method)`` -> (status, body)."""
    seen = []

    def handle(request: httpx.Request) -> httpx.Response:
        assert request.method == "POST" and request.url.path == "/collective_rpc"
        body = json.loads(request.content)
        seen.append(body)
        status, out = answer(body["method"])
        return httpx.Response(status, json=out)
    return httpx.MockTransport(handle), seen


def test_the_real_config_names_its_check_and_extension():
    assert NAMES == ["check_eplb_replica_slots"]
    [ref] = build_plan([load_config(EPLB)], python="/usr/bin/python3").configs[0].variants
    assert worker_extension(ref.argv) == "tests.evals.gsm8k.eplb_checks.EplbCheckExtension"
    assert ref.env["VLLM_SERVER_DEV_MODE"] == "1"


def test_every_worker_answering_none_passes():
    t, seen = vllm_endpoint(lambda m: (200, {"results": [None, None, None, None]}))
    [o] = run_checks("http://127.0.0.1:8000", NAMES, transport=t)
    assert seen == [{"method": "check_eplb_replica_slots"}]      # vLLM's call, nothing more
    assert o.verdict == "passed" and o.results == [None] * 4


def test_a_workers_message_fails_with_it():
    msg = "3 redundant expert slots differ from their source"   # eplb_checks.py's own words
    t, _ = vllm_endpoint(lambda m: (200, {"results": [None, msg, None, None]}))
    [o] = run_checks("http://127.0.0.1:8000", NAMES, transport=t)
    assert o.verdict == "failed" and o.detail.endswith(f"1 of 4 worker(s) report: worker 1: {msg}")


@pytest.mark.parametrize(("status", "body", "says"), [
    (404, {"detail": "Not Found"}, "needs VLLM_SERVER_DEV_MODE=1"),
    (500, {"error": "AttributeError: no method check_eplb_replica_slots"}, "HTTP 500"),
    (200, {"results": []}, "expected"),
    (200, ["no dict"], "expected"),
])
def test_anything_else_is_an_error_never_a_pass(status, body, says):
    t, _ = vllm_endpoint(lambda m: (status, body))
    [o] = run_checks("http://127.0.0.1:8000", NAMES, transport=t)
    assert o.verdict == "error" and says in o.detail


def test_a_missing_extension_makes_every_check_not_run_without_calling():
    t, seen = vllm_endpoint(lambda m: (200, {"results": [None]}))
    [o] = run_checks("http://x", NAMES, missing="the worker extension ... is not installed", transport=t)
    assert o.verdict == "not_run" and seen == []


@pytest.mark.integration  # runs the probe in a subprocess
def test_the_extension_is_found_from_vllms_tree_only(tmp_path):
    pkg = tmp_path / "tests" / "evals" / "gsm8k"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "tests", tmp_path / "tests" / "evals", pkg):
        (d / "__init__.py").write_text("")
    shutil.copy(DATA / "eplb_checks.py.txt", pkg / "eplb_checks.py")
    ext = "tests.evals.gsm8k.eplb_checks.EplbCheckExtension"
    assert missing_extension(sys.executable, ext, cwd=tmp_path) is None
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    why = missing_extension(sys.executable, ext, cwd=elsewhere)
    assert why is not None and "tests.evals.gsm8k.eplb_checks cannot be imported" in why
