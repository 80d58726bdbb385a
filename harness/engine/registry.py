"""The process's registry of the vLLM servers it started, and the stopping state around them.

Signals and process groups belong to the process, so one :class:`EngineProcesses` serves a
process (:func:`processes`): every server started enters it, and the stopping signals
(:data:`STOP_SIGNALS`) reach every live server through it. Teardown of one server is
:meth:`harness.engine.server.VllmServer.stop`; what it reads here is the stop grace, the
hurry and interrupting flags and the sink of teardown messages.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Protocol

from harness.config.types import MAX_STOP_GRACE_SECONDS, StopGraceSeconds, env_value

#: Seconds a server gets between SIGTERM and SIGKILL of its process group when evalrun
#: stops it (default): vLLM's ``RemoteVLLMServer`` (``tests/utils.py``) waits 15 s after
#: SIGTERM before it kills the process group.
DEFAULT_STOP_GRACE = 15.0
#: The default grace when evalrun stops because of a signal (a cancelled CI job). CI
#: systems kill a cancelled job after their own grace: Buildkite sends SIGKILL 10 s after
#: SIGTERM (agent ``cancel-grace-period``, default 10), GitHub Actions sends SIGINT,
#: SIGTERM 7.5 s later, then SIGKILL; 5 s of server grace leaves room for the record,
#: which evalrun writes before it stops the servers.
CANCEL_STOP_GRACE = 5.0
#: Environment variable overriding :data:`DEFAULT_STOP_GRACE` (seconds, >= 0).
STOP_GRACE_ENV = "EVALRUN_STOP_GRACE_SECONDS"


class ServerHandle(Protocol):
    """What the registry reads of a started server (:class:`harness.engine.server.VllmServer`)."""

    @property
    def name(self) -> str:
        """The variant id."""
        ...

    @property
    def pid(self) -> int | None:
        """The server's process id (its process group id too), None before launch."""
        ...

    @property
    def leftover_pids(self) -> list[int]:
        """Processes of its group still alive after its teardown."""
        ...

    def alive(self) -> bool:
        """True while the server process runs."""
        ...

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to its process group (no waiting, never raises)."""
        ...


def _say(msg: str) -> None:
    """Default sink of teardown messages: stderr, never raising (after SIGHUP the
    terminal may be gone)."""
    try:
        print(f"evalrun: {msg}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


#: Signals that stop evalrun: Ctrl-C, ``kill``/CI timeouts, a closed terminal, Ctrl-\\.
STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")


class EngineProcesses:
    """The vLLM servers one evalrun process started, and the stopping state around them.

    Owns: every server entered in it (:class:`ServerHandle`: a
    :class:`~harness.engine.server.VllmServer`), in start order, and which of them are live
    (started, teardown not finished); the *interrupting* flag (a stopping
    signal arrived: :meth:`mark_interrupting`); the *hurry* flag (a second signal: every
    teardown sends SIGKILL at once, :meth:`hurry`); the SIGTERM -> SIGKILL grace of a
    stop (:meth:`set_stop_grace`); the sink of teardown messages (:meth:`event`).

    Signals and process groups belong to the process, so one instance serves a process:
    :func:`processes` returns it, and a :class:`~harness.engine.server.VllmServer` enters it
    unless given another (tests give their own to observe one server's bookkeeping).

    Thread-safety: servers start and stop on the pool's job threads while a signal
    handler runs on the main thread. The set of servers is guarded by a re-entrant
    lock (a handler interrupting the main thread inside it takes it again rather than
    waiting for itself); the flags are :class:`threading.Event`; the grace and the
    sink are single references, replaced whole. Readers take copies.
    """

    def __init__(self) -> None:
        self._started: list[ServerHandle] = []
        self._live: set[ServerHandle] = set()
        self._lock = threading.RLock()
        self._hurry = threading.Event()
        self._interrupting = threading.Event()
        self._grace: float | None = None
        self._sink: Callable[[str], None] = _say

    # -- servers

    def register(self, server: ServerHandle) -> None:
        """Enter ``server`` as started and live (its process exists)."""
        with self._lock:
            self._live.add(server)
            self._started.append(server)

    def release(self, server: ServerHandle) -> None:
        """Mark ``server``'s teardown finished (it stays among the started ones)."""
        with self._lock:
            self._live.discard(server)

    def live_servers(self) -> list[ServerHandle]:
        """Servers started here whose teardown has not finished."""
        with self._lock:
            return list(self._live)

    def unstopped(self) -> dict[str, list[int]]:
        """Every server started here whose processes are not known to be gone:
        ``{variant id: [pids]}`` (teardown not finished: the server's pid; processes
        left after it: theirs). Empty means every group was checked and found empty."""
        with self._lock:
            started, live = list(self._started), set(self._live)
        out: dict[str, list[int]] = {}
        for srv in started:
            if srv in live:
                out[srv.name] = [srv.pid] if srv.pid is not None else []
            elif srv.leftover_pids:
                out[srv.name] = list(srv.leftover_pids)
        return out

    def signal_all(self, sig: int) -> None:
        """Send ``sig`` to the process group of every live server, without waiting
        (safe in a signal handler)."""
        for srv in self.live_servers():
            srv.signal_group(sig)

    # -- stopping state

    def hurry(self) -> None:
        """Speed every teardown up: SIGKILL to every live server's process group now, and
        make :meth:`~harness.engine.server.VllmServer.stop` skip the rest of its SIGTERM grace period. Called on
        a second interrupt; never skips a teardown."""
        self._hurry.set()
        self.signal_all(signal.SIGKILL)

    def hurrying(self) -> bool:
        """True once :meth:`hurry` was called."""
        return self._hurry.is_set()

    def mark_interrupting(self) -> None:
        """Note that evalrun is stopping because of a signal (teardown messages are then
        printed at once rather than after 2 s of waiting)."""
        self._interrupting.set()

    def interrupting(self) -> bool:
        """True once a stopping signal arrived (:meth:`mark_interrupting`)."""
        return self._interrupting.is_set()

    def set_stop_grace(self, seconds: float | None) -> None:
        """Set the SIGTERM -> SIGKILL grace (seconds) of every later :meth:`~harness.engine.server.VllmServer.stop`
        called without one (``--stop-grace``); None returns to the default.

        Raises:
            ValueError: a negative or non-finite number.
        """
        if seconds is not None and not (0 <= float(seconds) <= MAX_STOP_GRACE_SECONDS):
            raise ValueError(f"stop grace {seconds!r}: expected seconds in [0, {MAX_STOP_GRACE_SECONDS:g}]")
        self._grace = None if seconds is None else float(seconds)

    def stop_grace(self) -> float:
        """The SIGTERM -> SIGKILL grace in seconds: :meth:`set_stop_grace`, else
        ``$EVALRUN_STOP_GRACE_SECONDS``, else :data:`CANCEL_STOP_GRACE` once a stopping
        signal arrived (:meth:`interrupting`), else :data:`DEFAULT_STOP_GRACE`.

        Raises:
            ValueError: ``$EVALRUN_STOP_GRACE_SECONDS`` is not a number >= 0 (named).
        """
        if self._grace is not None:
            return self._grace
        default = CANCEL_STOP_GRACE if self.interrupting() else DEFAULT_STOP_GRACE
        return float(env_value(os.environ, STOP_GRACE_ENV, StopGraceSeconds, default))  # type: ignore[arg-type]

    # -- messages and signals

    def set_event_sink(self, sink: Callable[[str], None]) -> None:
        """Send teardown messages ("stopping ..., waiting for ...") to ``sink``."""
        self._sink = sink

    def event(self, msg: str) -> None:
        """Say a teardown message through the sink (:meth:`set_event_sink`); never raises."""
        try:
            self._sink(msg)
        except Exception:  # noqa: BLE001 - a message must never break a teardown
            _say(msg)

    def install_stop_handlers(self, on_first: Callable[[str], None]) -> None:
        """Make every stopping signal (:data:`STOP_SIGNALS`) stop every server.

        First signal: ``on_first(signal name)`` runs (the caller writes its record: a
        SIGKILL may follow at any moment), then SIGTERM goes to every live server's
        process group at once (so in-flight requests end), and KeyboardInterrupt is
        raised in the main thread; each server's context manager then waits for its group
        to exit (up to :meth:`stop_grace`, saying what it waits for). Any further signal
        never interrupts that teardown: it speeds it up, sending SIGKILL to every live
        group (:meth:`hurry`), and never interrupts what follows (the record and its
        reports). Called again, it replaces the handlers (and starts counting anew).
        A signal that is ignored when this is called (``nohup``) stays ignored.
        """
        state = {"count": 0}

        def handler(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001
            name = signal.Signals(signum).name
            state["count"] += 1
            if state["count"] == 1:
                self.mark_interrupting()
                on_first(name)
                self.signal_all(signal.SIGTERM)
                raise KeyboardInterrupt(name)
            quiet = not self.live_servers()  # nothing to speed up: the record is being finished, say nothing
            self.hurry()
            if not quiet:
                self.event(f"{name} again: sending SIGKILL to every server's process group; "
                           "still waiting until they are gone")

        for name in STOP_SIGNALS:
            sig = getattr(signal, name, None)
            # a signal the caller ignores stays ignored (``nohup evalrun ...`` survives a
            # closed terminal; a background job of a non-interactive shell ignores SIGINT)
            if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:
                signal.signal(sig, handler)


_PROCESSES = EngineProcesses()


def processes() -> EngineProcesses:
    """The registry of this process's servers and stopping state (one per process,
    created at import: signals and process groups are the process's)."""
    return _PROCESSES
