"""The numerics noise in the run record (harness/records/numerics_noise.py): absent from
``run.json`` when off, the level, spec and every server start's seed when on, and the
one line of summary.md that says so (docs/numerics.md)."""

from __future__ import annotations

import hashlib
import json

import pytest

from harness.faults.noise import GPU_LEVEL_NATS, NOISE_ENV, NOISE_SEED_ENV, NoiseSettingError, noise_key
from harness.records.numerics_noise import NumericsNoiseRecord, joined_noise, noise_record, server_seed
from harness.records.run_record import RunRecord, record_json
from harness.report.diff_sides import _side_from_run
from harness.report.history import history_frame
from harness.report.summary import render_markdown
from tests.record_factory import typed


def test_off_leaves_no_trace_in_run_json():
    rec = typed({})
    assert rec.numerics_noise is None
    assert "numerics_noise" not in json.loads(record_json(rec))
    assert "numerics noise" not in render_markdown(rec)


def test_on_is_recorded_round_trips_and_is_shown():
    rec = typed({})
    rec.numerics_noise = NumericsNoiseRecord(spec="gpu", level_nats=GPU_LEVEL_NATS, seeds={"c/reference": 5})
    doc = json.loads(record_json(rec))
    assert doc["numerics_noise"] == {"spec": "gpu", "level_nats": GPU_LEVEL_NATS, "base_seed": None,
                                     "seeds": {"c/reference": 5}}
    again = RunRecord.model_validate_json(record_json(rec))
    assert again.numerics_noise == rec.numerics_noise
    line = next(x for x in render_markdown(rec).splitlines() if "numerics noise" in x)
    assert f"gpu ({GPU_LEVEL_NATS:g} nats" in line and "c/reference=5" in line


def test_noise_record_reads_the_environment():
    assert noise_record({}) is None
    assert noise_record({NOISE_ENV: "0"}) is None
    r = noise_record({NOISE_ENV: " GPU "})
    assert r is not None and r.level_nats == GPU_LEVEL_NATS and r.base_seed is None and r.seeds == {}
    assert noise_record({NOISE_ENV: "0.3", NOISE_SEED_ENV: "17"}).base_seed == 17
    for bad in ({NOISE_ENV: "loud"}, {NOISE_ENV: "-1"}, {NOISE_ENV: "nan"}, {NOISE_ENV: "gpu", NOISE_SEED_ENV: "x"}):
        with pytest.raises(NoiseSettingError, match="EVALRUN_NUMERICS_NOISE"):
            noise_record(bad)


def test_server_seeds_are_drawn_per_start_or_derived_from_a_base_seed():
    drawn = NumericsNoiseRecord(spec="gpu", level_nats=0.5)
    a, b = server_seed(drawn, "c/reference"), server_seed(drawn, "c/reference (rerun)")
    assert a != b and drawn.seeds == {"c/reference": a, "c/reference (rerun)": b}
    based = NumericsNoiseRecord(spec="gpu", level_nats=0.5, base_seed=3)
    name_key = int.from_bytes(hashlib.blake2b(b"c/spec_sync", digest_size=8).digest(), "big") >> 1
    assert server_seed(based, "c/spec_sync") == noise_key(3, 0, 0, 0) ^ name_key
    assert server_seed(based, "c/reference") != based.seeds["c/spec_sync"]


def test_diff_and_history_mark_a_noisy_run_and_only_it(tmp_path):
    clean = typed({"run_id": "clean", "configs": [{"variants": {"reference": {"tasks": {"t": {}}}}}]})
    noisy = typed({"run_id": "noisy", "configs": [{"variants": {"reference": {"tasks": {"t": {}}}}}]})
    noisy.numerics_noise = NumericsNoiseRecord(spec="gpu", level_nats=1.5)
    assert _side_from_run(typed({"run_id": "clean"}), tmp_path).id == "clean"
    noisy_bare = typed({"run_id": "noisy"})
    noisy_bare.numerics_noise = noisy.numerics_noise
    assert _side_from_run(noisy_bare, tmp_path).id == "noisy [numerics noise gpu, 1.5 nats]"
    outcomes = dict(zip(*history_frame([clean, noisy])[["run_id", "outcome"]].T.values))
    assert "numerics noise" not in outcomes["clean"]
    assert outcomes["noisy"].endswith("[numerics noise 1.5 nats]")


def test_merged_shards_keep_the_noise_with_every_seed():
    a = NumericsNoiseRecord(spec="gpu", level_nats=1.5, seeds={"c1/reference": 1})
    b = NumericsNoiseRecord(spec="gpu", level_nats=1.5, seeds={"c2/reference": 2})
    assert joined_noise([None, None]) is None
    got = joined_noise([a, None, b])
    assert got is not None and got.spec == "gpu" and got.seeds == {"c1/reference": 1, "c2/reference": 2}
    assert a.seeds == {"c1/reference": 1}  # the shards' records are not changed
