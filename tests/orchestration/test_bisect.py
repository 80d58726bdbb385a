"""``evalrun bisect`` end to end on fake builds.

A regression between two engine builds cannot be produced on demand with the real
engine (and each real build is a 3.5 GB install), so the builds here are small
interpreters that run the fake server (``tests/fake_vllm.py``): build i reports version
``0.0.i`` to the build probe, and from the first bad build on its speculative variant
corrupts its outputs (``FAKE_SPEC_MODE=corrupt``), as a broken drafter or state would.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.cli import main
from tests.conftest import FAKE_VLLM, write_fake_spec_config

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)


def _fake_builds(folder: Path, n: int, first_bad: int, low_acceptance: int | None = None) -> list[str]:
    """``n`` fake builds (1-based ``first_bad`` onward corrupt; build ``low_acceptance``
    with a mean acceptance length of 1.25, an unrelated failure); their interpreter paths."""
    out = []
    for i in range(1, n + 1):
        p = folder / f"build-{i}"
        bad = "export FAKE_SPEC_MODE=corrupt\n" if i >= first_bad else ""
        bad += "export FAKE_METRICS=low\n" if i == low_acceptance else ""
        p.write_text(f"#!/bin/sh\nexport FAKE_BUILD_VERSION=0.0.{i}\n{bad}exec {sys.executable} {FAKE_VLLM} \"$@\"\n")
        p.chmod(0o755)
        out.append(str(p))
    return out


def _bisect(tmp_path, builds, gsm8k_dir, capsys):
    cfg = write_fake_spec_config(tmp_path, num_questions=4)
    # mean acceptance length: 1.5 on every fake build but the low one (1.25)
    cfg.write_text(cfg.read_text() + "gates: {min_acceptance_length: 1.4}\n")
    argv = ["bisect", "--config", str(cfg), "--data-dir", str(gsm8k_dir), "--results-dir", str(tmp_path / "results"),
            "--quiet", "--no-baseline", "--bisect-id", "bs"]
    for b in builds:
        argv += ["--build", b]
    code = main(argv)
    out = capsys.readouterr().out.strip().splitlines()
    rec = json.loads((tmp_path / "results" / "bs" / "bisect.json").read_text())
    return code, out, rec


def test_bisect_names_the_first_bad_of_six_builds(tmp_path, gsm8k_dir, capsys):
    # build 3 (the first midpoint) also fails a gate the newest build passes: it must not
    # steer the search (judged good, its failure listed as unrelated)
    builds = _fake_builds(tmp_path, 6, first_bad=4, low_acceptance=3)
    code, out, rec = _bisect(tmp_path, builds, gsm8k_dir, capsys)
    assert code == 0, rec.get("message")
    assert builds[3] in out[-1] and "first bad build: 4" in out[-1]
    # the two ends, then a binary search over builds 2..5 (2 + ceil(log2(5)) = 5 at most)
    order = [s["index"] for s in rec["steps"]]
    assert order[:2] == [6, 1] and len(order) <= 5
    assert order == [6, 1, 3, 4]
    assert {s["index"]: s["verdict"] for s in rec["steps"]} == {6: "bad", 1: "good", 3: "good", 4: "bad"}
    assert (rec["status"], rec["first_bad"], rec["last_good"]) == ("found", 4, 3)
    # the criterion is what failed at the newest build, read here from its own run record
    results = tmp_path / "results"
    newest = json.loads((results / rec["steps"][0]["run_id"] / "run.json").read_text())
    failed = sorted(g["id"] for c in newest["configs"] for g in c["gates"] if g["passed"] is False)
    assert failed and rec["bad_end_gates"] == failed
    for s in rec["steps"]:
        run = json.loads((results / s["run_id"] / "run.json").read_text())  # every step's run is kept
        assert s["run_id"] == f"bs-b{s['index']}-vllm-0.0.{s['index']}"  # named by its build
        assert run["provenance"]["build"]["version"] == f"0.0.{s['index']}"
        assert run["provenance"]["build"]["python"] == builds[s["index"] - 1]
    three = next(s for s in rec["steps"] if s["index"] == 3)
    assert three["exit_code"] == 1 and three["verdict"] == "good"
    assert three["other_failures"] and all(g.endswith("min_acceptance_length") for g in three["other_failures"])
    assert not set(three["other_failures"]) & set(failed)
    four = next(s for s in rec["steps"] if s["index"] == 4)
    assert four["failed"] and set(four["failed"]) <= set(failed)
    assert all(f.endswith("PASS -> FAIL") for f in four["flipped"]) and four["flipped"]
    md = (results / "bs" / "bisect.md").read_text()
    assert "**found**" in md and "vllm 0.0.4" in md


def test_bisect_refuses_when_the_newest_build_passes(tmp_path, gsm8k_dir, capsys):
    builds = _fake_builds(tmp_path, 3, first_bad=99)
    code, out, rec = _bisect(tmp_path, builds, gsm8k_dir, capsys)
    assert code == 2 and rec["status"] == "refused"
    assert "newest build" in out[-1] and builds[-1] in out[-1]
    assert [s["index"] for s in rec["steps"]] == [3]  # nothing else ran


def test_bisect_refuses_run_options_it_sets_itself(tmp_path, capsys):
    cfg = write_fake_spec_config(tmp_path, num_questions=4)
    code = main(["bisect", "--config", str(cfg), "--build", sys.executable, "--build", sys.executable,
                 "--python", sys.executable])
    assert code == 2 and "--python" in capsys.readouterr().err
    code = main(["bisect", "--config", str(cfg), "--build", sys.executable])
    assert code == 2 and "at least two" in capsys.readouterr().err


def test_a_run_takes_its_engine_as_a_build(tmp_path, gsm8k_dir, capsys):
    cfg = write_fake_spec_config(tmp_path, num_questions=4)
    build = _fake_builds(tmp_path, 1, first_bad=99)[0]
    results = tmp_path / "results"
    common = ["--config", str(cfg), "--data-dir", str(gsm8k_dir), "--results-dir", str(results), "--quiet",
              "--no-baseline"]
    assert main([*common, "--build", build, "--run-id", "r"]) == 0
    run = json.loads((results / "r" / "run.json").read_text())
    assert run["provenance"]["build"] == {"python": build, "package": "vllm", "version": "0.0.1", "commit": None,
                                          "evalrun_plugin": False}
    assert run["provenance"]["vllm_version"] == "vllm 0.0.1"  # the servers' engine, not evalrun's own
    capsys.readouterr()
    assert main([*common, "--build", build, "--python", build]) == 2
    assert "name the engine twice" in capsys.readouterr().err
    assert main([*common, "--build", "0123abcd"]) == 2
    assert "--build-index-template" in capsys.readouterr().err
