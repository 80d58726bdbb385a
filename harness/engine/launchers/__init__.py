"""Programs that start a server in the servers' interpreter, run by path.

Like :mod:`harness.engine.probes` (standard library only at module level, nothing of
evalrun imported, run as ``[python, <this folder>/<launcher>.py, args...]``), but a
launcher does not answer a question: it becomes the server. Kept out of ``probes/`` on
purpose: a probe answers on stdout and exits, a launcher never does.

* :mod:`.vllm_cli`: the ``vllm`` console script (``vllm serve MODEL ARGS``), for builds
  whose own script cannot start (:mod:`harness.engine.launch`).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType


def command(python: str, launcher: ModuleType, *args: str) -> list[str]:
    """The command that runs ``launcher`` (a module of this package) by path in ``python``.

    Raises:
        ValueError: ``launcher`` is not a module of this folder.
    """
    path = Path(launcher.__file__ or "")
    if path.parent != Path(__file__).parent or path.suffix != ".py":
        raise ValueError(f"{launcher.__name__}: not a launcher module of {Path(__file__).parent}")
    return [python, str(path), *args]
