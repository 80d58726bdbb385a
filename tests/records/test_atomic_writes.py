"""Every file of a run folder goes through the atomic writer (harness/records/atomic.py):
a scan of the package's source for direct writes (``write_text``, ``write_bytes``,
``open``/``fdopen`` with a writing mode). The few left are named here with the reason
each cannot or need not use it; a new one fails this test until it moves to
``write_atomic`` or is added with its reason."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

PKG = Path(__file__).resolve().parents[2] / "harness"

#: (file, function) -> why a direct write is right there.
ALLOWED = {
    ("records/atomic.py", "write_atomic"): "the atomic writer itself",
    ("records/run_folder.py", "claim_run_folder"): "the claim: a complete temporary file linked with link(2)",
    ("records/run_folder.py", "RunFolderClaim.take_over"): "a resumed run's claim, rewritten in place under its "
                                                           "flock (a rename would leave the lock on the old file)",
    ("engine/server.py", "VllmServer.start"): "the server log: a stream the server appends to while it runs",
    ("faults/reports.py", "flush_report"): "the plugin imports no evalrun; it does the atomic writer's steps itself",
    ("models/tokenizer.py", "write_tokenizer"): "the model cache, not a run folder (published by a folder rename)",
    ("models/tiny.py", "write_json"): "the model cache, not a run folder (published by a rename of the folder)",
    ("models/training.py", "ensure_trained_model"): "a lock file's handle, nothing is written to it",
    ("config/vllm_parser.py", "main"): "the parser snapshot shipped in the package (--write), not a run folder",
    ("report/figures.py", "write_figures"): "docs/*.md of the repository, not a run folder",
    ("engine/builds.py", "_locked"): "a lock file's handle, nothing is written to it",
    ("engine/builds.py", "_run"): "an installer step's log in the build cache, appended to as the step runs",
}


def _direct_writes() -> set[tuple[str, str]]:
    found = set()
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        stack: list[str] = []

        def visit(node: ast.AST, rel: str = rel, stack: list[str] = stack) -> None:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                stack.append(node.name)
                for child in ast.iter_child_nodes(node):
                    visit(child)
                stack.pop()
                return
            if isinstance(node, ast.Call) and _writes(node):
                found.add((rel, ".".join(stack)))
            for child in ast.iter_child_nodes(node):
                visit(child)

        visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def _writes(call: ast.Call) -> bool:
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    if name in ("write_text", "write_bytes", "pwrite"):
        return True
    if name not in ("open", "fdopen"):
        return False
    # open(path, mode) / os.fdopen(fd, mode); Path(...).open(mode)
    method = (
        isinstance(f, ast.Attribute)
        and name == "open"
        and not (isinstance(f.value, ast.Name) and f.value.id in ("os", "io"))
    )
    modes = list(call.args[0:1] if method else call.args[1:2]) + [k.value for k in call.keywords if k.arg == "mode"]
    return any(isinstance(m, ast.Constant) and isinstance(m.value, str) and set(m.value) & set("wax+") for m in modes)


def test_every_direct_write_in_the_package_is_named_with_its_reason():
    found = _direct_writes()
    assert found - set(ALLOWED) == set(), "write these with harness.records.atomic.write_atomic"


def test_the_scan_sees_a_direct_write():
    # the scan itself can fail: a write_text and an open(..., "w") in a made-up module are found
    tree = ast.parse("def f(p):\n    p.write_text('x')\n    open(p, 'w')\n    open(p)\n")
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, (ast.Attribute, ast.Name))]
    assert [_writes(c) for c in calls] == [True, True, False]
