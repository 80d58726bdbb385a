"""PID files of vLLM servers and the servers an earlier run left running.

Every server evalrun starts is recorded in ``logs/<config>/<variant>.pid.json`` of its
run folder (written with the atomic writer, at start and again after the stop): its
pid, process group, start time and command line as psutil sees them while it runs,
and the same three facts of the evalrun process that owns it. A later run reads these
files before it starts anything, and names a live process as a leftover of an earlier
run only when the recorded identity matches the live process exactly
(:func:`judge_pid_file`): a pid alone proves nothing (numbers are reused), and a file
in a results folder may be old, truncated or forged.

Three verdicts (:data:`VERDICTS`):

* ``leftover``: pid, start time and command line all match; the process leads its own
  process group and session, as evalrun starts every server (``start_new_session``);
  it is not this evalrun nor in this evalrun's group or session; and the evalrun run
  that started it is gone. Only this verdict names a command to end it.
* ``cannot_tell``: the recorded process may still run, but the file lacks what it takes
  to be sure (no start time, no command line, an owner without a start time, a process
  psutil may not read). No command is suggested.
* ``invalid``: the file cannot be the record of a server evalrun started (unreadable,
  not a JSON object, a pid of 1, 0 or below, a process group that is not the server's
  own, this evalrun itself). No command is suggested.

A file whose server stopped (``stopped: true``), whose pid is gone, or whose pid is now
another process (start time or command line differ) yields nothing.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TypedDict, get_args

import psutil

from harness.config.schema import JsonValue
from harness.records.atomic import write_atomic
from harness.records.files import MAX_SMALL_BYTES, read_text
from harness.records.run_record import LeftoverServerRecord, LeftoverVerdict

__all__ = [
    "CREATE_TIME_TOLERANCE", "ProcessIdentity", "VERDICTS", "find_leftover_servers", "group_kill_command",
    "judge_pid_file", "process_identity", "write_pid_file",
]

#: The verdicts of :func:`judge_pid_file` (module docstring).
VERDICTS: tuple[str, ...] = get_args(LeftoverVerdict)
#: Seconds two start times may differ and still be one process. psutil derives a start
#: time from the boot time (``/proc/stat`` ``btime``, whole seconds, which can step by
#: one when the clock is adjusted) plus the process's start in clock ticks; with the
#: pid and the full command line also equal, one second cannot join two processes.
CREATE_TIME_TOLERANCE = 1.0


class ProcessIdentity(TypedDict):
    """What identifies a process as psutil sees it: pid, start time (seconds since the
    epoch), command line and process group id."""

    pid: int
    create_time: float
    cmdline: list[str]
    pgid: int


def process_identity(pid: int) -> ProcessIdentity | None:
    """What identifies process ``pid`` as psutil sees it now; None when it is gone, a
    zombie, or psutil may not read it."""
    try:
        proc = psutil.Process(int(pid))
        with proc.oneshot():
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return {"pid": proc.pid, "create_time": proc.create_time(), "cmdline": proc.cmdline(),
                    "pgid": os.getpgid(proc.pid)}
    except (psutil.Error, OSError, ValueError):
        return None


def write_pid_file(path: Path, info: dict[str, JsonValue]) -> None:
    """Write a pid file atomically (:func:`harness.records.atomic.write_atomic`).

    Raises:
        OSError: it cannot be written (the caller says so: a server this run leaves
            behind could then not be found by a later run).
    """
    write_atomic(path, json.dumps(info, indent=1) + "\n")


def _found(verdict: LeftoverVerdict, pid: int | None, path: Path, command: str, reason: str,
           kill_command: str | None = None) -> LeftoverServerRecord:
    """The record of one verdict on the pid file ``path``."""
    return LeftoverServerRecord(verdict=verdict, pid=pid, pid_file=str(path), command=command, reason=reason,
                                kill_command=kill_command)


def group_kill_command(pgid: int) -> str | None:
    """``kill -TERM -- -PGID; sleep 5; kill -KILL -- -PGID``, or None when ``pgid`` is a
    group no command may target: 1 or less (``kill -- -1`` is every process), this
    process's own group, or the group of its session leader."""
    if isinstance(pgid, bool) or not isinstance(pgid, int) or pgid <= 1:
        return None
    if pgid in {os.getpid(), os.getpgrp(), os.getsid(0)}:
        return None
    return f"kill -TERM -- -{pgid}; sleep 5; kill -KILL -- -{pgid}"


def _usable_pid(value: JsonValue) -> int | None:
    """``value`` when it is an int greater than 1 (bools refused), else None."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 1:
        return None
    return value


def _finite(value: JsonValue) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _owner_state(info: dict[str, JsonValue]) -> str:
    """``gone`` (the evalrun that started the server is not running), ``running`` (it
    is: the server belongs to a run in progress) or ``unknown`` (its pid lives but
    the file has no start time to tell)."""
    owner = _usable_pid(info.get("owner_pid"))
    live = process_identity(owner) if owner is not None else None
    if live is None:
        return "gone"
    ctime = _finite(info.get("owner_create_time"))
    if ctime is None:
        return "unknown"
    return "running" if abs(live["create_time"] - ctime) < CREATE_TIME_TOLERANCE else "gone"


def _ancestors() -> set[int]:
    """This process and its ancestors (pids)."""
    out = {os.getpid()}
    try:
        out |= {p.pid for p in psutil.Process().parents()}
    except psutil.Error:
        pass
    return out


def judge_pid_file(path: Path, info: JsonValue) -> LeftoverServerRecord | None:
    """The verdict on one pid file's content (module docstring), or None when it names
    no live process that could be its server (stopped, gone, or another process now).

    Args:
        path: the pid file (for messages).
        info: its parsed JSON (anything: a forged file may hold any value).
    """
    # long: one check per line, in the order the module docstring gives them
    if not isinstance(info, dict):
        return _found("invalid", None, path, "", "not a JSON object")
    if info.get("stopped") is True:
        return None
    argv = info.get("cmdline") if isinstance(info.get("cmdline"), list) else info.get("argv")
    recorded_cmd = " ".join(str(a) for a in argv) if isinstance(argv, list) else ""
    pid = _usable_pid(info.get("pid"))
    if pid is None:
        return _found("invalid", None, path, recorded_cmd,
                      f"pid {info.get('pid')!r} cannot be a server evalrun started (a pid above 1 is)")
    if info.get("pgid", pid) != pid:
        return _found("invalid", pid, path, recorded_cmd,
                      f"process group {info.get('pgid')!r} is not the server's own ({pid}); evalrun starts "
                      "every server as the leader of its own process group")
    if pid in _ancestors():
        return _found("invalid", pid, path, recorded_cmd, f"pid {pid} is this evalrun or one of its parents")
    live = process_identity(pid)
    if live is None:
        return None  # gone (or a zombie): nothing to end
    ctime = _finite(info.get("create_time"))
    if ctime is None:
        return _found("cannot_tell", pid, path, recorded_cmd,
                      "the file records no start time, so a later process with the same number looks the same")
    if abs(live["create_time"] - ctime) >= CREATE_TIME_TOLERANCE:
        return None  # a later process reuses the number
    cmdline = info.get("cmdline")
    if not (isinstance(cmdline, list) and all(isinstance(a, str) for a in cmdline)):
        return _found("cannot_tell", pid, path, recorded_cmd, "the file records no command line")
    if live["cmdline"] != cmdline:
        return None  # not the recorded process
    try:
        sid = os.getsid(pid)
    except OSError:
        return None
    if live["pgid"] != pid or sid != pid or sid == os.getsid(0) or live["pgid"] == os.getpgrp():
        return _found("invalid", pid, path, recorded_cmd,
                      f"process {pid} does not lead its own process group and session (group "
                      f"{live['pgid']}, session {sid}), as every server evalrun starts does")
    owner = _owner_state(info)
    if owner == "running":
        return None  # its evalrun still runs: a run in progress, not a leftover
    if owner == "unknown":
        return _found("cannot_tell", pid, path, recorded_cmd,
                      f"the file records no start time of evalrun process {info.get('owner_pid')}, "
                      "which is alive, so whether its run still goes on is unknown")
    kill = group_kill_command(pid)
    if kill is None:
        return _found("invalid", pid, path, recorded_cmd, f"process group {pid} may not be targeted")
    return _found("leftover", pid, path, " ".join(live["cmdline"]),
                  "pid, start time and command line match the record; the run that started it is gone",
                  kill)


def find_leftover_servers(results_dir: Path) -> list[LeftoverServerRecord]:
    """The verdicts on every pid file in ``results_dir/*/logs/*/*.pid.json``
    (:func:`judge_pid_file`), in file order; files that name no live process are left
    out.

    Args:
        results_dir: the parent of run folders.
    """
    out = []
    for f in sorted(Path(results_dir).glob("*/logs/*/*.pid.json")):
        try:
            info = json.loads(read_text(f, MAX_SMALL_BYTES, "pid file"))  # a pipe or a huge file never blocks
        except (OSError, ValueError, RecursionError) as e:
            out.append(_found("invalid", None, f, "", f"unreadable: {type(e).__name__}: {e}"))
            continue
        verdict = judge_pid_file(f, info)
        if verdict is not None:
            out.append(verdict)
    return out
