"""When evalrun is reinstalled beside a build: the plugin's hash covers every module of the
plugin package (harness/faults/), so editing one fault's module reinstalls it."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from harness.engine import builds


@pytest.fixture
def plugin_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    dst = tmp_path / "faults"
    shutil.copytree(builds.PLUGIN_DIR, dst, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(builds, "PLUGIN_DIR", dst)
    return dst


def test_the_hash_is_of_every_module_in_path_order(plugin_copy: Path):
    h = hashlib.sha256()
    for f in sorted(plugin_copy.rglob("*.py")):
        h.update(f.relative_to(plugin_copy).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    assert builds._plugin_sha() == h.hexdigest()


def test_a_change_to_one_faults_module_changes_the_hash(plugin_copy: Path):
    before = builds._plugin_sha()
    fault = sorted((plugin_copy / "catalog").glob("*.py"))[-1]
    fault.write_text(fault.read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
    assert builds._plugin_sha() != before


def test_a_new_faults_module_changes_the_hash(plugin_copy: Path):
    before = builds._plugin_sha()
    (plugin_copy / "catalog" / "zz_new_fault.py").write_text("X = 1\n", encoding="utf-8")
    assert builds._plugin_sha() != before
