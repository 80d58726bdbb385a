"""The plugin's counters and per-process report files: every process the plugin is
active in writes ``$EVALRUN_PLUGIN_REPORT_DIR/plugin-<pid>.json``; evalrun merges the
files of one server (:func:`read_reports`) and asks whether a fault ran and changed
something (:func:`exercised`)."""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections import Counter
from typing import Any

from harness.faults.env import REPORT_ENV, text
from harness.faults.patching import applied_patches
from harness.faults.state import STATE

FLUSH_INTERVAL_S = 0.5
_FLUSH_LOCK = threading.Lock()


def count(key: str, n: int = 1) -> None:
    """Add ``n`` to counter ``key`` of this process (written to the report file)."""
    if n:
        if STATE.flusher not in (None, os.getpid()):
            start_flusher()  # a forked child: its own file, its own flusher thread
        STATE.counts[key] += int(n)
        STATE.dirty = True


def counts() -> dict[str, int]:
    """A copy of this process's counters."""
    return dict(STATE.counts)


def _report_path() -> str | None:
    folder = text(REPORT_ENV)
    return os.path.join(folder, f"plugin-{os.getpid()}.json") if folder else None


def flush_report() -> str | None:
    """Write this process's counters to ``$EVALRUN_PLUGIN_REPORT_DIR/plugin-<pid>.json``.

    Atomic (temporary file + rename). Returns the path, or None without the variable.
    Called every :data:`FLUSH_INTERVAL_S` seconds by a daemon thread while counters
    change, and at interpreter exit.
    """
    path = _report_path()
    if path is None:
        return None
    with _FLUSH_LOCK:
        STATE.dirty = False
        doc = {
            "pid": os.getpid(),
            "argv0": os.path.basename(sys.argv[0]) if sys.argv else "",
            "fault": STATE.fault.name if STATE.fault else None,
            "cpu_async": STATE.cpu_async,
            "model_runner": STATE.model_runner,
            "patched": applied_patches(),
            "counts": dict(STATE.counts),
            "written_at": time.time(),
        }
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:  # the atomic writer's steps (this package imports no evalrun)
            json.dump(doc, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    return path


def _flush_loop() -> None:
    while True:
        time.sleep(FLUSH_INTERVAL_S)
        if STATE.dirty:
            try:
                flush_report()
            except OSError:
                pass


def _flush_at_exit() -> None:
    if STATE.dirty:
        flush_report()


def start_flusher() -> None:
    """Write the report now, then from a daemon thread while counters change, and at exit
    (once per process; a forked child starts afresh with its own counters)."""
    if _report_path() is None or STATE.flusher == os.getpid():
        return
    if STATE.flusher is not None:  # forked from a reporting parent: start afresh
        STATE.counts.clear()
    STATE.flusher = os.getpid()
    flush_report()
    threading.Thread(target=_flush_loop, name="evalrun-plugin-report", daemon=True).start()
    atexit.register(_flush_at_exit)


def read_reports(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """Merge the ``plugin-<pid>.json`` files of one server (one variant) into one report.

    Args:
        folder: the variant's ``$EVALRUN_PLUGIN_REPORT_DIR``.

    Returns:
        ``{"processes": n, "faults": [...], "cpu_async": bool, "model_runners": [...],
        "patched": [...], "counts": {key: sum over processes}}``; ``processes`` is 0
        when the folder is missing or empty (the plugin never loaded: is evalrun
        installed in the server's environment?). Unreadable files are listed under
        ``"errors"``.
    """
    out: dict[str, Any] = {"processes": 0, "faults": [], "cpu_async": False, "model_runners": [],
                           "patched": [], "counts": {}, "errors": []}
    total: Counter[str] = Counter()
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith("plugin-") and n.endswith(".json"))
    except OSError:
        return out
    for n in names:
        try:
            with open(os.path.join(folder, n), encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            out["errors"].append(f"{n}: {e}")
            continue
        out["processes"] += 1
        if doc.get("fault") and doc["fault"] not in out["faults"]:
            out["faults"].append(doc["fault"])
        out["cpu_async"] = out["cpu_async"] or bool(doc.get("cpu_async"))
        if doc.get("model_runner") and doc["model_runner"] not in out["model_runners"]:
            out["model_runners"].append(doc["model_runner"])
        for p in doc.get("patched", []):
            if p not in out["patched"]:
                out["patched"].append(p)
        total.update({k: int(v) for k, v in (doc.get("counts") or {}).items()})
    out["counts"] = dict(sorted(total.items()))
    return out


def exercised(report: dict[str, Any], fault: str) -> tuple[bool, str]:
    """Whether ``fault``'s patched code ran and changed something, from :func:`read_reports`.

    Returns:
        ``(True, "")`` when ``<fault>.executions > 0`` and ``<fault>.changed > 0``,
        else ``(False, reason)`` naming what was (not) seen. ``noop`` patches
        nothing: it counts as exercised when a process reported it active.
    """
    c = report.get("counts") or {}
    if report.get("processes", 0) == 0:
        return False, "no plugin report: the plugin did not load in the server (is evalrun installed there?)"
    if fault == "noop":
        return (fault in report.get("faults", []), "" if fault in report.get("faults", []) else "noop not active")
    ex, ch = int(c.get(f"{fault}.executions", 0)), int(c.get(f"{fault}.changed", 0))
    if ex == 0:
        return False, f"fault not exercised: its patched code never ran ({fault}.executions = 0)"
    if ch == 0:
        return False, (f"fault not exercised: its patched code ran {ex} times but never changed a value "
                       f"({fault}.changed = 0)")
    return True, ""
