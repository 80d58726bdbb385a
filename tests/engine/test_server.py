"""The server lifecycle (harness/engine/server.py) and the registry of started and live
servers (harness/engine/registry.py): start-up statuses, the stop grace, the hurry and
interrupting flags.

The server here is the FAKE one (tests/fake_vllm.py): the conditions checked (a server
that keeps running for seconds after SIGTERM, a stop cut short by a second signal) cannot
be produced on demand by the real engine, and it starts in a fraction of a second. Each
test that starts one gives it its own :class:`EngineProcesses`, so the process-wide
registry of the other tests is untouched. Expected pids come from psutil's view of this
process's children, not from the server object.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from harness.cli import main
from harness.engine import registry
from harness.engine.server import EngineProcesses, ServerStartError, VllmServer, processes

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

FAKE = Path(__file__).resolve().parents[1] / "fake_vllm.py"
ARGV = [str(FAKE), "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--port", "{port}"]


def fake_server(tmp_path: Path, reg: EngineProcesses, **env: str) -> VllmServer:
    return VllmServer(ARGV, {"FAKE_MODE": "ok", **env}, tmp_path / "cfg" / "v.log", name="cfg/v",
                      startup_timeout=30, processes=reg)


def child_pid_serving(port: int) -> int:
    """The pid of this process's child whose command line asks for ``port``."""
    found = [p.pid for p in psutil.Process().children()
             if str(FAKE) in p.cmdline() and str(port) in p.cmdline()]
    assert len(found) == 1, found
    return found[0]


def test_a_started_server_is_live_and_unstopped_until_its_stop_finishes(tmp_path):
    reg = EngineProcesses()
    srv = fake_server(tmp_path, reg)
    assert reg.live_servers() == [] and reg.unstopped() == {}
    with srv:
        pid = child_pid_serving(srv.port)
        assert reg.live_servers() == [srv]
        assert reg.unstopped() == {"cfg/v": [pid]}
        assert srv not in processes().live_servers()
    assert reg.live_servers() == [] and reg.unstopped() == {}
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_signal_all_reaches_every_live_group(tmp_path):
    reg = EngineProcesses()
    with fake_server(tmp_path / "a", reg) as a, fake_server(tmp_path / "b", reg) as b:
        pids = {child_pid_serving(a.port), child_pid_serving(b.port)}
        reg.signal_all(signal.SIGKILL)
        assert {a.pid, b.pid} == pids
        assert a.wait_exit(10) == b.wait_exit(10) == -signal.SIGKILL   # killed, not stopped


def test_hurry_cuts_a_stop_grace_short_and_never_skips_the_teardown(tmp_path):
    # the fake keeps running 30 s after SIGTERM; the stop's grace is 60 s
    reg = EngineProcesses()
    srv = fake_server(tmp_path, reg, FAKE_EXIT_SECONDS="30")
    srv.start()
    pid = child_pid_serving(srv.port)
    stopper = threading.Thread(target=srv.stop, kwargs={"grace": 60})
    t0 = time.monotonic()
    stopper.start()
    time.sleep(1.0)
    assert srv.alive() and reg.live_servers() == [srv]   # still in its grace
    reg.hurry()
    stopper.join(timeout=20)
    assert not stopper.is_alive() and time.monotonic() - t0 < 20
    assert reg.hurrying() and srv.exit_code == -signal.SIGKILL
    assert reg.unstopped() == {} and srv.leftover_pids == []
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_an_interrupting_registry_says_what_the_stop_waits_for_at_once(tmp_path):
    # the fake exits 1 s after SIGTERM: without a signal the stop is quiet for 2 s
    said: dict[str, list[str]] = {"quiet": [], "interrupting": []}
    for case in said:
        reg = EngineProcesses()
        reg.set_event_sink(said[case].append)
        reg.set_stop_grace(10)
        if case == "interrupting":
            reg.mark_interrupting()
        with fake_server(tmp_path / case, reg, FAKE_EXIT_SECONDS="1") as srv:
            pid = child_pid_serving(srv.port)
        assert reg.interrupting() is (case == "interrupting")
    assert said["quiet"] == []
    assert len(said["interrupting"]) == 1
    assert said["interrupting"][0].startswith(f"cfg/v: stopping the vLLM server (process group {pid}, processes [")
    assert "SIGTERM sent, waiting up to 10s" in said["interrupting"][0]
    assert not processes().interrupting()   # the process-wide registry saw nothing


def test_a_failing_sink_never_breaks_a_message(capsys):
    reg = EngineProcesses()

    def broken(msg: str) -> None:
        raise RuntimeError(msg)

    reg.set_event_sink(broken)
    reg.event("cfg/v: sending SIGKILL to process group 4242")
    assert capsys.readouterr().err == "evalrun: cfg/v: sending SIGKILL to process group 4242\n"


def test_the_first_stopping_signal_marks_the_registry_and_raises_a_second_hurries(tmp_path):
    reg = EngineProcesses()
    saved = {s: signal.getsignal(getattr(signal, s)) for s in registry.STOP_SIGNALS}
    first: list[str] = []
    try:
        reg.install_stop_handlers(first.append)
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)   # the handler raises here
        assert first == ["SIGTERM"] and reg.interrupting() and not reg.hurrying()
        os.kill(os.getpid(), signal.SIGHUP)   # no live server: no message, no interrupt
        time.sleep(0.1)
        assert first == ["SIGTERM"] and reg.hurrying()
    finally:
        for name, handler in saved.items():
            signal.signal(getattr(signal, name), handler)


@pytest.mark.parametrize("kind", ["missing", "not_executable"])
def test_server_launch_failure_is_a_status_not_a_traceback(tmp_path, kind):
    # without the pre-launch check (e.g. a command that is not `python -m module`)
    exe = tmp_path / "python"
    if kind == "not_executable":
        exe.write_text("#!/bin/sh\n")
        os.chmod(exe, 0o644)
    srv = VllmServer([str(exe), "-m", "x", "--port", "{port}"], {}, tmp_path / "v.log", name="c/v", startup_timeout=5)
    with pytest.raises(ServerStartError) as e:
        with srv:
            pass
    assert e.value.status == "launch_failed" and str(exe) in str(e.value)


def test_stop_grace_setting(monkeypatch):
    monkeypatch.setenv(registry.STOP_GRACE_ENV, "2.5")
    assert processes().stop_grace() == 2.5
    processes().set_stop_grace(1)
    try:
        assert processes().stop_grace() == 1.0
    finally:
        processes().set_stop_grace(None)
    monkeypatch.delenv(registry.STOP_GRACE_ENV)
    # vLLM's RemoteVLLMServer: 15 s after SIGTERM; a cancelled CI job: 5 s
    assert processes().stop_grace() == registry.DEFAULT_STOP_GRACE == 15.0
    assert registry.CANCEL_STOP_GRACE == 5.0
    monkeypatch.setenv(registry.STOP_GRACE_ENV, "soon")
    with pytest.raises(ValueError, match="EVALRUN_STOP_GRACE_SECONDS='soon'"):
        processes().stop_grace()
    monkeypatch.delenv(registry.STOP_GRACE_ENV)
    assert main(["--config", "models-cpu.txt", "--stop-grace", "-1"]) == 2


def test_a_vllm_serve_command_starts_through_the_vllm_cli_launcher(tmp_path):
    # the plan's `vllm serve` command (python -m vllm.entrypoints.cli.main serve MODEL ...)
    # is executed as vLLM's console script entry point, by path (launchers/vllm_cli.py)
    argv = [str(FAKE), "-m", "vllm.entrypoints.cli.main", "serve", "m", "--port", "{port}"]
    reg = EngineProcesses()
    with VllmServer(argv, {"FAKE_MODE": "ok"}, tmp_path / "v.log", name="cfg/v", startup_timeout=30,
                    processes=reg) as srv:
        cmd = psutil.Process(child_pid_serving(srv.port)).cmdline()
    launcher = Path(__file__).resolve().parents[2] / "harness" / "engine" / "launchers" / "vllm_cli.py"
    assert cmd[-5:] == [str(launcher), "serve", "m", "--port", str(srv.port)]
    assert (tmp_path / "v.log").read_text().splitlines()[0] == \
        f"# {FAKE} {launcher} serve m --port {srv.port}"


def test_stop_waits_for_the_devices_memory_to_come_back(tmp_path):
    # a fake NVML: GPU 3 holds 40 of 80 GiB until the third reading after the stop,
    # 10 GiB before the start (vLLM's RemoteVLLMServer waits the same way, up to 30 s)
    gib = 1024 ** 3
    readings = iter([{"3": (10 * gib, 80 * gib)}, {"3": (40 * gib, 80 * gib)}, {"3": (40 * gib, 80 * gib)},
                     {"3": (11 * gib, 80 * gib)}])
    seen: list[list[str]] = []

    def probe(devices):
        seen.append(list(devices))
        return next(readings)

    reg = EngineProcesses()
    said: list[str] = []
    reg.set_event_sink(said.append)
    srv = VllmServer(ARGV, {"FAKE_MODE": "ok", "CUDA_VISIBLE_DEVICES": "3"}, tmp_path / "v.log", name="cfg/v",
                     startup_timeout=30, processes=reg, memory_probe=probe)
    with srv:
        assert seen == [["3"]]                       # read once, before the start
    assert seen == [["3"]] * 4                       # then until back within 2% of 80 GiB of 10 GiB
    assert not said                                  # under vLLM's 10 s between messages


def test_a_cpu_server_waits_for_no_memory(tmp_path):
    calls: list[object] = []
    reg = EngineProcesses()
    with VllmServer(ARGV, {"FAKE_MODE": "ok", "CUDA_VISIBLE_DEVICES": ""}, tmp_path / "v.log", name="cfg/v",
                    startup_timeout=30, processes=reg, memory_probe=calls.append):
        pass
    assert calls == []                               # no device handed: nothing read


def test_a_hub_models_weights_are_asked_for_before_the_clock_and_a_failure_is_said(tmp_path):
    # the fake interpreter cannot answer the download step (no vLLM): the start goes on and
    # the log says so; an offline hub is never asked
    argv = [str(FAKE), "-m", "vllm.entrypoints.cli.main", "serve", "org/m", "--port", "{port}"]
    reg = EngineProcesses()
    with VllmServer(argv, {"FAKE_MODE": "ok"}, tmp_path / "a.log", name="cfg/a", startup_timeout=30, processes=reg):
        pass
    lines = (tmp_path / "a.log").read_text().splitlines()
    assert lines[2] == "# evalrun: fetching the weights of org/m before the start-up clock (as RemoteOpenAIServer)"
    assert any(x.startswith("# evalrun: weights not fetched before the start (the download step exited with code 1")
               for x in lines)
    with VllmServer(argv, {"FAKE_MODE": "ok", "HF_HUB_OFFLINE": "1"}, tmp_path / "b.log", name="cfg/b",
                    startup_timeout=30, processes=reg):
        pass
    assert "fetching" not in (tmp_path / "b.log").read_text()
