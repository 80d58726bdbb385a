"""Shards (--shard i/n) and `evalrun merge`; expected assignments worked out by hand."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import harness.report.summary as summary_mod
from harness.cli import main
from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.records.measures import EngineFactsRecord
from harness.records.provenance import EngineBuild
from harness.records.run_record import load_run, write_run
from harness.run.merge import MergeError, assign_shards, config_weight, merge_records, parse_shard

from ..record_factory import typed

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

REPO = Path(__file__).resolve().parents[2]


def test_parse_shard():
    assert parse_shard("2/4") == (2, 4)
    for bad in ("0/4", "5/4", "a/b", "2", "1/0"):
        with pytest.raises(ValueError, match="--shard"):
            parse_shard(bad)


def test_assignment_longest_first_by_hand():
    # heaviest first to the lightest shard: a10->1, b7->2, c5->2 (7<10), d4->1 (10<12), e1->2 (12<14)
    w = {"a": 10, "b": 7, "c": 5, "d": 4, "e": 1}
    assert assign_shards(w, 2) == [["a", "d"], ["b", "c", "e"]]
    items = list(w.items())
    for seed in range(5):
        random.Random(seed).shuffle(items)
        assert assign_shards(dict(items), 2) == [["a", "d"], ["b", "c", "e"]]   # order of the list does not matter
    assert assign_shards({"x": 3}, 3) == [["x"], [], []]
    assert assign_shards({"x": 1, "y": 1}, 2) == [["x"], ["y"]]                 # ties: by name, then lowest shard


def test_weight_is_variants_times_questions(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text("model_name: org/m\naccuracy_threshold: 0.5\nnum_questions: 100\n"
                 "server_args: --speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":2}'\n")
    cp = build_plan([load_config(p)]).configs[0]
    assert config_weight(cp) == 3 * 100          # reference, spec_sync, spec_async x 100 GSM8K questions


def _dry(shard: str | None) -> list[str]:
    args = [sys.executable, "-m", "harness.cli", "--config", "models-h200.txt", "--dry-run", "--json"]
    if shard:
        args += ["--shard", shard]
    out = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    return [c["name"] for c in json.loads(out.stdout)]


def test_shards_of_the_h200_list_partition_it():
    full = _dry(None)
    parts = [_dry(f"{i}/2") for i in (1, 2)]
    assert sorted(parts[0] + parts[1]) == sorted(full)
    assert not set(parts[0]) & set(parts[1])
    assert parts == [_dry(f"{i}/2") for i in (1, 2)]          # deterministic
    assert main(["--config", "models-h200.txt", "--dry-run", "--shard", "3/2"]) == 2


def _gate(cfg: str, passed: bool | None) -> dict:
    return {"id": f"{cfg}/reference/t/accuracy_floor", "kind": "accuracy_floor", "config": cfg,
            "variant": "reference", "task": "t", "baseline": None, "op": ">=", "observed": 0.9,
            "limit": 0.8, "passed": passed, "detail": "x", "questions": [],
            "verdict": {True: "PASS", False: "FAIL", None: "NOT RUN"}[passed]}


def _shard(tmp: Path, i: int, n: int, names: list[str], passed: bool | None = True, version: str = "0.1.0",
           lst: str = "L1", status: str = "completed") -> Path:
    rec = typed({
        "run_id": f"s{i}", "status": status, "passed": passed, "exit_code": 0,
        "provenance": {"evalrun_version": version, "started_at": f"2026-11-30T0{i}:00:00+00:00",
                       "ended_at": f"2026-11-30T0{i}:30:00+00:00",
                       "configs": [{"name": x, "path": f"{x}.yaml", "sha256": "0"} for x in names],
                       "datasets": {f"{x}/t": {"sha256": "0", "source": "s", "num_requests": 1} for x in names}},
        "shard": {"index": i, "count": n, "configs": names, "list": {"sha256": lst, "configs": []}},
        "configs": [{"name": x, "variants": {}, "comparisons": [], "gates": [_gate(x, passed)]} for x in names],
    })
    d = tmp / f"s{i}"
    write_run(d, rec)
    (d / "samples" / names[0] / "reference").mkdir(parents=True)
    (d / "samples" / names[0] / "reference" / "t.jsonl").write_text("")
    return d


def test_merge_combines_and_recomputes_the_exit_code(tmp_path):
    a = _shard(tmp_path, 1, 2, ["b-cfg"])
    b = _shard(tmp_path, 2, 2, ["a-cfg"])
    out = tmp_path / "out"
    assert main(["merge", str(b), str(a), "--results-dir", str(out), "--run-id", "m"]) == 0
    rec = load_run(out / "m")
    assert [c.name for c in rec.configs] == ["a-cfg", "b-cfg"]
    assert rec.passed is True and rec.status == "completed"
    assert rec.provenance.started_at.startswith("2026-11-30T01")
    assert rec.provenance.ended_at.startswith("2026-11-30T02:30")
    assert [m.shard for m in rec.merged_from] == [1, 2]
    assert sorted(rec.provenance.datasets) == ["a-cfg/t", "b-cfg/t"]
    assert (out / "m" / "junit.xml").is_file() and (out / "m" / "summary.html").is_file()
    assert (out / "m" / "samples" / "a-cfg" / "reference" / "t.jsonl").is_file()
    assert (out / "m" / "summary.md").is_file()
    # one failing gate in one shard fails the merged run
    c = _shard(tmp_path / "f", 2, 2, ["a-cfg"], passed=False)
    assert main(["merge", str(a), str(c), "--results-dir", str(out), "--run-id", "m2"]) == 1
    # an incomplete shard makes the merged run "could not run"
    d = _shard(tmp_path / "g", 2, 2, ["a-cfg"], status="incomplete")
    assert main(["merge", str(a), str(d), "--results-dir", str(out), "--run-id", "m3"]) == 2


def test_merge_refuses_mixed_or_missing_shards(tmp_path):
    a = load_run(_shard(tmp_path / "a", 1, 2, ["x"]))
    for other, msg in (
        (_shard(tmp_path / "b", 2, 2, ["y"], version="9.9.9"), "different evalrun version"),
        (_shard(tmp_path / "c", 2, 2, ["y"], lst="L2"), "different list"),
        (_shard(tmp_path / "d", 2, 3, ["y"]), "different list|different shard count"),
        (_shard(tmp_path / "e", 1, 2, ["y"]), "given twice"),
    ):
        with pytest.raises(MergeError, match=msg):
            merge_records([a, load_run(other)], "m")
    with pytest.raises(MergeError, match="2/2 missing"):
        merge_records([a], "m")
    plain = load_run(_shard(tmp_path / "p", 2, 2, ["y"]))
    plain.shard = None
    with pytest.raises(MergeError, match="not a shard run"):
        merge_records([a, plain], "m")
    assert main(["merge", str(tmp_path / "a" / "s1"), "--results-dir", str(tmp_path / "o")]) == 2


# ------------------------------------------------------------------ builds and sample hashes


def _shard_with_task(tmp: Path, i: int, engine: str = "0.32.0", git: str = "rev1") -> Path:
    """A shard folder with one task whose samples file and recorded hash agree."""
    d = _shard(tmp, i, 2, [f"c{i}"])
    rec = load_run(d)
    rec.provenance.git_revision = git
    spath = d / "samples" / f"c{i}" / "reference" / "t.jsonl"
    spath.write_text('{"question_id": "t/test/0"}\n')

    digest = hashlib.sha256(spath.read_bytes()).hexdigest()     # computed here, not by evalrun
    rec.configs[0].variants["reference"] = typed({"run_id": "x", "configs": [{"name": "x", "variants": {
        "reference": {"tasks": {"t": {"samples": f"samples/c{i}/reference/t.jsonl", "samples_sha256": digest}}}}}]}
    ).configs[0].variants["reference"]
    rec.configs[0].variants["reference"].engine = EngineFactsRecord(vllm_version=engine)
    write_run(d, rec)
    return d


def test_merge_refuses_shards_of_different_engine_builds_unless_allowed(tmp_path, capsys):
    a = _shard_with_task(tmp_path / "a", 1, engine="0.32.0")
    b = _shard_with_task(tmp_path / "b", 2, engine="0.33.0.dev1")
    out = tmp_path / "out"
    assert main(["merge", str(a), str(b), "--results-dir", str(out), "--run-id", "m"]) == 2
    err = capsys.readouterr().err
    assert "different engine version" in err and str(a) in err and str(b) in err and "0.33.0.dev1" in err
    assert not (out / "m").exists()
    assert main(["merge", str(a), str(b), "--results-dir", str(out), "--run-id", "m", "--allow-mixed"]) == 0
    rec = load_run(out / "m")
    assert len(rec.merge_warnings) == 1 and "different engine version" in rec.merge_warnings[0]
    assert "WARNING: shards of different builds or lists merged" in (out / "m" / "summary.md").read_text()


def test_merge_refuses_shards_of_different_git_revisions(tmp_path):
    a = load_run(_shard_with_task(tmp_path / "a", 1, git="rev1"))
    b = load_run(_shard_with_task(tmp_path / "b", 2, git="rev2"))
    with pytest.raises(MergeError, match="different git revision \\('rev2' vs 'rev1'\\)"):
        merge_records([a, b], "m")


def test_a_retried_record_over_the_first_attempts_samples_is_refused(tmp_path, capsys):
    a = _shard_with_task(tmp_path / "a", 1)
    b = _shard_with_task(tmp_path / "b", 2)
    spath = b / "samples" / "c2" / "reference" / "t.jsonl"
    spath.write_text('{"question_id": "t/test/0", "completion": "from the first attempt"}\n')
    assert main(["merge", str(a), str(b), "--results-dir", str(tmp_path / "out"), "--run-id", "m"]) == 2
    err = capsys.readouterr().err
    assert f"{b}: samples/c2/reference/t.jsonl: content does not match the hash in run.json" in err
    spath.unlink()
    assert main(["merge", str(a), str(b), "--results-dir", str(tmp_path / "out"), "--run-id", "m"]) == 2
    assert "samples file cannot be read" in capsys.readouterr().err


def test_a_record_without_sample_hashes_cannot_be_verified_and_is_refused(tmp_path):
    a = load_run(_shard_with_task(tmp_path / "a", 1))
    b = _shard_with_task(tmp_path / "b", 2)
    rec = load_run(b)
    rec.configs[0].variants["reference"].tasks["t"].samples_sha256 = None
    write_run(b, rec)
    with pytest.raises(MergeError, match="no content hash in run.json"):
        merge_records([a, load_run(b)], "m")


@pytest.mark.parametrize("passed, code", [(True, 0), (False, 1)])
def test_a_signal_after_the_merged_record_is_written_keeps_its_outcome(tmp_path, capsys, monkeypatch, passed, code):
    """SIGTERM (real, through evalrun's handlers) while the merged tables print: the exit
    code is the merged record's, the last line says it was kept, summary.md and JUnit
    agree with run.json, and no traceback."""
    olds = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    real = summary_mod.render_terminal

    def tables(*a, **k):
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*a, **k)

    monkeypatch.setattr(summary_mod, "render_terminal", tables)
    a = _shard(tmp_path, 1, 2, ["b-cfg"])
    b = _shard(tmp_path, 2, 2, ["a-cfg"], passed=passed)
    out = tmp_path / "out"
    try:
        got = main(["merge", str(a), str(b), "--results-dir", str(out), "--run-id", "m"])
    finally:
        for s, h in olds.items():
            signal.signal(s, h)
    err = capsys.readouterr().err
    rec = load_run(out / "m")
    assert got == code == rec.exit_code
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    word = "PASSED" if passed else "FAILED"
    last = err.strip().splitlines()[-1]
    assert "SIGTERM" in last and f"{word} kept (exit {code})" in last, last
    assert f": {word}" in (out / "m" / "summary.md").read_text()
    suites = (out / "m" / "junit.xml").read_text().split("<testsuites ", 1)[1].split(">", 1)[0]
    assert f'failures="{0 if passed else 1}" errors="0"' in suites, suites


def test_shards_of_an_ab_list_with_different_candidates_merge_as_the_unsharded_list_runs(tmp_path):
    """Two A/B configs of one list naming different candidate builds (config c1 on 0.0.2,
    c2 on 0.0.3): each shard ran its config's own builds, as the unsharded list would, so
    they merge; a variant on the run's engine on two versions is still refused."""
    recs = []
    for i, candidate in ((1, "0.0.2"), (2, "0.0.3")):
        d = _shard_with_task(tmp_path / f"s{i}", i, engine="0.0.1")
        rec = load_run(d)
        ref = rec.configs[0].variants.pop("reference")
        for name, version, spec in (("reference.baseline", "0.0.1", "b1"),
                                    ("reference.candidate", candidate, f"b{i + 1}")):
            v = ref.model_copy(deep=True)
            v.build_spec, v.build = spec, EngineBuild(python=spec, package="vllm", version=version)
            rec.configs[0].variants[name] = v
        recs.append(rec)
    merged = merge_records(recs, "m")
    assert merged.merge_warnings == [] and [c.name for c in merged.configs] == ["c1", "c2"]
    # the same two shards, but c2's candidate on the run's engine (no build of its own): refused
    recs[1].configs[0].variants["reference.candidate"].build_spec = None
    recs[0].configs[0].variants["reference.candidate"].build_spec = None
    with pytest.raises(MergeError, match="different engine version"):
        merge_records(recs, "m")
