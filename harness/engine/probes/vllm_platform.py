"""Probe: the platform the installed vLLM detects, as vLLM's GSM8K test asks it.

Run by path in the servers' interpreter (:mod:`harness.engine.probes`) by
:mod:`harness.engine.platform_skips`; standard library only at module level. Prints one
line, :data:`MARKER` and JSON::

    {"device_type": str, "cuda": bool, "rocm": bool, "gfx950": bool | None}

``cuda`` / ``rocm``: ``vllm.platforms.current_platform.is_cuda()`` / ``is_rocm()``;
``gfx950``: ``vllm.platforms.rocm.on_gfx950()`` on ROCm, else None. Without vLLM it fails
(a traceback, exit code 1).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

#: marks the one result line on stdout (vLLM may print other lines).
MARKER = "EVALRUN_PLATFORM "


def facts() -> dict[str, Any]:
    """What vLLM's test asks of ``current_platform`` (module docstring)."""
    from vllm.platforms import current_platform

    out: dict[str, Any] = {"device_type": str(current_platform.device_type), "cuda": bool(current_platform.is_cuda()),
                           "rocm": bool(current_platform.is_rocm()), "gfx950": None}
    if out["rocm"]:
        from vllm.platforms.rocm import on_gfx950

        out["gfx950"] = bool(on_gfx950())
    return out


def path_as_dash_c() -> None:
    """``sys.path`` as ``python -c`` has it: the current folder first (``""``), not this
    file's folder (this file's name must not shadow ``vllm.platforms``' imports)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == here:
        sys.path[0] = ""


def main() -> None:
    """Print :data:`MARKER` and the platform's JSON."""
    path_as_dash_c()
    print(MARKER + json.dumps(facts()), flush=True)


if __name__ == "__main__":
    main()
