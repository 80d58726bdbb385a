"""vLLM server process lifecycle: free port, own process group, readiness, teardown.

Follows vLLM's own test utility (``tests/utils.py: RemoteOpenAIServer``): pick a free
port, start the server in a new process group, poll ``/health`` while checking the
process is alive, and always tear down (terminate the group, wait, kill, sweep
children). The server's stdout and stderr go to a log file that is kept with the
run record.
"""

from __future__ import annotations

import os
import signal
import socket
import shlex
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil


class ServerStartError(RuntimeError):
    """The server exited or did not become healthy in time. The message names the
    variant, the exit code or timeout, the log file and the last lines of the log."""


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


class VllmServer:
    """One OpenAI-compatible vLLM server process.

    Use as a context manager::

        with VllmServer(argv, env, log_path, name="cfg/spec", startup_timeout=600) as srv:
            srv.base_url  # "http://127.0.0.1:PORT"

    Args:
        argv: the full command; ``{port}`` is replaced by a free port.
        env: variables added to this process's environment for the server.
        log_path: file receiving the server's stdout and stderr.
        name: the variant id, used in messages.
        startup_timeout: seconds to wait for ``/health`` to answer 200.
        host: the interface the server binds to (loopback).
        on_wait: called about once a second while waiting, with elapsed seconds.

    Raises:
        ServerStartError: on ``__enter__`` when the process exits or the timeout passes.
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
    ) -> None:
        self.port = free_port(host)
        self.host = host
        self.argv = [a.replace("{port}", str(self.port)) for a in argv]
        self.env = dict(env)
        self.log_path = Path(log_path)
        self.name = name
        self.startup_timeout = startup_timeout
        self.on_wait = on_wait
        self.proc: subprocess.Popen | None = None
        self.startup_seconds: float | None = None
        self.exit_code: int | None = None

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` of the server."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        """Start the process and wait until ``/health`` answers 200.

        Raises:
            ServerStartError: the process exited, or the timeout passed (the process
                is then stopped).
        """
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("w", encoding="utf-8")
        # both lines paste into a shell as they stand (after the "# "): quoted with shlex
        log.write("# " + shlex.join(self.argv) + "\n")
        log.write("# env: " + " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(self.env.items())) + "\n")
        log.flush()
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            self.argv,
            env={**os.environ, **self.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # own process group: one killpg stops everything
        )
        log.close()
        deadline = t0 + self.startup_timeout
        with httpx.Client(timeout=5.0) as client:
            while True:
                code = self.proc.poll()
                if code is not None:
                    self.exit_code = code
                    raise ServerStartError(
                        f"{self.name}: the vLLM server exited with code {code} during start-up "
                        f"after {time.monotonic() - t0:.0f}s. Log: {self.log_path}\n"
                        f"--- last lines ---\n{tail(self.log_path)}"
                    )
                try:
                    if client.get(self.base_url + "/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                now = time.monotonic()
                if now > deadline:
                    self.stop()
                    raise ServerStartError(
                        f"{self.name}: the vLLM server did not answer /health within "
                        f"{self.startup_timeout:.0f}s (startup_max_wait_seconds). "
                        f"Log: {self.log_path}\n--- last lines ---\n{tail(self.log_path)}"
                    )
                if self.on_wait:
                    self.on_wait(now - t0)
                time.sleep(1.0)
        self.startup_seconds = time.monotonic() - t0

    def alive(self) -> bool:
        """True while the server process runs."""
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 20.0) -> None:
        """Stop the whole process group: SIGTERM, wait ``grace`` s, SIGKILL, sweep children.

        Safe to call twice; never raises for a process that is already gone.
        """
        if self.proc is None:
            return
        pid = self.proc.pid
        try:
            children = psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            children = []
        try:
            os.killpg(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait(timeout=10)
        # Children that left the group (or outlived the leader) are swept one by one.
        _, alive = psutil.wait_procs(children, timeout=5)
        for ch in alive:
            try:
                ch.kill()
            except psutil.Error:
                pass
        if self.exit_code is None:
            self.exit_code = self.proc.returncode

    def __enter__(self) -> "VllmServer":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
