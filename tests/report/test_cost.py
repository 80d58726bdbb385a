"""The cost of a list before it runs: record durations and devices, estimates from earlier
records, the dry run's schedule and cost, shards by cost, GPU-seconds in history.
Expected values are worked out by hand in each test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.records.run_record import VariantResult, write_run
from harness.report import cost as C
from harness.report.history import cost_frame, history_frame, load_records
from harness.run.merge import shard_info

from ..orchestration.test_runner_fake_server import config, run
from ..record_factory import typed

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

YAML = ("model_name: org/{name}\naccuracy_threshold: 0.5\nnum_questions: {q}\n"
        "server_args: --tensor-parallel-size {tp} --speculative-config "
        "'{{\"method\":\"mtp\",\"num_speculative_tokens\":2}}'\n")


def _config(tmp: Path, name: str = "m", q: int = 100, tp: int = 4) -> Path:
    p = tmp / f"{name}.yaml"
    p.write_text(YAML.format(name=name, q=q, tp=tp))
    return p


def _plan(*paths: Path):
    return build_plan([load_config(p) for p in paths])


def _variant(startup: float, evaluation: float | None, teardown: float | None, devices: list[str] | None,
             asked: int = 100, task_seconds: float = 0.0) -> dict:
    v: dict = {"startup_seconds": startup, "tasks": {"gsm8k": {"status": "ran", "num_requests": asked,
                                                                 "seconds": task_seconds}}}
    if evaluation is not None:
        v["evaluation_seconds"] = evaluation
    if teardown is not None:
        v["teardown_seconds"] = teardown
    if devices is not None:
        v["devices"] = devices
    return v


def _record(run_id: str, day: int, name: str, sha: str, variants: dict) -> object:
    return typed({"run_id": run_id, "status": "completed", "passed": True, "exit_code": 0,
                  "provenance": {"started_at": f"2026-11-{day:02d}T02:00:00+00:00"},
                  "configs": [{"name": name, "sha256": sha, "variants": variants}]})


def test_old_records_without_cost_fields_load_and_gpu_seconds_is_derived():
    old = VariantResult.model_validate({"argv": ["vllm"], "startup_seconds": 12.0})
    assert (old.evaluation_seconds, old.teardown_seconds, old.devices, old.gpu_seconds) == (None, None, None, None)
    new = VariantResult.model_validate({"argv": [], "startup_seconds": 30.0, "evaluation_seconds": 60.0,
                                        "teardown_seconds": 2.0, "devices": ["0", "1", "2", "3"]})
    assert new.gpu_seconds == pytest.approx((30 + 60 + 2) * 4)          # 368
    cpu = VariantResult.model_validate({"argv": [], "startup_seconds": 30.0, "evaluation_seconds": 60.0,
                                        "devices": []})
    assert cpu.gpu_seconds == 0.0
    # a whole record written with the fields reads back with them
    rec = _record("r", 1, "m", "0" * 64, {"reference": _variant(30.0, 60.0, 2.0, ["4", "5"])})
    again = type(rec).model_validate_json(rec.model_dump_json())
    assert again.configs[0].variants["reference"].gpu_seconds == pytest.approx(184.0)


def test_estimate_prefers_same_config_then_same_name_then_defaults(tmp_path):
    plan = _plan(_config(tmp_path, q=200))
    sha = plan.configs[0].config.sha256
    recs = [
        # same name, other sha: used only when no record of the same sha exists
        _record("a", 1, "m", "f" * 64, {"reference": _variant(500.0, 500.0, 50.0, ["0"])}),
        # same sha, 100 of the 200 planned questions asked: evaluation doubles
        _record("b", 2, "m", sha, {"reference": _variant(20.0, 40.0, 4.0, ["0"]),
                                    "spec_sync": _variant(10.0, None, None, None, task_seconds=15.0)}),
        _record("c", 3, "m", sha, {"reference": _variant(30.0, 50.0, 6.0, ["0"])}),
        _record("d", 4, "m", sha, {"reference": _variant(40.0, 60.0, 8.0, ["0"])}),
    ]
    est = {v.variant: v for v in C.estimate_plan(plan, recs, gpus=True)}
    ref = est["reference"]
    assert (ref.source, ref.runs, ref.need) == (C.SOURCE_SAME_CONFIG, 3, 4)
    assert ref.startup == pytest.approx(30.0)                       # median of 20, 30, 40
    assert ref.evaluation == pytest.approx(100.0)                   # median of 40, 50, 60, x 200/100
    assert ref.teardown == pytest.approx(6.0)
    assert ref.seconds == pytest.approx(136.0)
    # an older record without evaluation_seconds: its tasks' seconds, teardown by default
    sync = est["spec_sync"]
    assert (sync.source, sync.startup, sync.evaluation, sync.teardown) == (
        C.SOURCE_SAME_CONFIG, 10.0, pytest.approx(30.0), C.DEFAULT_TEARDOWN_SECONDS)
    # no record of spec_async at all: defaults (200 questions x the per-question guess)
    asy = est["spec_async"]
    assert asy.source == C.SOURCE_DEFAULTS and asy.runs == 0
    assert asy.evaluation == pytest.approx(200 * C.DEFAULT_SECONDS_PER_QUESTION)
    assert asy.startup == C.DEFAULT_STARTUP_SECONDS
    # only the other sha: same name
    only_old = {v.variant: v for v in C.estimate_plan(plan, recs[:1], gpus=False)}
    assert only_old["reference"].source == C.SOURCE_SAME_NAME
    assert only_old["reference"].seconds == pytest.approx(500 + 1000 + 50)
    assert only_old["reference"].need == 0                           # CPU host


def test_plan_cost_schedule_and_totals(tmp_path):
    plan = _plan(_config(tmp_path, "a", q=100, tp=4), _config(tmp_path, "b", q=300, tp=2))
    env = {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
    pc = C.plan_cost(plan, tmp_path / "no-such-folder", env=env)
    per = C.DEFAULT_STARTUP_SECONDS + C.DEFAULT_TEARDOWN_SECONDS
    sa = per + 100 * C.DEFAULT_SECONDS_PER_QUESTION
    sb = per + 300 * C.DEFAULT_SECONDS_PER_QUESTION
    assert len(pc.slots) == 6 and pc.devices == tuple("01234567") and pc.scheduler == "packed"
    # longest first: b's three (2 devices each) at 0 on 0-1, 2-3, 4-5; a (4 devices) does not fit
    # in 6-7, so two of a at sb on 0-3 and 4-7, the third after them
    at = {(s.config, s.variant): (s.start, s.devices) for s in pc.slots}
    assert at[("b", "reference")] == (0.0, ("0", "1")) and at[("b", "spec_async")] == (0.0, ("4", "5"))
    assert at[("a", "reference")] == (pytest.approx(sb), tuple("0123"))
    assert at[("a", "spec_sync")] == (pytest.approx(sb), tuple("4567"))
    assert at[("a", "spec_async")][0] == pytest.approx(sb + sa)
    assert pc.wall_seconds == pytest.approx(sb + 2 * sa)
    assert pc.gpu_seconds == pytest.approx(3 * sb * 2 + 3 * sa * 4)
    tot = pc.config_totals()
    assert tot["b"]["gpu_seconds"] == pytest.approx(3 * sb * 2) and tot["b"]["wall_seconds"] == pytest.approx(sb)
    assert tot["a"]["wall_seconds"] == pytest.approx(2 * sa)
    with pytest.raises(ValueError, match="a/reference"):           # 4 devices needed, 2 given
        C.plan_cost(plan, None, env={"CUDA_VISIBLE_DEVICES": "0,1"})
    cpu = C.plan_cost(plan, None, env={})
    assert cpu.gpu_seconds == 0.0 and cpu.wall_seconds == pytest.approx(3 * sa + 3 * sb)   # one at a time
    assert [s.config for s in cpu.slots] == ["a"] * 3 + ["b"] * 3                        # in plan order


def test_dry_run_shows_schedule_and_cost(tmp_path, monkeypatch, capsys):
    cfg = _config(tmp_path, "m", q=100, tp=4)
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
    assert main(["--config", str(cfg), "--dry-run", "--results-dir", str(results)]) == 0
    out = capsys.readouterr().out
    assert "Schedule and cost (8 device(s) (0,1,2,3,4,5,6,7)" in out
    assert "m/reference on devices 0,1,2,3 until" in out and "m/spec_sync on devices 4,5,6,7" in out
    assert "no earlier runs of this config: estimate from defaults" in out
    each = C.DEFAULT_STARTUP_SECONDS + 100 * C.DEFAULT_SECONDS_PER_QUESTION + C.DEFAULT_TEARDOWN_SECONDS
    # two side by side on 0-3 and 4-7, the third after them; each holds 4 devices
    assert f"list: wall {2 * each:,.0f} s, GPU-seconds {4 * 3 * each:,.0f}" in out
    assert main(["--config", str(cfg), "--dry-run", "--json", "--results-dir", str(results)]) == 0
    entry = json.loads(capsys.readouterr().out)[0]
    assert entry["cost"]["from_defaults"] is True
    assert [s["variant"] for s in entry["cost"]["schedule"]] == ["reference", "spec_sync", "spec_async"]
    assert [s["devices"] for s in entry["cost"]["schedule"]] == [list("0123"), list("4567"), list("0123")]
    assert entry["cost"]["gpu_seconds"] == pytest.approx(4 * 3 * each)
    assert entry["cost"]["list"]["devices"] == [str(i) for i in range(8)]
    # with an earlier run of the same config, its reference is estimated from it
    sha = build_plan([load_config(cfg)]).configs[0].config.sha256
    write_run(results / "old", _record("old", 1, "m", sha, {"reference": _variant(7.0, 3.0, 1.0, ["0"])}))
    assert main(["--config", str(cfg), "--dry-run", "--results-dir", str(results)]) == 0
    out = capsys.readouterr().out
    assert "reference: start-up 7.0 s + evaluation 3.0 s + teardown 1.0 s, needs 4 device(s); " \
           "from history (same config), median of 1 run(s)" in out
    assert "no earlier runs of this config" not in out


def test_shards_balance_by_estimated_gpu_seconds(tmp_path):
    paths = [_config(tmp_path, n, q=100, tp=1) for n in ("a", "b", "c")]
    plan = _plan(*paths)
    shas = {cp.name: cp.config.sha256 for cp in plan.configs}
    results = tmp_path / "results"
    # a is long (1000 s a variant), b and c short (10 s): a alone in one shard, b and c in the other.
    # By variants x questions all three weigh the same and a would share its shard.
    for name, secs in (("a", 1000.0), ("b", 10.0), ("c", 10.0)):
        variants = {v: _variant(secs / 2, secs / 2, 0.0, []) for v in ("reference", "spec_sync", "spec_async")}
        write_run(results / f"r{name}", _record(f"r{name}", 1, name, shas[name], variants))
    names1, info = shard_info(plan.configs, 1, 2, results)
    names2, _ = shard_info(plan.configs, 2, 2, results)
    assert info.weights == {"a": 3000, "b": 30, "c": 30}
    assert (names1, names2) == (["a"], ["b", "c"])
    # without a results folder: variants x questions, as before
    _, old = shard_info(plan.configs, 1, 2)
    assert old.weights == {"a": 300, "b": 300, "c": 300}


def test_history_gpu_seconds_column_and_metric(tmp_path, capsys):
    results = tmp_path / "results"
    for i, dev in ((1, ["0", "1"]), (2, ["0", "1", "2", "3"])):
        write_run(results / f"n{i}", _record(f"n{i}", i, "m", "0" * 64, {
            "reference": _variant(10.0, 20.0, 2.0, dev), "spec": _variant(5.0, 5.0, None, dev)}))
    write_run(results / "n0", _record("n0", 3, "m", "0" * 64, {"reference": _variant(1.0, None, None, None)}))

    recs, problems = load_records(results)
    assert not problems
    df = history_frame(recs)
    ref = df[(df.run_id == "n2") & (df.variant == "reference")]
    assert float(ref["gpu_seconds"].iloc[0]) == pytest.approx((10 + 20 + 2) * 4)
    cf = cost_frame(recs)
    assert list(cf.run_id) == ["n1", "n2", "n0"]
    assert list(cf.gpu_seconds[:2]) == pytest.approx([(32 + 10) * 2, (32 + 10) * 4])     # 84, 168
    assert cf.gpu_seconds.isna().iloc[2]                                                 # an old record: unknown
    assert main(["history", str(results), "--metric", "gpu_seconds", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["gpu_seconds"]
    assert [r["gpu_seconds"] for r in got] == [84.0, 168.0, None]
    assert main(["history", str(results), "--metric", "gpu_seconds"]) == 0
    assert "## GPU-seconds per config" in capsys.readouterr().out


def test_a_fake_run_records_durations_and_devices(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cfg = config(tmp_path, {"FAKE_MODE": "ok", "CUDA_VISIBLE_DEVICES": "2,3"}, {"FAKE_MODE": "ok"})
    code, rec, run_dir = run(tmp_path, cfg)
    assert code == 0
    ref, spec = (rec["configs"][0]["variants"][k] for k in ("reference", "spec"))
    assert ref["devices"] == ["2", "3"] and spec["devices"] == []     # the variant's env; none on this host
    for v in (ref, spec):
        task = v["tasks"]["gsm8k"]["seconds"]
        assert v["evaluation_seconds"] >= task > 0                   # first request .. last snapshot
        assert v["teardown_seconds"] >= 0
    again = typed(json.loads((run_dir / "run.json").read_text())).configs[0].variants["reference"]
    assert again.gpu_seconds == pytest.approx(
        (ref["startup_seconds"] + ref["evaluation_seconds"] + ref["teardown_seconds"]) * 2)
