"""harness.analysis.measurements: the writers (``m.task_record(v, t).score = ...``,
``m.variant_record(v).not_run = ...``) fill the typed per-(variant, task), per-variant and
per-comparison records the judges read; ``absorb`` copies a part measured apart.
"""

from __future__ import annotations

from harness.analysis.measurements import ComparisonMeasurement, Measurements, TaskMeasurement


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
