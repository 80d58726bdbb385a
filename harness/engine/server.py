"""vLLM server process lifecycle: free port, own process group, readiness, teardown.

Follows vLLM's own test utility (``tests/utils.py: RemoteOpenAIServer``): pick a free
port, start the server in a new process group, poll ``/health`` while checking the
process is alive, and always tear down (terminate the group, wait, kill, sweep
children). The server's stdout and stderr go to a log file that is kept with the
run record.

Fail-closed additions (docs/fail-closed.md):

* every start-up ends in a named status (:data:`STARTUP_STATUSES`): ``launch_failed``
  (the command cannot be executed), ``exited_early`` (with exit code and seconds;
  seen at once: the wait for ``/health`` is a wait on the process), ``not_ready_timeout``,
  ``ready``; the runner adds ``died_mid_task``;
* the pid, process group, start time and command line of each server are written
  beside its log (``<variant>.pid.json``, atomically) so a later run can identify a
  server an earlier one left (:mod:`harness.engine.leftovers`);
* teardown cannot be skipped by a second signal: :meth:`EngineProcesses.hurry` (the second Ctrl-C)
  sends SIGKILL to every live group, and :meth:`VllmServer.stop` finishes its work
  even when interrupted, then checks that no process of the group remains.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import httpx
import psutil

from harness.engine import registry
from harness.engine.devices import given_devices
from harness.engine.gpu_memory import MemoryProbe, MemoryReading, nvml_memory, wait_for_release
from harness.engine.launch import fetch_weights, launch_argv
from harness.engine.leftovers import ProcessIdentity, process_identity, write_pid_file
from harness.engine.probes import command, group_watchdog

# the registry's names, importable from here as before
from harness.engine.registry import EngineProcesses as EngineProcesses
from harness.engine.registry import processes as processes

#: Start-up outcomes recorded per variant (``vrec["server"]["status"]``).
STARTUP_STATUSES = ("launch_failed", "exited_early", "not_ready_timeout", "ready", "died_mid_task")


class ServerStartError(RuntimeError):
    """The server could not be launched, exited, did not become healthy in time, or
    died later. The message names the variant, the exit code or timeout, the log file
    and the last lines of the log.

    Attributes:
        status: one of :data:`STARTUP_STATUSES` (never ``ready``).
        exit_code: the process's exit code (negative: killed by that signal), or None.
        seconds: seconds from launch to the failure, or None.
    """

    def __init__(self, message: str, status: str = "exited_early", exit_code: int | None = None,
                 seconds: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.exit_code = exit_code
        self.seconds = seconds


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def tail(path: Path, n: int = 30) -> str:
    """The last ``n`` lines of a text file ('' when it does not exist)."""
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def _group_members(pgid: int) -> list[psutil.Process]:
    """Live processes whose process group is ``pgid`` (zombies excluded)."""
    out = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error, OSError):
            continue
    return out


# ---------------------------------------------------------------- parent death, watchdog

#: prctl(2) option: the signal a process receives when its parent thread exits.
PR_SET_PDEATHSIG = 1


def _pdeathsig_preexec() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the server receive SIGKILL when evalrun dies
    (Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, as vLLM sets for its own worker
    processes), or None where prctl does not exist. libc is loaded here, before the
    fork; the child only calls it. If evalrun died between fork and prctl, the child
    kills itself (its parent is then no longer the launching process).

    The signal fires when the *thread* that launched the server ends (prctl(2)), so a
    server must be started from a thread that lives as long as the server (the main
    thread; a worker thread that returns would take its server with it)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes  # noqa: PLC0415 - Linux only, used only there

        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def start_watchdog(pgid: int) -> tuple[subprocess.Popen, int] | None:
    """Start a watchdog process (:mod:`harness.engine.probes.group_watchdog`, run by path)
    that SIGKILLs process group ``pgid`` as soon as this process ends (exit, crash or
    SIGKILL: the kernel closes the pipe's write end).

    Returns:
        ``(watchdog process, write end of its pipe)``: close the write end to release
        it (it then kills what is left of the group and exits), or None when it
        cannot be started (the parent-death signal still covers the server itself).
    """
    try:
        r, w = os.pipe()  # both ends close-on-exec: no server inherits the write end
        proc = subprocess.Popen(
            command(sys.executable, group_watchdog, str(pgid)), stdin=r, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,  # outlives a kill of evalrun's group
        )
        os.close(r)
        return proc, w
    except OSError:
        return None


# ---------------------------------------------------------------- the server


def _kill_children(children: list[psutil.Process]) -> None:
    """Kill, one by one, the server's children that left its process group (or outlived
    the leader), and wait up to 5 s for them."""
    for ch in children:
        try:
            if ch.is_running() and ch.status() != psutil.STATUS_ZOMBIE:
                ch.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(children, timeout=5)


class VllmServer:
    """One OpenAI-compatible vLLM server process.

    Use as a context manager::

        with VllmServer(argv, env, log_path, name="cfg/spec", startup_timeout=600) as srv:
            srv.base_url  # "http://127.0.0.1:PORT"

    Args:
        argv: the full command; ``{port}`` is replaced by a free port.
        env: variables added to this process's environment for the server.
        log_path: file receiving the server's stdout and stderr; the PID record
            goes beside it (``<stem>.pid.json``).
        name: the variant id, used in messages.
        startup_timeout: seconds to wait for ``/health`` to answer 200.
        host: the interface the server binds to (loopback).
        on_wait: called about once a second while waiting, with elapsed seconds.
        processes: the registry the server is entered in while it lives (default: the
            process-wide one, :func:`processes`).

    Attributes (after :meth:`start`):
        status: ``ready`` or the failure status (:data:`STARTUP_STATUSES`).
        startup_seconds: seconds from launch to ready, else None.
        exit_code: the exit code once the process ended, else None.
        leftover_pids: after :meth:`stop`, processes of the group still alive (should
            be empty; non-empty means the teardown failed and says so).

    Raises:
        ServerStartError: on ``__enter__`` when the command cannot be executed, the
            process exits, or the timeout passes.
    """

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
        name: str,
        startup_timeout: float = 600,
        host: str = "127.0.0.1",
        on_wait: Callable[[float], None] | None = None,
        processes: EngineProcesses | None = None,
        memory_probe: MemoryProbe = nvml_memory,
    ) -> None:
        self.processes = registry.processes() if processes is None else processes
        self.port = free_port(host)
        self.host = host
        self.argv = [a.replace("{port}", str(self.port)) for a in argv]
        self.env = dict(env)
        self.log_path = Path(log_path)
        self.pid_file = self.log_path.with_name(self.log_path.stem + ".pid.json")
        self.name = name
        self.startup_timeout = startup_timeout
        self.on_wait = on_wait
        self.proc: subprocess.Popen | None = None
        self.status: str | None = None
        self.startup_seconds: float | None = None
        self.exit_code: int | None = None
        self.leftover_pids: list[int] = []
        self._t0: float | None = None
        self._watchdog: tuple[subprocess.Popen, int] | None = None
        self._identity: ProcessIdentity | None = None  # psutil's view of the server, taken once while it runs
        self._owner: ProcessIdentity | None = None
        # the GPUs handed to the server and their memory before it started (gpu_memory.py)
        self.memory_probe = memory_probe
        self.devices = given_devices({**os.environ, **self.env})
        self._memory_before: MemoryReading | None = None

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` of the server."""
        return f"http://{self.host}:{self.port}"

    def seconds(self) -> float | None:
        """Seconds since launch (None before :meth:`start`)."""
        return None if self._t0 is None else time.monotonic() - self._t0

    def _fail(self, status: str, message: str) -> ServerStartError:
        self.status = status
        secs = self.seconds()
        return ServerStartError(message, status=status, exit_code=self.exit_code,
                                seconds=None if secs is None else round(secs, 1))

    def start(self) -> None:
        """Start the process and wait until ``/health`` answers 200.

        The wait between polls is a wait on the process, so an exit is seen at once
        (not at the deadline).

        Raises:
            ServerStartError: ``launch_failed`` (the interpreter does not exist or
                cannot be executed), ``exited_early`` (with exit code and seconds),
                ``not_ready_timeout`` (the process is then stopped).
        """
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("w", encoding="utf-8")
        self._memory_before = self.memory_probe(self.devices) if self.devices else None
        launch = launch_argv(self.argv)
        # both lines paste into a shell as they stand (after the "# "): quoted with shlex
        log.write("# " + shlex.join(launch) + "\n")
        log.write("# env: " + " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(self.env.items())) + "\n")
        log.flush()
        failed = fetch_weights(self.argv, self.env, log)  # before the clock, as RemoteOpenAIServer
        if failed is not None:
            log.write(f"# evalrun: weights not fetched before the start ({failed}); the server fetches them "
                      "within its start-up wait\n")
            log.flush()
        self._t0 = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                launch,
                env={**os.environ, **self.env},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # own process group: one killpg stops everything
                preexec_fn=_pdeathsig_preexec(),  # dies with evalrun, even on SIGKILL (Linux)
            )
        except OSError as e:
            log.write(f"# evalrun: cannot execute: {e}\n")
            log.close()
            raise self._fail(
                "launch_failed",
                f"{self.name}: cannot execute the server command {self.argv[0]!r}: "
                f"{e.strerror or e} (check --python / the interpreter that has vLLM). Log: {self.log_path}",
            ) from None
        self.processes.register(self)
        self._watchdog = start_watchdog(self.proc.pid)  # the group dies with evalrun
        log.close()
        self._write_pid_file()
        self._wait_for_health()
        self._refresh_identity()
        self.startup_seconds = self.seconds()
        self.status = "ready"

    def _wait_for_health(self) -> None:
        """Poll ``/health`` until it answers 200, waiting on the process between polls
        (an exit is seen at once).

        Raises:
            ServerStartError: ``exited_early`` or ``not_ready_timeout`` (the process is
                then stopped).
        """
        assert self.proc is not None and self._t0 is not None
        deadline = self._t0 + self.startup_timeout
        # plain HTTP to the local server (verify=False): no CA bundle read, about 70 ms a client
        with httpx.Client(timeout=5.0, verify=False) as client:
            while True:
                code = self.proc.poll()
                if code is not None:
                    self.exit_code = code
                    raise self._fail(
                        "exited_early",
                        f"{self.name}: the vLLM server exited with code {code} during start-up "
                        f"after {self.seconds():.1f}s. Log: {self.log_path}\n"
                        f"--- last lines ---\n{tail(self.log_path)}",
                    )
                try:
                    if client.get(self.base_url + "/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                now = time.monotonic()
                if now > deadline:
                    self.stop()
                    raise self._fail(
                        "not_ready_timeout",
                        f"{self.name}: the vLLM server did not answer /health within "
                        f"{self.startup_timeout:.0f}s (startup_max_wait_seconds). "
                        f"Log: {self.log_path}\n--- last lines ---\n{tail(self.log_path)}",
                    )
                if self.on_wait:
                    self.on_wait(now - self._t0)
                self._refresh_identity()
                try:
                    self.proc.wait(timeout=1.0)  # returns at once when the server exits
                except subprocess.TimeoutExpired:
                    pass

    def _refresh_identity(self) -> None:
        """Rewrite the pid file when the server's command line changed since it was
        recorded (a wrapper such as ``/usr/bin/env`` or a pyenv shim execs the real
        interpreter after launch; the start time and pid stay)."""
        if self.proc is None or self._identity is None:
            return
        now = process_identity(self.proc.pid)
        if now is not None and now["cmdline"] != self._identity.get("cmdline"):
            self._identity = now
            self._write_pid_file()

    def _write_pid_file(self, **extra: object) -> None:
        """Record the server's identity (pid, process group, start time and command line
        as psutil sees them, taken once while it runs) and its owner's beside the log,
        atomically (:mod:`harness.engine.leftovers`). A file that cannot be written is
        said (a server this run leaves could not be found by a later run)."""
        if self.proc is None:
            return
        if self._identity is None:
            self._identity = process_identity(self.proc.pid)
        if self._owner is None:
            self._owner = process_identity(os.getpid())
        ident: Mapping[str, object] = self._identity or {}
        owner: Mapping[str, object] = self._owner or {}
        info = {
            "pid": self.proc.pid, "pgid": ident.get("pgid", self.proc.pid), "create_time": ident.get("create_time"),
            "cmdline": ident.get("cmdline"),
            "owner_pid": os.getpid(), "owner_create_time": owner.get("create_time"),
            "variant": self.name, "argv": self.argv, "stopped": False, **extra,
        }
        try:
            write_pid_file(self.pid_file, info)
        except OSError as e:
            self.processes.event(f"{self.name}: pid file {self.pid_file} not written ({e.strerror or e}); "
                  "a server left running by this run could not be found by a later one")

    @property
    def pid(self) -> int | None:
        """The server's process id (its process group id too), None before launch."""
        return self.proc.pid if self.proc else None

    def returncode(self) -> int | None:
        """The process's exit code once it ended, None while it runs or before launch."""
        return self.proc.poll() if self.proc else None

    def alive(self) -> bool:
        """True while the server process runs."""
        return self.proc is not None and self.proc.poll() is None

    def wait_exit(self, seconds: float) -> int | None:
        """Wait up to ``seconds`` for the process to exit; its exit code, or None while
        it runs (never raises)."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the server's process group (no waiting, never raises)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError, OSError):
            pass

    def stop(self, grace: float | None = None) -> None:
        """Stop the whole process group: SIGTERM, wait up to ``grace`` s (default
        :meth:`EngineProcesses.stop_grace`: 15 s as vLLM's ``RemoteVLLMServer``), SIGKILL,
        sweep children, then check that none of them remains (:attr:`leftover_pids`),
        release the watchdog, and wait for the GPU memory of the server's devices to come
        back (:func:`harness.engine.gpu_memory.wait_for_release`; nothing on a CPU host,
        nor when stopping in a hurry).

        A KeyboardInterrupt (a signal) arriving meanwhile does not cut the teardown
        short: it turns it into SIGKILL at once (:meth:`EngineProcesses.hurry`), the teardown
        finishes, and the interrupt is raised afterwards. While it waits it says
        what for. Safe to call twice; never raises for a process that is already gone.
        """
        if self.proc is None:
            return
        if grace is None:
            grace = self.processes.stop_grace()
        interrupted: BaseException | None = None
        for _ in range(5):
            try:
                self._stop_once(grace)
                break
            except KeyboardInterrupt as e:  # a signal during teardown: kill now, then go on
                interrupted = interrupted or e
                self.processes.event(f"{self.name}: interrupted while stopping the server; "
                                     "killing its process group now")
                self.processes.hurry()
        self.processes.release(self)
        self._release_watchdog()
        if interrupted is None and not (self.processes.hurrying() or self.processes.interrupting()):
            # as vLLM's RemoteVLLMServer: the devices' memory back before the next server
            wait_for_release(self.devices, self._memory_before, self.memory_probe,
                             lambda m: self.processes.event(f"{self.name}: {m}"))
        if interrupted is not None:
            raise interrupted

    def _release_watchdog(self) -> None:
        """Close the watchdog's pipe (it kills what is left of the group and exits) and
        reap it (never raises)."""
        wd, self._watchdog = self._watchdog, None
        if wd is None:
            return
        proc, w = wd
        try:
            if not self.leftover_pids and not self.alive():
                os.write(w, group_watchdog.DONE)  # checked empty: nothing to kill
            os.close(w)
        except OSError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()

    def _stop_once(self, grace: float) -> None:
        proc = self.proc
        if proc is None:  # never started: nothing to stop
            return
        pid, reg = proc.pid, self.processes
        try:
            children = psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            children = []
        self.signal_group(signal.SIGKILL if reg.hurrying() else signal.SIGTERM)
        t0 = time.monotonic()
        told = False
        while proc.poll() is None or _group_members(pid):
            waited = time.monotonic() - t0
            if reg.hurrying() or waited >= grace:
                break
            if not told and (waited >= 2.0 or bool(reg.live_servers()) and reg.interrupting()):
                members = [p.pid for p in _group_members(pid)]
                self.processes.event(
                    f"{self.name}: stopping the vLLM server (process group {pid}, processes "
                    f"{members}): SIGTERM sent, waiting up to {grace:.0f}s for them to exit; "
                    "press Ctrl-C again to kill them now"
                )
                told = True
            try:
                proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is None or _group_members(pid):
            if told or reg.hurrying():
                self.processes.event(f"{self.name}: sending SIGKILL to process group {pid}")
            self.signal_group(signal.SIGKILL)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        _kill_children(children)
        deadline = time.monotonic() + 5
        left = _group_members(pid)
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = _group_members(pid)
        alive_children = []
        for ch in children:
            try:
                if ch.is_running() and ch.status() != psutil.STATUS_ZOMBIE:
                    alive_children.append(ch.pid)
            except psutil.Error:
                pass
        self.leftover_pids = sorted({p.pid for p in left} | set(alive_children))
        if self.exit_code is None:
            self.exit_code = proc.returncode
        if not self.leftover_pids:
            self._write_pid_file(stopped=True, exit_code=self.exit_code)
        else:
            self.processes.event(f"{self.name}: processes still alive after SIGKILL: {self.leftover_pids}")

    def __enter__(self) -> "VllmServer":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
