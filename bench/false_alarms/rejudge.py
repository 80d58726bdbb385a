"""Real clean nights re-judged with THIS tree's gates (docs/false-alarms.md): the stored
repeats of an ``evalrun calibrate`` folder (real servers, real noise) are not run again and
not simulated; their samples, counters and scorer's scores are read back and judged by this
tree's comparisons and gates, one night per repeat. Made for before/after figures of a gate
change on the same real data.

Usage::

    python bench/false_alarms/rejudge.py CAL_DIR --list LIST_OR_YAML
    python bench/false_alarms/rejudge.py --selfcheck RUN_DIR [--list configs/selfcheck-cpu.yaml]

CAL_DIR is an ``evalrun calibrate`` folder (its ``run<i>/`` repeats); ``--list`` the list
those repeats ran, loaded by this tree (its configs, budget directive and gates). For each
repeat and config: the variants' records (scores, acceptance counters, effective
configuration) and samples come from the repeat; the comparisons (output match, paired
test, divergences judged by the reference's top log-probabilities) are recomputed by
:func:`harness.analysis.comparison.compare`, the sampled verdict by
:func:`harness.analysis.sampled.sampled_test` from the stored scorer's scores, and the planned
gates judged by :func:`harness.analysis.gates.evaluate_gates` (the config's expected failures
marked on the build that ran, as the runner marks them). The repeat's numerics noise
(``run.json`` ``numerics_noise``) is put in the environment while it is judged, as the run
had it.

What cannot be re-judged is said, not guessed: data a repeat did not collect (per-request
acceptance when its servers ran without ``--per-request-spec-decode-metrics``; the reference's
score of the baseline's prefix, which needs a server) leaves those gates NOT RUN or judged
without it, exactly as the runner would judge without that data. Prints, per config, per gate
kind and for the whole list, the realized false-fail rate before (as judged when the repeats
ran) and after (this tree), each with its exact interval.

With ``--selfcheck RUN_DIR`` (an ``evalrun selfcheck`` run folder, e.g. one run under the
numerics noise): the self-check's expectations (:func:`harness.cli.selfcheck.judge_selfcheck`)
checked against the gates as they ran and as this tree judges the same data: which faults
are still caught and which clean variants still pass.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.analysis.comparison import compare, rerun_needs
from harness.analysis.expected import mark_expected
from harness.analysis.false_alarms import false_alarm_rates
from harness.analysis.gatekinds.sampled_equivalence import SampledEquivalence
from harness.analysis.gates import evaluate_gates
from harness.analysis.measurements import ComparisonMeasurement, Measurements
from harness.analysis.sampled import sampled_test
from harness.cli.selfcheck import judge_selfcheck
from harness.config.gates import plan_gates
from harness.config.model_list import load_model_list
from harness.config.schema import ModelConfig
from harness.records.completions import TargetScore
from harness.records.run_folder import RunFolder
from harness.records.run_record import ConfigResult, GateResult, RunRecord, load_run
from harness.records.samples import Sample
from harness.run.config_steps import gate_builds

NOISE_ENV = "EVALRUN_NUMERICS_NOISE"


def _target_scores(path: Path) -> dict[str, TargetScore] | None:
    """The stored scorer's scores of one (variant, task), errors left out; None without a file."""
    if not path.is_file():
        return None
    out = {}
    for line in path.read_text().splitlines():
        d = json.loads(line)
        d.pop("mean_logprob", None)
        s = TargetScore(**d)
        if s.error is None:
            out[s.question_id] = s
    return out


def judge_config(config: ModelConfig, crec: ConfigResult, folder: RunFolder,
                 run: RunRecord) -> tuple[list[GateResult], list[str]]:
    """One stored config result judged by this tree: its gates' results and notes on what
    could not be recomputed."""
    rec = copy.deepcopy(crec)
    rec.comparisons = []  # recomputed below
    m = Measurements(record=rec)
    m.runners_collected = True
    reruns: dict[tuple[str, str], tuple[Sample, ...]] = {}
    notes: list[str] = []
    for vname, vrec in rec.variants.items():
        for tname, trec in vrec.tasks.items():
            if trec.samples:
                m.task_record(vname, tname).samples = tuple(folder.read(trec.samples))
            if trec.rerun is not None:
                reruns[(vname, tname)] = tuple(folder.read(trec.rerun.samples))
            ts = _target_scores(folder.samples(config.name, vname, tname, "target_logprobs"))
            if ts is not None:
                m.task_record(vname, tname).target_scores = ts
    comps = compare(config, m, reruns)
    _store(m, comps)
    asked = rerun_needs(config, m, reruns)
    if asked:
        notes.append(f"{config.name}: baseline reruns asked but not in the repeat: {asked}")
        _store(m, compare(config, m, reruns, asked))
    gates = plan_gates(config)
    for g in gates:
        if isinstance(g, SampledEquivalence) and g.task is not None and g.baseline is not None:
            a, b = m.task(g.baseline, g.task).target_scores, m.task(g.variant, g.task).target_scores
            if a is not None and b is not None:
                m.comparison_record(g.baseline, g.variant, g.task).sampled = sampled_test(a, b, g.scorer or "")
    # known engine bugs the config declares: XFAIL / XPASS on the build that ran, as the runner marks them
    return mark_expected(evaluate_gates(gates, m), config, lambda g: gate_builds(g, rec, run)), notes


def _store(m: Measurements, comps: Sequence) -> None:
    """Put :func:`compare`'s results into ``m`` as the runner's record holds them."""
    for c in comps:
        m.comparisons[(c.baseline, c.candidate, c.task)] = ComparisonMeasurement(
            match=c, answers=c.answer_agreement, noise=c.noise, divergences=c.divergence)


def _with_noise(rec: RunRecord) -> Mapping[str, str | None]:
    """Set the repeat's numerics noise in the environment; the previous value, to restore."""
    before = {NOISE_ENV: os.environ.get(NOISE_ENV)}
    if rec.numerics_noise is not None:
        os.environ[NOISE_ENV] = rec.numerics_noise.spec
    else:
        os.environ.pop(NOISE_ENV, None)
    return before


def _restore(before: Mapping[str, str | None]) -> None:
    for k, v in before.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _rows(title: str, before: Mapping, after: Mapping) -> list[str]:
    out = [f"### {title}", "", "| what | before: failed nights, rate [95% exact] | after (this tree) |",
           "|---|---|---|"]
    for what in list(before) + [w for w in after if w not in before]:
        cells = []
        for side in (before, after):
            r = side.get(what)
            cells.append("-" if r is None else
                         f"{r['failed']}/{r['nights']}, {r['rate']:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]")
        out.append(f"| {what} | {cells[0]} | {cells[1]} |")
    return out + [""]


def _levels(fa: Mapping) -> dict:
    rows = {f"config `{c}`": r for c, r in fa.get("configs", {}).items()}
    rows.update({f"kind `{k}`": r for k, r in fa.get("kinds", {}).items() if r["failed"]})
    if "list" in fa:
        rows["whole list"] = fa["list"]
    return rows


def selfcheck(run_dir: Path, list_path: str) -> int:
    """The self-check's expectations on ``run_dir`` before and after re-judging (module doc)."""
    rec = load_run(run_dir)
    cfg = load_model_list(list_path)[0]
    faults = {name: v.fault for name, v in cfg.variants.items()}
    shapes = frozenset(t for t, s in cfg.tasks.items() if s.kind == "shape")
    saved = _with_noise(rec)
    try:
        after = copy.deepcopy(rec)
        after.configs[0].gates, notes = judge_config(cfg, rec.configs[0], RunFolder(run_dir), rec)
    finally:
        _restore(saved)
    for title, r in (("before (as it ran)", rec), ("after (this tree)", after)):
        checks = judge_selfcheck(r, faults, shapes)
        bad = [c for c in checks if not c.held]
        print(f"## {title}: {len(checks) - len(bad)}/{len(checks)} expectations held\n")
        for c in bad:
            print(f"- {c.variant} ({c.fault or 'clean'}): {c.gate}: expected {c.expected}, got {c.actual}: "
                  f"{c.detail[:240]}")
        print()
    for n in notes:
        print(f"- note: {n}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cal_dir", type=Path, nargs="?")
    ap.add_argument("--list", default=None, help="the model list (or one config) the repeats ran")
    ap.add_argument("--failures", action="store_true", help="also print every failing gate after")
    ap.add_argument("--selfcheck", type=Path, default=None, help="a self-check run folder to re-judge")
    a = ap.parse_args()
    if a.selfcheck is not None:
        return selfcheck(a.selfcheck, a.list or "configs/selfcheck-cpu.yaml")
    if a.cal_dir is None or a.list is None:
        ap.error("CAL_DIR and --list are required (or --selfcheck RUN_DIR)")
    configs = {c.name: c for c in load_model_list(a.list)}
    runs = sorted((d for d in a.cal_dir.glob("run*") if (d / "run.json").is_file()),
                  key=lambda d: int(d.name[3:]) if d.name[3:].isdigit() else 0)
    before_nights, after_nights, notes, fails = [], [], [], []
    for d in runs:
        rec = load_run(d)
        if rec.status != "completed":
            notes.append(f"{d}: status {rec.status}, left out")
            continue
        saved = _with_noise(rec)
        try:
            before, after = {}, {}
            for crec in rec.configs:
                c = configs.get(crec.name)
                if c is None:
                    notes.append(f"{d.name}: config {crec.name} is not in {a.list}, left out")
                    continue
                before[crec.name] = crec.gates
                after[crec.name], n = judge_config(c, crec, RunFolder(d), rec)
                notes += [f"{d.name}: {x}" for x in n]
                fails += [f"{d.name}: {g.id}: {g.detail[:300]}" for g in after[crec.name] if g.fails_run]
        finally:
            _restore(saved)
        before_nights.append(before)
        after_nights.append(after)
    if not after_nights:
        print(f"{a.cal_dir}: no finished repeat", file=sys.stderr)
        return 2
    b, af = false_alarm_rates(before_nights).as_dict(), false_alarm_rates(after_nights).as_dict()
    print(f"# {len(after_nights)} real repeats in {a.cal_dir}, re-judged with this tree's gates\n")
    print("\n".join(_rows("realized false-fail rate per night", _levels(b), _levels(af))))
    for n in notes:
        print(f"- note: {n}")
    if a.failures:
        print("\n## failing gates after\n")
        print("\n".join(f"- {f}" for f in fails) or "none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
