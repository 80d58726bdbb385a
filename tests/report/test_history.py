"""`evalrun history`: the DataFrame from run records and the drift test (values by hand)."""

from __future__ import annotations

import math

import numpy as np  # noqa: TID253 - the test's own reference; a cost of this file's collection only
import pandas as pd
import pytest

from harness.cli import main
from harness.records.measures import EngineFactsRecord
from harness.records.run_record import write_run
from harness.report.history import drift_table, history_frame, load_records, mann_kendall_decreasing

from ..record_factory import typed

NIGHTS = 10
REF = [0.95 - 0.006 * i for i in range(NIGHTS)]          # 0.950 ... 0.896: every night above 0.9 - 0.08
MAL = [3.0, 2.98, 3.01, 2.99, 3.0, 3.02, 2.98, 3.01, 2.99, 3.0]   # no trend


def night(i: int) -> dict:
    task = lambda acc, mal, length: {  # noqa: E731
        "status": "ran", "num_requests": 100, "error_count": 2, "error_rate": 0.02,
        "accuracy": {"flexible-numeric": acc, "strict-numeric": acc - 0.01},
        "accuracy_ci": {"flexible-numeric": [acc - 0.05, acc + 0.03]},
        "finish_reasons": {"stop": 98 - length, "length": length},
        "spec_decode": {"mean_acceptance_length": mal, "acceptance_rate": (mal - 1) / 2,
                        "per_position_acceptance": [0.9, 0.8]} if mal else None}
    return typed({
        "run_id": f"night{i:02d}", "status": "completed", "passed": True, "exit_code": 0,
        "provenance": {"started_at": f"2026-11-{i + 1:02d}T02:00:00+00:00", "git_revision": f"rev{i}",
                       "vllm_version": "vllm 0.33.0", "evalrun_version": "0.1.0"},
        "configs": [{
            "name": "cfg", "pipeline": "flexible-numeric",
            "variants": {"reference": {"tasks": {"gsm8k": task(REF[i], None, 7)}},
                         "spec": {"tasks": {"gsm8k": task(0.94, MAL[i], 0)}}},
            "comparisons": [{"baseline": "reference", "candidate": "spec", "task": "gsm8k", "output_match_rate": 0.97}],
            "gates": [{"id": "cfg/spec/gsm8k/accuracy_floor", "kind": "accuracy_floor", "variant": "spec",
                       "task": "gsm8k", "passed": True, "detail": "flexible-numeric accuracy"},
                      {"id": "cfg/reference/gsm8k/accuracy_floor", "kind": "accuracy_floor", "variant": "reference",
                       "task": "gsm8k", "passed": i != 3, "detail": "flexible-numeric accuracy"}]}],
    })


@pytest.fixture()
def results(tmp_path):
    for i in range(NIGHTS):
        write_run(tmp_path / f"night{i:02d}", night(i))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.json").write_text("{not json")
    return tmp_path


def test_frame_rows_and_columns(results):
    recs, problems = load_records(results)
    assert len(recs) == NIGHTS and len(problems) == 1 and "broken" in problems[0]
    df = history_frame(recs)
    assert len(df) == 2 * NIGHTS
    ref = df[df.variant == "reference"]
    assert list(ref.accuracy) == pytest.approx(REF)
    assert list(ref["accuracy[strict-numeric]"]) == pytest.approx([x - 0.01 for x in REF])
    assert ref.accuracy_lo.iloc[0] == pytest.approx(0.90)
    assert ref["accuracy[flexible-numeric]_hi"].iloc[0] == pytest.approx(0.98)
    assert ref.truncation_rate.iloc[0] == pytest.approx(7 / 98)          # length among the 98 that succeeded
    assert list(ref.verdict) == ["PASS"] * 3 + ["FAIL"] + ["PASS"] * 6
    spec = df[df.variant == "spec"]
    assert list(spec.mean_acceptance_length) == pytest.approx(MAL)
    assert spec.output_match.iloc[0] == 0.97 and spec.per_position.iloc[0] == (0.9, 0.8)
    assert list(df.git_revision.unique()) == [f"rev{i}" for i in range(NIGHTS)]


def test_drift_flags_slow_decline_not_noise(results):
    df = history_frame(load_records(results)[0])
    d = drift_table(df).set_index(["variant", "metric"])
    acc = d.loc[("reference", "accuracy")]
    # strictly decreasing: tau = -1 and the exact one-sided p is 1/n! (one ordering of n)
    assert acc.tau == pytest.approx(-1.0) and acc.p_value == pytest.approx(1 / math.factorial(NIGHTS), rel=1e-6)
    assert bool(acc.drift) is True
    assert bool(d.loc[("spec", "mean_acceptance_length")].drift) is False
    assert bool(d.loc[("spec", "accuracy")].drift) is False              # constant: no trend


def test_false_alarm_rate_is_at_most_alpha():
    """Stated false-alarm rate: iid nights flagged at most alpha of the time (+3 binomial sd)."""
    rng = np.random.default_rng(0)
    trials, alpha = 3000, 0.05
    hits = sum(mann_kendall_decreasing(list(rng.normal(0.9, 0.02, 8)))[1] < alpha for _ in range(trials))
    assert hits / trials <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / trials)
    assert hits / trials >= 0.02                      # and the test is not trivially silent


def test_cli_last_csv_parquet_and_exit_code(results, tmp_path, capsys):
    code = main(["history", str(results), "--config", "cfg", "--last", "5",
                 "--csv", str(tmp_path / "h.csv"), "--parquet", str(tmp_path / "h.parquet")])
    out = capsys.readouterr().out
    assert "## History" in out and "Mann-Kendall" in out
    csv = pd.read_csv(tmp_path / "h.csv")
    assert sorted(csv.run_id.unique()) == [f"night{i:02d}" for i in range(5, 10)]
    pq = pd.read_parquet(tmp_path / "h.parquet")
    assert len(pq) == 10 and list(pq[pq.variant == "spec"].per_position.iloc[0]) == [0.9, 0.8]
    assert code == 2                                   # the broken record: listed, and the history refused
    assert "## Unreadable run records (1)" in out and "broken" in out
    code = main(["history", str(results), "--config", "cfg", "--last", "5", "--skip-unreadable"])
    out = capsys.readouterr().out
    assert "broken" in out
    assert code == 1                                   # last 5 nights of reference still decrease strictly
    assert main(["history", str(tmp_path / "nope")]) == 2


def test_history_vllm_version_is_the_engines_and_outcome_is_the_runs(tmp_path):
    # provenance says evalrun's interpreter had vllm 0.33.0; the engine said 0.34.1 on /version
    rec = night(0)
    rec.configs[0].variants["spec"].engine = EngineFactsRecord(vllm_version="0.34.1")
    rec.passed, rec.exit_code = None, 0           # an optional task did not run: incomplete
    write_run(tmp_path / "n0", rec)
    df = history_frame(load_records(tmp_path)[0])
    got = {v: (None if pd.isna(x) else x) for v, x in zip(df.variant, df.vllm_version)}
    assert got == {"reference": None, "spec": "0.34.1"}
    assert set(df.outcome) == {"INCOMPLETE"}

