"""summary.html: self-contained, numbers on the plots equal the record's, and it renders in a
real headless Chromium (Debian package ``chromium``; .ci/run installs it) without console
messages or network requests. The screenshot is written to the test's tmp folder."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness.records.run_record import write_run
from harness.records.samples import Sample, write_jsonl
from harness.report.html import render_html, write_html

from ..record_factory import typed

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

CFG, P = "tiny-cfg", "flexible-numeric"
ACC = {"reference": (0.95, [0.889, 0.978]), "spec": (0.90, [0.826, 0.945])}
POS = [0.98, 0.95]
DIVERGE = [3, 3, 5]


def make_record(run_dir: Path, run_id: str = "now", started: str = "2026-11-30T02:00:00+00:00", ref_acc: float = 0.95):
    samples = {}
    for v in ("reference", "spec"):
        xs = [Sample(CFG, v, "arith", f"arith/test/{i}", f"h{i}", "7",
                     completion=f"{v} says {7 if (v == 'reference' or i) else 8} #### x",
                     token_ids=(i,), finish_reason="stop", answers={P: "7"}, correct={P: v == "reference" or i > 0})
              for i in range(3)]
        rel = f"samples/{CFG}/{v}/arith.jsonl"
        write_jsonl(run_dir / rel, xs)
        samples[v] = rel
    def task(v):
        acc, ci = ACC[v]
        if v == "reference":
            acc = ref_acc
        return {"status": "ran", "samples": samples[v], "num_requests": 100, "error_count": 0, "seconds": 3.0,
                "accuracy": {P: acc}, "accuracy_ci": {P: ci},
                "spec_decode": None if v == "reference" else {"mean_acceptance_length": 2.93, "acceptance_rate": 0.965,
                                                              "per_position_acceptance": POS},
                "per_position_acceptance_ci": None if v == "reference" else [[0.96, 0.99], [0.92, 0.97]]}
    rec = typed({
        "run_id": run_id, "status": "completed", "passed": False, "exit_code": 1,
        "provenance": {"evalrun_version": "0.1.0", "started_at": started, "ended_at": started,
                       "command_line": ["evalrun"]},
        "configs": [{"name": CFG, "pipeline": P,
                     "variants": {v: {"engine": {}, "tasks": {"arith": task(v)}} for v in ("reference", "spec")},
                     "comparisons": [{"baseline": "reference", "candidate": "spec", "task": "arith", "pipeline": P,
                                      "compared": 100, "matched": 97, "output_match_rate": 0.97,
                                      "mismatches": [{"question_id": f"arith/test/{k}", "first_divergence": d,
                                                      "baseline_text": "a", "candidate_text": "b", "baseline_tokens": 9,
                                                      "candidate_tokens": 9} for k, d in enumerate(DIVERGE)],
                                      "paired": {"n": 3, "accuracy_a": 1.0, "accuracy_b": 2 / 3,
                                                 "a_only": ["arith/test/0"], "b_only": []}}],
                     "gates": [{"id": f"{CFG}/reference->spec/arith/min_output_match", "kind": "min_output_match",
                                "config": CFG, "variant": "spec", "task": "arith", "baseline": "reference", "op": ">=",
                                "observed": 0.97, "limit": 1.0, "passed": False, "verdict": "FAIL",
                                "detail": "97/100 completions identical", "questions": []}]}],
    })
    write_run(run_dir, rec)
    return rec


class Figures(HTMLParser):
    """Text of every <figure data-figure=...> (stdlib parser, not evalrun code)."""

    def __init__(self):
        super().__init__()
        self.stack, self.texts = [], {}

    def handle_starttag(self, tag, attrs):
        if tag == "figure":
            self.stack.append(dict(attrs).get("data-figure"))
            self.texts.setdefault(self.stack[-1], [])

    def handle_endtag(self, tag):
        if tag == "figure" and self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if self.stack and data.strip():
            self.texts[self.stack[-1]].append(data.strip())


def figure_texts(html: str) -> dict[str, list[str]]:
    f = Figures()
    f.feed(html)
    return f.texts


def check_numbers(html: str) -> None:
    t = figure_texts(html)
    assert set(t) == {"accuracy", "per-position", "first-divergence", "trend"}
    for v, (acc, _) in ACC.items():
        assert f"{acc:.3f}" in t["accuracy"], v
    assert [x for x in t["per-position"] if re.fullmatch(r"\d\.\d\d", x)] == [f"{p:.2f}" for p in POS]
    # bar labels: 2 questions diverge first at token 3, 1 at token 5
    assert "3 of 100 differ" in " ".join(t["first-divergence"])
    bars = [x for x in t["first-divergence"] if re.fullmatch(r"\d", x)]
    assert "2" in bars and "1" in bars


@pytest.fixture()
def report(tmp_path):
    results = tmp_path / "results"
    for i, acc in enumerate([0.96, 0.955]):
        make_record(results / f"old{i}", f"old{i}", f"2026-11-2{i + 7}T02:00:00+00:00", acc)
    rec = make_record(results / "now", "now")
    return rec, write_html(rec, results / "now")


def test_self_contained_and_numbers_equal_record(report):
    rec, path = report
    html = path.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html)
    assert not re.search(r"url\((?!#)", html) and "<script" not in html and "<link" not in html  # only local url(#id)
    check_numbers(html)
    # flipped question side by side: both completions in one row
    assert "reference says 7 #### x" in html and "spec says 8 #### x" in html


CHROME = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chrome = pytest.mark.skipif(
    CHROME is None, reason="Chromium not installed (apt-get install -y chromium; .ci/run does)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]
BROWSER_OWN = re.compile(r"^https?://([a-z0-9-]+\.)*(google\.com|googleapis\.com|gstatic\.com)/")


def chrome(args: list[str], workdir: Path) -> tuple[str, list[str], list[str]]:
    """Run Chromium with a new empty profile; returns (stdout, console lines, page URLs
    requested over the network (from the net log, the browser's own update pings excluded))."""
    profile = Path(tempfile.mkdtemp(dir=workdir))
    netlog = workdir / f"net-{profile.name}.json"
    out = subprocess.run([CHROME, *FLAGS, f"--user-data-dir={profile}", f"--log-net-log={netlog}", *args],
                         capture_output=True, text=True, timeout=120)
    console = [x for x in out.stderr.splitlines() if ":CONSOLE" in x]
    urls = set(re.findall(r'"url":"([^"]+)"', netlog.read_text())) if netlog.exists() else set()
    page = sorted(u for u in urls if not u.startswith(("file:", "data:")) and not BROWSER_OWN.match(u))
    return out.stdout, console, page


@needs_chrome
def test_detection_catches_console_errors_and_network(tmp_path):
    """The checks below can fail: a page with a console error and a remote image is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><script>console.error("boom")</script><img src="http://example.invalid/x.png"></body></html>')
    _, console, page = chrome(["--dump-dom", bad.as_uri()], tmp_path)
    assert any("boom" in x for x in console)
    assert "http://example.invalid/x.png" in page


@needs_chrome
def test_renders_in_headless_chromium(report, tmp_path):
    rec, path = report
    dom, console, page = chrome(["--dump-dom", path.as_uri()], tmp_path)
    assert console == [] and page == []
    check_numbers(dom)                                        # the numbers the browser shows
    shot = tmp_path / "summary.png"
    _, console, page = chrome([f"--screenshot={shot}", "--window-size=1280,2400", path.as_uri()], tmp_path)
    assert console == [] and page == []
    import matplotlib.image as mpimg

    img = mpimg.imread(shot)
    assert img.shape[0] == 2400 and img.shape[1] == 1280
    assert img[..., :3].std() > 0.05                          # not a blank page
    shutil.copy(shot, path.parent / "summary.png")


def test_render_without_history_has_no_trend(tmp_path):
    rec = make_record(tmp_path / "solo", "solo")
    assert "trend" not in figure_texts(render_html(rec, tmp_path / "solo", None))
    assert json.loads((tmp_path / "solo" / "run.json").read_text())["run_id"] == "solo"
