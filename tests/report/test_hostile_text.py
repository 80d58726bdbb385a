"""Reports survive any text: colour codes and control characters in a
server log, lone surrogates, very long lines and markup in completions. The FAKE server
(``FAKE_HOSTILE=1``) produces them on demand; the results are read back with a real
JUnit consumer (junitparser), Python's XML and JSON parsers, and headless Chromium."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET

import pytest

from harness.records.run_record import load_run, write_run
from harness.records.text import REPLACEMENT
from harness.report.html import write_html
from harness.report.junit import write_junit
from harness.report.summary import render_markdown

from ..orchestration.test_runner_fake_server import config, run
from ..record_factory import typed

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

junitparser = pytest.importorskip("junitparser")

#: Characters XML 1.0 forbids (section 2.2), listed here independently of evalrun.
FORBIDDEN = [chr(c) for c in range(0x20) if c not in (0x9, 0xA, 0xD)] + ["\ufffe", "\uffff"]


def no_forbidden(text: str) -> None:
    bad = sorted({hex(ord(ch)) for ch in text if ch in FORBIDDEN or 0xD800 <= ord(ch) <= 0xDFFF})
    assert not bad, f"forbidden characters survived: {bad}"
    assert "\x1b[" not in text


def test_a_server_dying_with_colour_codes_gives_well_formed_junit(tmp_path):
    cfg = config(tmp_path, {"FAKE_MODE": "ok"}, {"FAKE_MODE": "exit_on_start", "FAKE_HOSTILE": "1"})
    code, rec, run_dir = run(tmp_path, cfg)
    assert code == 2
    text = (run_dir / "junit.xml").read_text(encoding="utf-8")
    no_forbidden(text)
    ET.fromstring(text.encode("utf-8"))                           # well-formed XML 1.0
    xml = junitparser.JUnitXml.fromfile(str(run_dir / "junit.xml"))
    cases = {c.name: c for s in xml for c in s}
    err = cases["fake/spec/*/server"].result[0]
    assert isinstance(err, junitparser.Error) and "hostile log" in err.text and "ERROR" in err.text
    assert "exited with code 3" in err.message
    no_forbidden((run_dir / "summary.md").read_text(encoding="utf-8"))
    no_forbidden((run_dir / "summary.html").read_text(encoding="utf-8"))
    assert rec["configs"][0]["variants"]["spec"]["server"]["status"] == "exited_early"


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    cfg = config(tmp, {"FAKE_MODE": "ok"}, {"FAKE_MODE": "ok", "FAKE_HOSTILE": "1"})
    code, rec, run_dir = run(tmp, cfg)
    return code, rec, run_dir


def test_hostile_completions_keep_run_json_and_samples_valid(hostile_run):
    code, rec, run_dir = hostile_run
    assert code == 1                                   # the outputs differ: min_output_match fails
    raw = (run_dir / "run.json").read_bytes()
    raw.decode("utf-8")                                # strict UTF-8: no lone surrogate was written
    mm = rec["configs"][0]["comparisons"][0]["mismatches"][0]
    assert "\x00\x07" in mm["candidate_text"] and "\x1b[31m" in mm["candidate_text"]   # JSON keeps the evidence
    t = rec["configs"][0]["variants"]["spec"]["tasks"]["gsm8k"]
    lines = (run_dir / t["samples"]).read_bytes().decode("utf-8").splitlines()
    assert len(lines) == 6 and all("<script>alert(1)</script>" in json.loads(x)["completion"] for x in lines)

    assert t["samples_sha256"] == hashlib.sha256((run_dir / t["samples"]).read_bytes()).hexdigest()


def test_hostile_completions_give_valid_junit_markdown_and_html(hostile_run):
    _, rec, run_dir = hostile_run
    for name in ("junit.xml", "summary.md", "summary.html"):
        no_forbidden((run_dir / name).read_text(encoding="utf-8"))
    xml = junitparser.JUnitXml.fromfile(str(run_dir / "junit.xml"))
    failed = [c for s in xml for c in s if c.result and isinstance(c.result[0], junitparser.Failure)]
    assert any(c.name == "fake/reference->spec/gsm8k/min_output_match" for c in failed)
    props = {p.name: p.value for s in xml for p in s.properties()}
    assert props == {"evalrun.outcome": "FAILED"}
    md = (run_dir / "summary.md").read_text(encoding="utf-8")
    assert "<script>" not in md and "&lt;script&gt;alert(1)&lt;/script&gt;" in md   # escaped in the cell
    assert md.count("## Servers") == 1 and "# evalrun run r: FAILED" in md
    html = (run_dir / "summary.html").read_text(encoding="utf-8")
    assert "<script>" not in html


CHROME = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROME is None, reason="Chromium not installed (apt-get install -y chromium; .ci/run does)")
def test_hostile_html_renders_in_headless_chromium(hostile_run, tmp_path):
    _, _, run_dir = hostile_run
    profile = tempfile.mkdtemp(dir=tmp_path)
    out = subprocess.run([CHROME, "--headless=new", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                          "--enable-logging=stderr", "--v=0", "--dump-dom", (run_dir / "summary.html").as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert [x for x in out.stderr.splitlines() if ":CONSOLE" in x] == []
    dom = out.stdout
    assert "FAILED" in dom and "min_output_match" in dom
    assert "<script>alert(1)</script>" not in dom            # the markup stayed text


def test_lone_surrogates_anywhere_in_a_record_are_written_as_valid_utf8(tmp_path):
    """Lone surrogates reach a record only from evalrun's own text (an engine's JSON with
    one is a request error at the client); every writer still survives them."""
    bad = "x\ud800y \x1b[31mz\x00"
    rec = typed({"run_id": "s", "status": "completed", "passed": False, "exit_code": 1, "configs": [{
        "name": "cfg", "error": bad, "variants": {"v": {"error": bad, "tasks": {}}},
        "gates": [{"id": "cfg/v/t/accuracy_floor", "kind": "accuracy_floor", "variant": "v", "task": "t",
                   "op": ">=", "passed": False, "detail": bad, "questions": [bad]}]}]})
    write_run(tmp_path, rec)
    assert load_run(tmp_path).configs[0].error == f"x{REPLACEMENT}y \x1b[31mz\x00"
    write_junit(rec, tmp_path / "junit.xml")
    text = (tmp_path / "junit.xml").read_bytes().decode("utf-8")
    no_forbidden(text)
    junitparser.JUnitXml.fromfile(str(tmp_path / "junit.xml"))
    md = render_markdown(rec, tmp_path)
    no_forbidden(md)
    md.encode("utf-8")
    write_html(rec, tmp_path)
    no_forbidden((tmp_path / "summary.html").read_bytes().decode("utf-8"))
