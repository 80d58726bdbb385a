"""The programs evalrun runs in another interpreter (harness/engine/probes/): standard
library only at module level, nothing of evalrun, run by path; the fake server answers
the probes it stands in for in the same JSON shape as the real ones."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.engine import probes
from harness.engine.probes import build_identity, command, cuda_count, group_watchdog

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

FAKE = Path(__file__).resolve().parents[1] / "fake_vllm.py"
PROBES = sorted(p for p in Path(probes.__file__).parent.glob("*.py") if p.name != "__init__.py")


def module_level_imports(path: Path, anywhere: bool = False) -> set[str]:
    """Top-level package names imported at module level (``anywhere``: also inside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in (ast.walk(tree) if anywhere else tree.body):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                found.add("." * node.level + (node.module or ""))
            elif node.module:
                found.add(node.module.split(".")[0])
    return found


def test_every_probe_imports_only_the_standard_library_at_module_level():
    assert {p.stem for p in PROBES} >= {"build_identity", "vllm_files", "server_args", "torch_stack",
                                        "cuda_count", "group_watchdog"}
    for path in PROBES:
        outside = module_level_imports(path) - set(sys.stdlib_module_names) - {"__future__"}
        assert not outside, f"{path.name} imports {sorted(outside)} at module level"
        assert not {m for m in module_level_imports(path, anywhere=True) if m.startswith((".", "harness"))}, path.name
        assert 'if __name__ == "__main__":' in path.read_text(encoding="utf-8"), path.name


def test_the_checker_sees_a_third_party_import_and_evalrun(tmp_path):
    made_up = tmp_path / "made_up_probe.py"
    made_up.write_text("import json\nimport psutil\nfrom . import sibling\ndef f():\n    import harness.cli\n",
                       encoding="utf-8")
    assert module_level_imports(made_up) - set(sys.stdlib_module_names) == {"psutil", "."}
    assert module_level_imports(made_up, anywhere=True) - set(sys.stdlib_module_names) == {"psutil", ".", "harness"}


def test_a_probe_runs_by_path_and_nothing_else_does():
    argv = command("/x/python", build_identity, "a")
    assert argv == ["/x/python", str(Path(build_identity.__file__)), "a"]
    assert argv[1].endswith("probes/build_identity.py")
    with pytest.raises(ValueError, match="not a probe module"):
        command("/x/python", json)


def _answer(argv: list[str]) -> dict:
    out = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60, check=True)
    (line,) = [x for x in out.stdout.splitlines() if x.startswith(build_identity.MARKER)]
    return json.loads(line[len(build_identity.MARKER):])


def test_the_build_probe_and_the_fakes_answer_have_one_shape():
    real = _answer(command(sys.executable, build_identity))
    fake = _answer(command(str(FAKE), build_identity))
    assert set(real) == set(fake) == {"python", "package", "version", "commit", "evalrun_plugin"}
    assert real["python"] == sys.executable and fake["version"] == "0.0.fake"


def test_the_fake_fails_a_probe_it_does_not_stand_in_for():
    r = subprocess.run(command(str(FAKE), cuda_count), capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "no vLLM or torch here" in r.stderr


def _watched_group() -> tuple[subprocess.Popen, subprocess.Popen, int]:
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    r, w = os.pipe()
    dog = subprocess.Popen(command(sys.executable, group_watchdog, str(sleeper.pid)), stdin=r)
    os.close(r)
    return sleeper, dog, w


@pytest.mark.parametrize("done", [False, True])
def test_the_watchdog_kills_the_group_when_the_pipe_ends_unless_told_done(done):
    sleeper, dog, w = _watched_group()
    try:
        time.sleep(0.3)
        assert sleeper.poll() is None and dog.poll() is None   # evalrun alive: nothing happens
        if done:
            os.write(w, group_watchdog.DONE)
        os.close(w)
        assert dog.wait(timeout=10) == 0
        if done:
            assert sleeper.poll() is None   # the group was checked empty: never signalled
        else:
            assert sleeper.wait(timeout=10) == -9
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
    assert not psutil.pid_exists(dog.pid) or psutil.Process(dog.pid).status() == psutil.STATUS_ZOMBIE
