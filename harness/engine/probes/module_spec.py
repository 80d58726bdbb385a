"""Probe: whether dotted modules can be imported in the servers' interpreter, without
importing them.

Run by path in the servers' interpreter (:mod:`harness.engine.probes`) by
:mod:`harness.engine.rpc_checks`, from the directory the server starts in; standard library
only. Arguments: module names. Prints one line, :data:`MARKER` and JSON
``{name: bool}``: ``importlib.util.find_spec(name) is not None`` (a parent package that
cannot be found counts as not found).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

#: marks the one result line on stdout.
MARKER = "EVALRUN_MODULE_SPEC "


def findable(name: str) -> bool:
    """Whether ``name`` can be found on ``sys.path`` (its parents are imported, as
    ``find_spec`` does; a parent that is missing or fails to import counts as not found)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def main(names: list[str]) -> None:
    """Print :data:`MARKER` and ``{name: findable}``."""
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == here:
        sys.path[0] = ""  # as ``python -c``: the working directory, as the server has it
    print(MARKER + json.dumps({n: findable(n) for n in names}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
