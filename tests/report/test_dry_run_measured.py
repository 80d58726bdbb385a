"""harness.report.dry_run_measured and the dry run's use of it (``--dry-run --calibration``):
measured discordance, divergence and acceptance spread read from a real ``calibration.json``
(``tests/data/calibration/clean-gpu-8-repeats.json``: trimmed from the 8 real-engine repeats
of ``/work/noise-repeats/clean-gpu/calibration.json``, its ``_source`` key names the command),
the detectable drop recomputed here from Connor 1987 with scipy, each figure's source label,
and the output without a calibration unchanged. Unit tier: no subprocess."""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
from pathlib import Path

import pytest

from harness.analysis.familywise import family_false_fail
from harness.cli import app, bisect
from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.report.dry_run import detectable_drops, family_false_fail_of, plan_json, render_plan
from harness.report.dry_run_measured import CalibrationFileError, find_calibration, read_measured

REPO = Path(__file__).resolve().parents[2]
CAL = REPO / "tests" / "data" / "calibration" / "clean-gpu-8-repeats.json"
CPU = REPO / "configs" / "tiny-qwen3next-mtp-cpu.yaml"
SAMPLED = REPO / "configs" / "tiny-qwen3next-mtp-cpu-sampled.yaml"


def _raw() -> dict:
    return json.loads(CAL.read_text(encoding="utf-8"))


def _comparison(config: str, baseline: str, candidate: str, task: str) -> dict:
    c = next(c for c in _raw()["configs"] if c["name"] == config)
    want = (baseline, candidate, task)
    return next(x for x in c["comparisons"] if (x["baseline"], x["candidate"], x["task"]) == want)


def connor_drop(n: int, psi: float, alpha: float, power: float) -> float:
    """Connor 1987 (Biometrics 43:207-211) inverted here with scipy: the drop delta in (0, psi]
    with ``delta sqrt(n) = z_{1-alpha} sqrt(psi) + z_power sqrt(psi - delta^2)``; inf if none."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    za, zb = norm.ppf(1 - alpha), norm.ppf(power)

    def f(d: float) -> float:
        return d * math.sqrt(n) - za * math.sqrt(psi) - zb * math.sqrt(max(psi - d * d, 0.0))

    if f(psi) < 0:
        return math.inf
    return float(brentq(f, 1e-12, psi, xtol=1e-12))


def test_read_measured_takes_the_means_over_the_repeats() -> None:
    m = read_measured(CAL)
    assert m.repeats == 8 == len(_raw()["runs"])
    x = _comparison("tiny-qwen3next-mtp-cpu", "reference", "spec_sync", "arith")
    d = m.discordance[("tiny-qwen3next-mtp-cpu", "reference", "spec_sync", "arith")]
    assert d.value == pytest.approx(statistics.fmean(x["discordance"]["values"])) == pytest.approx(0.08)
    assert d.repeats == 8 and d.source == f"measured: calibrate {CAL}, 8 repeats"
    # calibrate's own recommendation (rounded to 4 places) is the same figure
    rec = next(r for r in next(c for c in _raw()["configs"] if c["name"] == "tiny-qwen3next-mtp-cpu")
               ["recommended"]["comparisons"] if (r["baseline"], r["candidate"], r["task"]) ==
               ("reference", "spec_sync", "arith"))
    assert round(d.value, 4) == rec["expected_discordance"]
    div = m.divergence[("tiny-qwen3next-mtp-cpu", "reference", "spec_sync", "arith")]
    assert div.value == pytest.approx(1 - statistics.fmean(x["output_match_rate"]["values"]))
    t = next(t for t in _raw()["configs"][0]["tasks"] if (t["variant"], t["task"]) == ("spec_async", "gsm8k"))
    acc = m.acceptance_sd[("tiny-qwen3next-mtp-cpu", "spec_async", "gsm8k")]
    assert acc.value == pytest.approx(statistics.stdev(t["mean_acceptance_length"]["values"]))
    assert ("tiny-qwen3next-mtp-cpu", "reference", "arith") not in m.acceptance_sd  # no speculation, no figure
    assert m.acceptance_run_sd is None  # no --simulate-nights in this calibration


def test_a_zero_discordance_is_floored_at_one_question_as_calibrate_recommends() -> None:
    d = read_measured(CAL).discordance[("tiny-qwen3next-mtp-cpu", "reference", "spec_sync", "gsm8k")]
    assert statistics.fmean(_comparison("tiny-qwen3next-mtp-cpu", "reference", "spec_sync", "gsm8k")
                            ["discordance"]["values"]) == 0.0
    assert d.value == 1 / 20 and d.source.endswith("8 repeats; mean 0 floored at 1/n = 1/20")
    rec = next(r for r in _raw()["configs"][0]["recommended"]["comparisons"]
               if (r["baseline"], r["candidate"], r["task"]) == ("reference", "spec_sync", "gsm8k"))
    assert rec["expected_discordance"] == d.value  # calibrate's own rule gives the same figure


def test_detectable_drop_uses_the_measured_discordance() -> None:
    config = load_config(CPU)
    m = read_measured(CAL)
    arith = next(d for d in detectable_drops(config, measured=m) if d["task"] == "arith")
    for q in arith["paired"]:
        x = _comparison(config.name, q["baseline"], q["candidate"], "arith")
        psi = statistics.fmean(x["discordance"]["values"])
        assert q["discordance"] == pytest.approx(psi)
        assert q["test_drop"] == pytest.approx(connor_drop(arith["n"], psi, q["alpha"], arith["power"]), abs=1e-6)
        assert q["discordance_source"] == f"measured: calibrate {CAL}, 8 repeats"
    # reference -> spec_sync: with 8 of 100 questions discordant a drop of 0.070 is detectable; with the
    # assumed 0.05 none is (not even a drop of 0.05: the one-sided McNemar test needs more discordant pairs)
    q0 = arith["paired"][0]
    assert (q0["baseline"], q0["candidate"]) == ("reference", "spec_sync")
    assert round(q0["test_drop"], 3) == round(connor_drop(100, 0.08, 0.05, 0.8), 3) == 0.070
    assert connor_drop(100, 0.05, 0.05, 0.8) == math.inf
    assumed = next(d for d in detectable_drops(config) if d["task"] == "arith")["paired"][0]
    assert assumed["test_drop"] is None and assumed["expected_discordance"] == 0.05


def test_figures_the_calibration_did_not_measure_say_they_are_assumed(tmp_path: Path) -> None:
    config = load_config(SAMPLED)
    other = _raw()
    other["configs"] = [c for c in other["configs"] if c["name"] != config.name]
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(other), encoding="utf-8")
    m = read_measured(path)
    with_m, without = detectable_drops(config, measured=m), detectable_drops(config)
    for a, b in zip(with_m, without):
        for q, r in zip(a["paired"], b["paired"]):
            assert q["test_drop"] == r["test_drop"] and q["discordance"] == r["expected_discordance"] == 0.05
            assert q["discordance_source"] == "assumed: expected_discordance 0.05, the default"
        for s in a["sampled"]:
            assert s["logprob_sd_source"] == "assumed: expected_logprob_sd 0.1, the default"
    text = render_plan(build_plan([config]), measured=m)
    assert "(assumed: expected_discordance 0.05, the default; Connor 1987)" in text
    assert "acceptance run spread (logit sd, what gates.acceptance_run_sd stands for): 0.15 (assumed: " \
           "acceptance_run_sd 0.15, the default)" in text


def test_without_a_calibration_nothing_changes() -> None:
    config = load_config(CPU)
    plan = build_plan([config])
    for d in detectable_drops(config):
        assert all("discordance_source" not in q and "discordance" not in q for q in d["paired"])
    assert "discordance_sources" not in family_false_fail_of(config)
    entry = plan_json(plan)[0]
    assert "measured_figures" not in entry and "discordance_sources" not in entry["family_false_fail"]
    text = render_plan(plan)
    assert "measured" not in text.replace("threshold measured on", "") and "assumed:" not in text


def test_the_family_wise_figure_uses_the_measured_discordance_per_gate() -> None:
    config = load_config(CPU).model_copy(update={"false_alarm_budget": None})
    m = read_measured(CAL)
    f = family_false_fail_of(config, m)
    drops = []
    for comp in config.comparisons:
        for t in comp.tasks or config.tasks:
            psi = statistics.fmean(_comparison(config.name, comp.baseline, comp.candidate, t)["discordance"]["values"])
            drops.append((config.tasks[t].num_questions, max(psi, 1 / 100), comp.max_accuracy_drop, comp.alpha))
    assert f["accuracy_drop_false_fail"] == pytest.approx(family_false_fail(drops, holm=False))
    assert [s["source"] for s in f["discordance_sources"]] == [f"measured: calibrate {CAL}, 8 repeats"] * len(drops)
    text = "\n".join(render_plan(build_plan([config]), measured=m).splitlines())
    assert f"{len(drops)} of {len(drops)} gate(s) measured by calibrate {CAL}, the rest expected_discordance" in text


def test_the_plan_names_the_calibration_and_skips_divergence_of_sampling_tasks() -> None:
    m = read_measured(CAL)
    cpu, sampled = load_config(CPU), load_config(SAMPLED)
    entries = plan_json(build_plan([cpu, sampled]), measured=m)
    j = entries[0]["measured_figures"]
    assert j["calibration"] == str(CAL) and j["repeats"] == 8
    assert {(d["baseline"], d["candidate"], d["task"]) for d in j["divergence"]} == {
        (c.baseline, c.candidate, t) for c in cpu.comparisons for t in cpu.tasks}
    assert entries[1]["measured_figures"]["divergence"] == []  # its one task samples: no output match
    assert [a["variant"] for a in entries[1]["measured_figures"]["acceptance_length_sd"]] == ["spec_sync"]
    text = render_plan(build_plan([cpu]), measured=m)
    assert f"  measured figures: calibrate {CAL} (8 repeats)" in text
    assert (f"assuming discordance 0.08 (measured: calibrate {CAL}, 8 repeats; Connor 1987)") in text


def test_a_simulate_nights_run_spread_is_shown_beside_the_configs(tmp_path: Path) -> None:
    raw = _raw()
    raw["simulated_nights"] = {"model": {"runs": 8, "acceptance": {"sd_run": 0.0421, "source": "per-request counters",
                                                                   "mu": 1.0}}}
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    r = plan_json(build_plan([load_config(CPU)]), measured=read_measured(path))[0]["measured_figures"]
    assert r["acceptance_run_sd"] == {
        "value": 0.0421, "config": 0.15,
        "source": f"measured: calibrate {path}, 8 repeats (--simulate-nights model, per-request counters)"}


@pytest.mark.parametrize(("content", "says"), [
    ("not json", "not JSON"),
    ('{"runs": []}', "configs"),
    ('{"runs": [], "configs": [{"name": "x", "tasks": [], "comparisons": [{"baseline": "a"}]}]}',
     "configs.0.comparisons.0.candidate"),
    ('{"runs": [], "configs": [{"name": "x", "tasks": [], "comparisons": [{"baseline": "a", "candidate": "b", '
     '"task": "t", "discordance": {"n_runs": 1, "mean": 1.5}, "output_match_rate": {"n_runs": 1, "mean": 1}}]}]}',
     "discordance.mean"),
])
def test_a_malformed_calibration_is_refused_naming_file_and_key(tmp_path: Path, content: str, says: str) -> None:
    p = tmp_path / "calibration.json"
    p.write_text(content, encoding="utf-8")
    with pytest.raises(CalibrationFileError, match=says) as e:
        read_measured(p)
    assert str(p) in str(e.value)


def test_a_folder_or_missing_file_is_refused_by_the_one_reader(tmp_path: Path) -> None:
    for p in (tmp_path, tmp_path / "missing.json"):
        with pytest.raises(CalibrationFileError, match=str(p)):
            read_measured(p)


def test_find_calibration_takes_the_newest_one_level_down_and_none_on_a_tie(tmp_path: Path) -> None:
    assert find_calibration(tmp_path) is None
    assert find_calibration(tmp_path / "missing") is None
    (tmp_path / "deep" / "deeper").mkdir(parents=True)
    (tmp_path / "deep" / "deeper" / "calibration.json").write_text("{}")
    assert find_calibration(tmp_path) is None  # one level only
    old, new = tmp_path / "calibrate-a" / "calibration.json", tmp_path / "calibrate-b" / "calibration.json"
    for p, t in ((old, 1_000_000), (new, 2_000_000)):
        p.parent.mkdir()
        p.write_text("{}")
        os.utime(p, (t, t))
    assert find_calibration(tmp_path) == new
    os.utime(old, (2_000_000, 2_000_000))
    assert find_calibration(tmp_path) is None  # two equally newest: which one is meant is unclear


def _args(tmp_path: Path, calibration: Path | None) -> argparse.Namespace:
    return argparse.Namespace(calibration=calibration, results_dir=tmp_path)


def test_the_dry_run_finds_a_calibration_of_its_configs_and_ignores_others(tmp_path: Path) -> None:
    plan = build_plan([load_config(CPU)])
    assert app._measured(_args(tmp_path, None), plan) is None
    (tmp_path / "cal").mkdir()
    (tmp_path / "cal" / "calibration.json").write_bytes(CAL.read_bytes())
    m = app._measured(_args(tmp_path, None), plan)
    assert m is not None and m.path == tmp_path / "cal" / "calibration.json"
    other = _raw()
    other["configs"] = other["configs"][1:]
    (tmp_path / "cal" / "calibration.json").write_text(json.dumps(other))
    assert app._measured(_args(tmp_path, None), plan) is None  # of other configs: assumed figures
    assert app._measured(_args(tmp_path, tmp_path / "cal" / "calibration.json"), plan) is not None  # named: used
    (tmp_path / "cal" / "calibration.json").write_text("[")
    with pytest.raises(app._Refused, match="name another with --calibration"):
        app._measured(_args(tmp_path, None), plan)


def test_calibration_without_dry_run_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert app.main(["--config", str(CPU), "--calibration", str(CAL), "--results-dir", str(tmp_path)]) == 2
    assert "--calibration is only for --dry-run" in capsys.readouterr().err


def test_bisect_refuses_calibration_as_it_refuses_dry_run() -> None:
    with pytest.raises(bisect._Refused, match="--calibration"):
        bisect._parse(["--config", str(CPU), "--build", "a", "--build", "b", "--calibration", str(CAL)])
