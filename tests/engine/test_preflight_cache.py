"""The pre-launch check's cache (harness.engine.preflight_cache): keyed by interpreter,
vLLM and the exact commands; only an all-clear is stored; any doubt runs the check."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.engine import preflight_cache as pc
from harness.engine.preflight import ServerCommand
from harness.engine.probes import vllm_files
from harness.run import runner

from ..orchestration.test_runner_fake_server import FAKE

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)


def _cmd(python: str, *args: str, env: dict | None = None, vid: str = "c/reference") -> ServerCommand:
    return ServerCommand(vid, Path("c.yaml"), (python, "-m", "vllm.entrypoints.openai.api_server", *args), env or {})


def test_the_key_depends_on_the_commands_and_their_environment():
    py = sys.executable  # the venv's interpreter, which has vLLM installed
    a = pc.cache_key([_cmd(py, "--model", "m")])
    assert a is not None and len(a) == 64
    assert pc.cache_key([_cmd(py, "--model", "m")]) == a  # the same installation and command: the same key
    assert pc.cache_key([_cmd(py, "--model", "n")]) != a
    assert pc.cache_key([_cmd(py, "--model", "m", env={"VLLM_X": "1"})]) != a
    assert pc.cache_key([_cmd(py, "--model", "m", vid="c/spec_sync")]) != a


def test_no_key_for_an_interpreter_that_cannot_be_probed(tmp_path):
    assert pc.cache_key([_cmd(str(tmp_path / "missing-python"), "--model", "m")]) is None
    # the fake engine answers -c as the pre-launch check, not the probe: no key
    assert pc.cache_key([_cmd(str(FAKE), "--model", "m")]) is None


def test_store_then_hit_and_every_doubt_misses(tmp_path):
    assert not pc.cached_all_clear(tmp_path, "k", 3)  # no file
    assert pc.store_all_clear(tmp_path, "k", 3) is None
    assert pc.cached_all_clear(tmp_path, "k", 3)
    assert not pc.cached_all_clear(tmp_path, "k", 2)  # another number of commands
    assert not pc.cached_all_clear(tmp_path, "other", 3)
    assert not pc.cached_all_clear(tmp_path, None, 3)
    assert pc.store_all_clear(tmp_path, None, 3) is None and len(
        json.loads((tmp_path / pc.CACHE_NAME).read_text())["keys"]) == 1
    (tmp_path / pc.CACHE_NAME).write_text("{not json")
    assert not pc.cached_all_clear(tmp_path, "k", 3)
    (tmp_path / pc.CACHE_NAME).write_text(json.dumps({"version": 99, "keys": {"k": {"checked": 3}}}))
    assert not pc.cached_all_clear(tmp_path, "k", 3)


def test_the_cache_keeps_the_newest_keys(tmp_path):
    for i in range(pc.MAX_KEYS + 5):
        pc.store_all_clear(tmp_path, f"k{i}", 1)
    keys = json.loads((tmp_path / pc.CACHE_NAME).read_text())["keys"]
    assert len(keys) == pc.MAX_KEYS and "k0" not in keys and f"k{pc.MAX_KEYS + 4}" in keys


def _wrapper(tmp_path: Path) -> Path:
    """An interpreter standing in for the servers': the cache's probe goes to the real
    interpreter (which has vLLM), the pre-launch check and the server to the fake."""
    w = tmp_path / "python-wrapper"
    probe = Path(vllm_files.__file__).name
    w.write_text(f'#!/bin/sh\ncase "$1" in */probes/{probe}) exec {sys.executable} "$@";; esac\n'
                 f'exec {sys.executable} {FAKE} "$@"\n')
    w.chmod(w.stat().st_mode | stat.S_IXUSR)
    return w


def test_a_second_identical_run_takes_the_all_clear_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    calls = []
    real = runner.check_server_commands
    monkeypatch.setattr(runner, "check_server_commands", lambda cmds: calls.append(len(cmds)) or real(cmds))
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: c\nmodel: fake-model\nstartup_max_wait_seconds: 60\nrequest_timeout_seconds: 30\n"
                   "tasks:\n  t: {kind: synthetic, num_questions: 3, num_fewshot: 1, max_tokens: 8}\n"
                   "variants:\n  reference: {}\n")
    wrapper = _wrapper(tmp_path)

    def run(run_id: str, *extra: str) -> dict:
        code = main(["--config", str(cfg), "--python", str(wrapper), "--results-dir", str(tmp_path / "res"),
                     "--run-id", run_id, "--quiet", "--no-baseline", *extra])
        assert code == 0
        return json.loads((tmp_path / "res" / run_id / "run.json").read_text())["preflight"]

    first = run("a")
    assert calls == [1] and first["cached"] is False and first["checked"] == 1
    second = run("b")
    assert calls == [1] and second["cached"] is True and second["checked"] == 1 and second["problems"] == []
    third = run("c", "--no-preflight-cache")
    assert calls == [1, 1] and third["cached"] is False
    os.utime(wrapper, ns=(1, 1))  # the interpreter changed: checked again
    assert run("d")["cached"] is False and calls == [1, 1, 1]


def test_a_changed_pre_launch_check_does_not_reuse_an_older_all_clear(tmp_path, monkeypatch):
    """The key covers the check's own program (probes/server_args.py), as the build cache's
    plugin hash covers the plugin package: another check, another key."""
    from harness.engine.probes import server_args  # noqa: PLC0415 - patched in this test only

    py = sys.executable
    a = pc.cache_key([_cmd(py, "--model", "m")])
    changed = tmp_path / "server_args.py"
    changed.write_text(Path(server_args.__file__).read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
    monkeypatch.setattr(server_args, "__file__", str(changed))
    b = pc.cache_key([_cmd(py, "--model", "m")])
    assert a is not None and b is not None and a != b
