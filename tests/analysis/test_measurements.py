"""harness.analysis.measurements: the writers (``m.task_record(v, t).score = ...``,
``m.variant_record(v).not_run = ...``) fill the typed per-(variant, task), per-variant and
per-comparison records the judges read; ``absorb`` copies a part measured apart; bound to a
config's record, the readers view the values it holds.
"""

from __future__ import annotations

from harness.analysis.measurements import ComparisonMeasurement, Measurements, TaskMeasurement
from harness.analysis.scoring import output_match, score_task
from harness.records.measures import EffectivenessRecord, ModelRunnerRecord, SpecDecodeCountersRecord, SpecDecodeRecord
from harness.records.results import ComparisonMeasured, comparison_result
from harness.records.run_record import ConfigResult, TaskResult, VariantResult
from harness.records.samples import Sample


def test_writers_create_and_address_the_typed_records():
    m = Measurements()
    m.task_record("v", "t").score = "score"
    m.task_record("v", "t").samples = ["s"]
    m.task_record("v", "t").spec_error = "no metrics"
    m.task_record("v", "t2").not_run = "data missing"
    m.variant_record("w").not_run = "server failed"
    m.variant_record("v").effectiveness = "eff"
    m.variant_record("w").engine_facts_error = "unreadable"
    m.comparison_record("v", "w", "t").match = "om"
    m.comparison_record("v", "w", "t").divergences = "dv"
    assert m.tasks[("v", "t")] == TaskMeasurement(score="score", samples=["s"], spec_error="no metrics")
    assert m.task("v", "t2").not_run == "data missing" and m.variant("w").not_run == "server failed"
    assert m.variant("v").effectiveness == "eff" and m.variant("w").engine_facts_error == "unreadable"
    assert m.comparison("v", "w", "t") == ComparisonMeasurement(match="om", divergences="dv")
    # a writer returns the stored record; a reader of nothing measured an empty one, not stored
    assert m.task_record("v", "t") is m.tasks[("v", "t")] and m.comparison_record("v", "w", "t") is m.comparisons[
        ("v", "w", "t")]
    assert m.task("y", "t") == TaskMeasurement() and ("y", "t") not in m.tasks
    assert m.comparison("v", "x", "t") == ComparisonMeasurement() and ("v", "x", "t") not in m.comparisons


def test_absorb_copies_the_fields_measured_apart():
    m = Measurements(runners_collected=True)
    m.task_record("a", "t").score = "sc"
    m.variant_record("b").not_run = "why"
    part = Measurements()  # one variant's records, measured apart (harness.run.variant_steps.VariantRun)
    part.task_record("a", "t").samples = [1]
    part.variant_record("a").effectiveness = "eff"
    part.comparison_record("a", "b", "t").noise = "nz"
    m.absorb(part)
    assert m.task("a", "t") == TaskMeasurement(score="sc", samples=[1])  # the field it left None is kept
    assert m.variant("a").effectiveness == "eff" and m.variant("b").not_run == "why"
    assert m.comparison("a", "b", "t").noise == "nz" and m.runners_collected
    assert m.tasks[("a", "t")] is not part.tasks[("a", "t")]  # copied, not shared


def _sample(q: str, right: bool, ids: tuple[int, ...] = (1, 2)):
    return Sample("c", "v", "t", q, "h" + q, "5", completion="x", token_ids=ids, finish_reason="stop",
                  answers={"flexible-numeric": "5" if right else "4"}, correct={"flexible-numeric": right})


def test_a_bound_view_reads_every_measured_value_from_the_record_written_once():
    """What the record holds is written once, into it: the view bound to a config's record
    reads the task's score (per pipeline again), acceptance figures, the variant's
    effective configuration and runner, the comparison's values; the stored entries add
    what the record does not hold (samples, reasons)."""
    xs = [_sample(f"q{i}", i < 3) for i in range(4)]
    sc = score_task(xs, ("flexible-numeric",))
    spec = SpecDecodeRecord.from_counters(SpecDecodeCountersRecord(10, 20, 5, (3, 2)))
    trec = TaskResult(samples="s.jsonl", seconds=1.0, **sc.result_fields(), spec_decode=spec)
    runner = ModelRunnerRecord(runner="v1", source="server log")
    crec = ConfigResult(name="c", path="c.yaml", sha256="0", form="native", model="m", pipeline="flexible-numeric",
                        variants={"v": VariantResult(argv=["x"], effective=EffectivenessRecord(effective=True),
                                                     model_runner=runner, tasks={"t": trec})})
    match = output_match(xs, xs)
    crec.comparisons.append(comparison_result(
        type("Pair", (), {"baseline": "v", "candidate": "w"})(), "t", "flexible-numeric",
        ComparisonMeasured(output_match=match), "not run: not asked (noise_runs 1)"))
    m = Measurements(record=crec)
    m.task_record("v", "t").samples = xs  # only what the record does not hold
    m.variant_record("w").not_run = "server failed"
    tm = m.task("v", "t")
    assert tm.score == sc and tm.spec is spec and tm.samples is xs and tm.spec_error is None
    assert m.task("v", "t").score is tm.score  # read back once per record entry
    assert m.variant("v").effectiveness is crec.variants["v"].effective and m.variant("v").runner is runner
    assert m.variant("w").not_run == "server failed" and m.variant("w").effectiveness is None
    cm = m.comparison("v", "w", "t")
    assert cm.match is crec.comparisons[0] and cm.match.output_match_rate == match.output_match_rate
    assert m.comparison("v", "x", "t") == ComparisonMeasurement() and m.task("x", "t") == TaskMeasurement()
    assert m.tasks[("v", "t")].score is None  # nothing written twice
