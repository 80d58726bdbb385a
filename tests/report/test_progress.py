"""harness.report.progress: plain timestamped lines in a CI log, one shared live display on
a terminal, quiet mode. Consoles write to a string buffer; expected lines written by hand."""

from __future__ import annotations

import io
import re

from rich.console import Console

from harness.report.progress import Progress

STAMP = r"\d\d:\d\d:\d\d"


def _progress(quiet: bool = False, terminal: bool = False) -> tuple[Progress, io.StringIO]:
    buf = io.StringIO()
    return Progress(Console(file=buf, force_terminal=terminal, width=200), quiet=quiet), buf


def test_ci_log_bar_prints_the_first_and_the_last_count_with_errors():
    p, buf = _progress()
    b = p.bar("spec/gsm8k", 3)
    b.advance()
    b.advance(ok=False)              # within 15 s of the first line: not printed
    b.advance()
    b.close()
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2
    assert re.fullmatch(STAMP + r" spec/gsm8k: 1/3 requests, 0 errors, 0s", lines[0])
    assert re.fullmatch(STAMP + r" spec/gsm8k: 3/3 requests, 1 errors, 0s", lines[1])


def test_quiet_keeps_only_warnings_and_errors_and_markup_stays_text():
    p, buf = _progress(quiet=True)
    p.log("not shown")
    p.warn("disk [bold]almost[/bold] full")
    p.error("server exited")
    assert buf.getvalue().splitlines() == ["WARNING disk [bold]almost[/bold] full", "ERROR server exited"]


def test_waiting_prints_every_15_seconds():
    p, buf = _progress()
    cb = p.waiting("starting spec")
    for elapsed in (0.0, 10.0, 15.0, 29.0, 30.0, 44.9):
        cb(elapsed)
    said = [line.split(" ", 1)[1] for line in buf.getvalue().splitlines()]
    assert said == ["starting spec (0s)", "starting spec (15s)", "starting spec (30s)"]


def test_terminal_bars_share_one_live_display_that_stops_with_the_last():
    p, _ = _progress(terminal=True)
    assert p.interactive
    a, b = p.bar("reference", 2), p.bar("spec", 2)
    assert a.rich is not None and a.rich is b.rich
    live = a.rich.live
    assert live.is_started
    a.advance()
    a.close()
    assert live.is_started and a.rich is None     # the other bar still shows
    b.close()
    assert not live.is_started
