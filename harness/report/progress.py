"""Progress on long work, on stderr: rich bars on a terminal, plain timestamped lines in CI logs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress

#: Redraws per second of a terminal bar. Each redraw costs about 1 ms of CPU in the
#: process that sends the requests (rich redraws from a thread whether or not anything
#: changed); rich's default of 10 was a quarter of the client's CPU per request in
#: bench/client_bench.py at 500 ms latency, 2 is 0.014 ms per request there.
REFRESH_PER_SECOND = 2


class _Bar:
    """A counter of finished requests (see :meth:`Progress.bar`). On a terminal, every
    open bar is one line of the owner's single live display (rich allows one at a time),
    so variants running side by side show one line each."""

    def __init__(self, owner: Progress, label: str, total: int):
        self.owner, self.label, self.total = owner, label, total
        self.done = self.ok = 0
        self.t0 = time.monotonic()
        self.last_print = 0.0
        self.rich: RichProgress | None = None
        if owner.interactive:
            self.rich = owner._open_bar()
            self.task = self.rich.add_task(label, total=total, errors=0)

    def advance(self, ok: bool = True) -> None:
        """Count one finished request (``ok`` False for a failed request)."""
        self.done += 1
        self.ok += int(ok)
        if self.rich is not None:
            self.rich.update(self.task, advance=1, errors=self.done - self.ok)
            return
        now = time.monotonic()
        if self.done == self.total or now - self.last_print >= 15:
            self.last_print = now
            self.owner.log(f"{self.label}: {self.done}/{self.total} requests, "
                           f"{self.done - self.ok} errors, {now - self.t0:.0f}s")

    def close(self) -> None:
        """Stop the bar (its line leaves the display; the display stops with the last bar)."""
        if self.rich is not None:
            self.rich.remove_task(self.task)
            self.owner._close_bar()
            self.rich = None


class Progress:
    """Progress and messages for a run.

    Args:
        console: where to write (default: stderr).
        quiet: only warnings and errors.
    """

    def __init__(self, console: Console | None = None, quiet: bool = False):
        self.console = console or Console(stderr=True)
        self.quiet = quiet
        self.interactive = self.console.is_terminal and not quiet
        self._lock = threading.Lock()
        self._rich: RichProgress | None = None
        self._open = 0

    def _open_bar(self) -> RichProgress:
        """The live display shared by every open bar (started with the first)."""
        with self._lock:
            if self._rich is None:
                self._rich = RichProgress(
                    TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("errors {task.fields[errors]}"), TimeElapsedColumn(),
                    console=self.console, transient=True, refresh_per_second=REFRESH_PER_SECOND,
                )
                self._rich.start()
            self._open += 1
            return self._rich

    def _close_bar(self) -> None:
        with self._lock:
            self._open -= 1
            if self._open <= 0 and self._rich is not None:
                self._rich.stop()
                self._rich, self._open = None, 0

    def log(self, msg: str) -> None:
        """An informational line."""
        if not self.quiet:
            self.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {escape(msg)}", markup=True, highlight=False)

    def warn(self, msg: str) -> None:
        """A warning line (always shown)."""
        self.console.print(f"[yellow]WARNING[/yellow] {escape(msg)}", highlight=False)

    def error(self, msg: str) -> None:
        """An error line (always shown)."""
        self.console.print(f"[red]ERROR[/red] {escape(msg)}", highlight=False)

    def bar(self, label: str, total: int) -> _Bar:
        """A progress counter for ``total`` requests."""
        return _Bar(self, label, total)

    def waiting(self, label: str) -> Callable[[float], None]:
        """A callback for server start-up: prints elapsed seconds every 15 s."""
        state = {"last": -15.0}

        def cb(elapsed: float) -> None:
            if elapsed - state["last"] >= 15:
                state["last"] = elapsed
                self.log(f"{label} ({elapsed:.0f}s)")

        return cb

