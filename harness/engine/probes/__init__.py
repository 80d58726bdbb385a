"""Programs evalrun runs in another interpreter: real modules, run by path.

Each module here is a small program that runs in the servers' interpreter (or, for the
watchdog, a fresh one of evalrun's): it is run BY PATH, ``[python, <this folder>/<probe>.py,
args...]`` (:func:`command`; virtualenv's ``discovery/py_info.py`` is the model), so it
imports nothing of evalrun and nothing outside the standard library at module level (vLLM,
torch and their companions are imported inside functions, where a probe asks about them),
and it answers on stdout (one line: a marker and JSON, named by the probe's ``MARKER``).
They are linted and typed as the rest of the package; importing one runs nothing.

Run by path, a program has its own folder first on ``sys.path``; a probe that looks for
vLLM or torch puts the current folder there instead (``path_as_dash_c``), as the
``python -c`` it replaces had it, so that no probe's file name can shadow a module the
interpreter asked imports.

* :mod:`.build_identity`: the installed vLLM's distribution, version and commit, without
  importing it (:func:`harness.engine.builds.read_identity`);
* :mod:`.vllm_files`: what identifies the installed vLLM's files, without importing it
  (:mod:`harness.engine.preflight_cache`);
* :mod:`.server_args`: each server command parsed and validated by the installed vLLM's own
  parser, and its async-scheduling/drafter rule (:mod:`harness.engine.preflight`);
* :mod:`.torch_stack`: torch, its companion wheels and ``import vllm``
  (:mod:`harness.engine.doctor`, :mod:`harness.engine.builds`);
* :mod:`.cuda_count`: torch's CUDA device count (:mod:`harness.engine.devices`);
* :mod:`.vllm_platform`: the platform the installed vLLM detects, as vLLM's GSM8K test asks
  it (:mod:`harness.engine.platform_skips`);
* :mod:`.group_watchdog`: kills a server's process group when evalrun ends
  (:mod:`harness.engine.server`).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType


def command(python: str, probe: ModuleType, *args: str) -> list[str]:
    """The command that runs ``probe`` (a module of this package) by path in ``python``.

    Raises:
        ValueError: ``probe`` is not a module of this folder (it could not run by path).
    """
    path = Path(probe.__file__ or "")
    if path.parent != Path(__file__).parent or path.suffix != ".py":
        raise ValueError(f"{probe.__name__}: not a probe module of {Path(__file__).parent}")
    return [python, str(path), *args]
