"""A cache of the pre-launch check's all-clear, so a run whose server commands and vLLM
did not change since the last run skips the check's seconds of importing vLLM.

Only an all-clear (no problem of any kind) is stored; a run whose check found anything
always checks again. The key (:func:`cache_key`) is the SHA-256 of: each interpreter's
resolved path with its size and modification time, the installed vLLM's version and
the location and modification time of its package and of its distribution's metadata
(read by :mod:`harness.engine.probes.vllm_files`, run by path in that interpreter; it does
not import vLLM), and the exact commands and environments checked. Fail closed: any doubt (an interpreter that
cannot be probed, no vLLM found, a cache file that cannot be read or parsed) gives no
key or no hit, and the check runs.

The cache is one JSON file (:data:`CACHE_NAME`) in the results folder:
``{"version": 1, "keys": {key: {"checked": n, "written_at": iso}}}``, at most
:data:`MAX_KEYS` keys (the oldest dropped).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from harness.config.schema import JsonValue
from harness.engine.preflight import ServerCommand
from harness.engine.probes import command, server_args, vllm_files
from harness.records.atomic import write_atomic

#: the cache file's name in the results folder.
CACHE_NAME = ".preflight-cache.json"
#: keys kept (one per distinct set of commands and installation).
MAX_KEYS = 64


def _interpreter_id(python: str, timeout: float) -> dict[str, JsonValue] | None:
    """What identifies ``python`` and its vLLM, or None when it cannot be told."""
    try:
        path = Path(python)
        if not path.is_absolute():
            found = shutil.which(python)
            if found is None:
                return None
            path = Path(found)
        real = path.resolve(strict=True)
        st = real.stat()
        proc = subprocess.run(command(str(path), vllm_files), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL,
                              start_new_session=True)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [x for x in proc.stdout.splitlines() if x.startswith(vllm_files.MARKER)]
    if proc.returncode != 0 or len(lines) != 1:
        return None
    try:
        probe = json.loads(lines[0][len(vllm_files.MARKER):])
    except ValueError:
        return None
    if not probe.get("version") or len(probe.get("files") or []) < 2:
        return None
    return {"python": str(path), "real": str(real), "size": st.st_size, "mtime_ns": st.st_mtime_ns, **probe}


def cache_key(commands: Sequence[ServerCommand], timeout: float = 30) -> str | None:
    """The cache key of checking ``commands`` with their interpreters as installed now.

    Args:
        commands: the commands the check would run (order matters).
        timeout: seconds allowed to probe each interpreter.

    Returns:
        A hex SHA-256, or None when an interpreter or its vLLM cannot be identified (the
        check must run).
    """
    ids = {}
    for c in commands:
        py = c.argv[0] if c.argv else ""
        if py not in ids:
            got = _interpreter_id(py, timeout)
            if got is None:
                return None
            ids[py] = got
    # the check's own program: a changed pre-launch check never reuses an older check's all-clear
    checker = hashlib.sha256(Path(server_args.__file__).read_bytes()).hexdigest()
    body = {"interpreters": ids, "checker": checker,
            "commands": [{"variant": c.variant_id, "argv": list(c.argv), "env": dict(sorted(c.env.items())),
                          "speculates": c.speculates} for c in commands]}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _read(path: Path) -> dict[str, JsonValue]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != 1 or not isinstance(data.get("keys"), dict):
        return {}
    return data["keys"]


def cached_all_clear(results_dir: Path, key: str | None, checked: int) -> bool:
    """Whether the cache in ``results_dir`` holds an all-clear for ``key`` over
    ``checked`` commands (False for a None key or any unreadable cache)."""
    if key is None:
        return False
    hit = _read(Path(results_dir) / CACHE_NAME).get(key)
    return isinstance(hit, dict) and hit.get("checked") == checked


def store_all_clear(results_dir: Path, key: str | None, checked: int) -> str | None:
    """Store an all-clear for ``key`` (no-op for None). Best effort: returns why it was
    not written, else None (a cache that cannot be written only costs the next run the
    check)."""
    if key is None:
        return None
    path = Path(results_dir) / CACHE_NAME
    keys = _read(path)
    keys.pop(key, None)
    keys[key] = {"checked": checked, "written_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    keys = dict(list(keys.items())[-MAX_KEYS:])
    try:
        write_atomic(path, json.dumps({"version": 1, "keys": keys}, indent=1))
    except OSError as e:
        return f"{path}: {e}"
    return None
