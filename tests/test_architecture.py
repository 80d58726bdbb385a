"""The package's import graph: no circles, and no module importing from a later stage.

Stages (docs/maintainers/architecture.md), earliest first. A module may import from its own stage
or an earlier one; the orchestration modules (runner, selfcheck, calibrate, cli) may
import from every stage. The vLLM plugin (``harness.faults``) imports nothing else of
evalrun, so it loads cheaply in every vLLM process.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "harness"

#: stage rank of each top-level part of the package (lower = earlier in the data flow)
STAGES = {
    "__init__": 0, "faults": 0,
    "config": 1, "records": 2, "tasks": 3, "models": 4, "engine": 5,
    "analysis": 6, "report": 7,
    "run": 8, "api": 9, "cli": 10, "pytest_plugin": 10, "test_gsm8k_correctness": 10,
}


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        rel = p.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every harness module ``name`` imports (module level and inside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                mod = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t.startswith("harness") and t != name:
                found.add(t)
    return found


def _stage(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return 0
    key = parts[1]
    if key not in STAGES:
        pytest.fail(f"{module}: not assigned to a stage in tests/test_architecture.py STAGES")
    return STAGES[key]


GRAPH = {n: _imports(n, p, set(_modules())) for n, p in _modules().items()}


def test_every_module_has_a_stage():
    for n in GRAPH:
        _stage(n)


def test_no_module_imports_from_a_later_stage():
    bad = [
        f"{n} (stage {_stage(n)}) imports {t} (stage {_stage(t)})"
        for n, ts in GRAPH.items() for t in ts
        if t != "harness" and _stage(t) > _stage(n)
    ]
    assert not bad, "\n".join(bad)


def test_plugin_imports_nothing_else_of_evalrun():
    for n, ts in GRAPH.items():
        if n.startswith("harness.faults"):
            assert {t for t in ts if not t.startswith("harness.faults")} <= {"harness"}, (n, ts)


def test_no_import_circles():
    # Tarjan-free: DFS with colours; report the first circle found
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for t in sorted(GRAPH.get(n, ())):
            if t == "harness" or t.startswith(n + "."):
                continue  # a package importing its own submodule is not a circle
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if state.get(t) is None:
                c = visit(t)
                if c:
                    return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(GRAPH):
        if state.get(n) is None:
            circle = visit(n)
            assert circle is None, " -> ".join(circle)


def test_the_walker_sees_a_circle_and_a_backward_import():
    """The checks above can fail: a made-up graph with a circle and a backward edge."""
    global GRAPH
    saved = GRAPH
    try:
        GRAPH = {"harness.config.a": {"harness.report.b"}, "harness.report.b": {"harness.config.a"}}
        with pytest.raises(AssertionError, match="harness.config.a -> harness.report.b -> harness.config.a"):
            test_no_import_circles()
        with pytest.raises(AssertionError, match="imports harness.report.b"):
            test_no_module_imports_from_a_later_stage()
    finally:
        GRAPH = saved


def test_the_walker_reads_the_whole_package():
    """GRAPH holds every module of harness/, counted here with os.walk (not rglob)."""
    assert (PKG / "__init__.py").is_file(), f"{PKG}: the package is not where the walker looks"
    files = [os.path.join(d, f) for d, _, fs in os.walk(PKG) for f in fs if f.endswith(".py")]
    assert len(files) == len(GRAPH) and len(files) > 30, (len(files), len(GRAPH))
    assert {"harness.run.runner", "harness.config.loader", "harness.faults.plugin",
            "harness.report.summary"} <= set(GRAPH)


#: test folders that are not a part of the package: the orchestration modules' tests, and
#: e2e (tests that start the real vLLM server or install evalrun afresh)
TEST_ONLY_FOLDERS = {"orchestration", "e2e", "properties"}
#: the test files at the top of tests/: they check the repository as a whole
WHOLE_REPOSITORY_TESTS = {"test_architecture.py", "test_code_health.py", "test_docs.py"}


def test_the_tests_mirror_the_package_stages():
    """Every test folder but TEST_ONLY_FOLDERS is named after a stage package of harness/
    (a new package may start without tests); the test files at the top are WHOLE_REPOSITORY_TESTS."""
    tests = Path(__file__).resolve().parent
    stage_pkgs = {p.parent.name for p in PKG.glob("*/__init__.py")}
    folders = {p.parent.name for p in tests.glob("*/test_*.py")}
    assert stage_pkgs <= set(STAGES), stage_pkgs - set(STAGES)
    assert folders - TEST_ONLY_FOLDERS <= stage_pkgs, (folders - TEST_ONLY_FOLDERS) - stage_pkgs
    assert {"config", "records", "engine", "analysis", "report"} <= folders, folders
    top = {p.name for p in tests.glob("test_*.py")}
    assert top <= WHOLE_REPOSITORY_TESTS, f"{sorted(top - WHOLE_REPOSITORY_TESTS)}: test files belong in a stage folder"
