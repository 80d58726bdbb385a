"""harness.analysis.gates: the judges' registry, the shared drop verdict, and judges reading
the typed measurements.

Every class of the ``Gate`` union of ``harness.config.gates`` must have exactly one
judge; a gate class without one is an error, never a skipped gate.
"""

from __future__ import annotations

import typing

import pytest

from harness.analysis import gates as AG
from harness.analysis.measurements import (
    Measurements,
    TaskMeasurement,
)
from harness.analysis.scoring import score_task
from harness.config import gates as G
from harness.records.baselines import BaselineTask
from harness.records.samples import Sample


def _union_classes() -> set[type]:
    """The classes of ``G.Gate`` (``Annotated[Union[...], Field(...)]``), read from the type."""
    (union, *_meta) = typing.get_args(G.Gate)
    classes = set(typing.get_args(union))
    assert classes and all(isinstance(c, type) for c in classes)
    return classes


def test_every_gate_class_of_the_union_has_exactly_one_judge():
    classes = _union_classes()
    missing = sorted(c.__name__ for c in classes - set(AG.JUDGES))
    extra = sorted(c.__name__ for c in set(AG.JUDGES) - classes)
    assert not missing, f"gate classes without a judge: {missing}"
    assert not extra, f"judges of classes outside the Gate union: {extra}"
    # one judge per class: no function judges two classes
    assert len(set(AG.JUDGES.values())) == len(AG.JUDGES)


def test_every_gate_kind_is_the_kind_of_one_class_of_the_union():
    kinds = [c.model_fields["kind"].default for c in _union_classes()]
    assert sorted(k.value for k in kinds) == sorted(k.value for k in G.GateKind)


def _gate(**kw):
    base = {"id": "c/v/t/max_error_rate", "config": "c", "variant": "v", "task": "t", "limit": 0.1}
    return G.MaxErrorRate(**{**base, **kw})


def test_a_gate_class_without_a_judge_is_an_error_not_a_skip():
    class Unjudged(G.MaxErrorRate):  # a subclass is a different class: exact-type dispatch
        pass

    g = Unjudged(id="c/v/t/unjudged", config="c", variant="v", task="t", limit=0.1)
    m = Measurements()
    m.variant_record("v").not_run = "variant not selected"  # even a not-run gate is refused
    with pytest.raises(TypeError, match=r"c/v/t/unjudged.*no judge for gate class Unjudged"):
        AG.evaluate_gate(g, m)
    with pytest.raises(TypeError, match="no judge"):
        AG.evaluate_gates([g], Measurements())


def test_a_second_judge_for_a_class_is_refused():
    with pytest.raises(TypeError, match="MaxErrorRate already judged by judge_max_error_rate"):
        AG.judges(G.MaxErrorRate)(lambda g, m, p=None: None)
    assert AG.JUDGES[G.MaxErrorRate] is AG.judge_max_error_rate


@pytest.mark.parametrize("drop, p, passed, n_reasons", [
    (0.05, 0.5, True, 0),     # within the limit, not significant
    (0.10, 0.5, True, 0),     # exactly at the limit passes (<=)
    (0.11, 0.5, False, 1),    # over the limit
    (0.01, 0.049, False, 1),  # significant
    (0.20, 0.001, False, 2),  # both
    (-0.3, 1.0, True, 0),     # an improvement never fails
])
def test_drop_verdict(drop, p, passed, n_reasons):
    v = AG.drop_verdict(drop, 0.10, p, 0.05, worse="significantly worse", test="one-sided McNemar ")
    assert v.passed is passed and len(v.reasons) == n_reasons
    assert (v.failure == "") is passed
    if drop > 0.10:
        assert f"drop {drop:.4f} > 0.1" in v.failure
    if p < 0.05:
        assert f"significantly worse (one-sided McNemar p={p:.4g} < alpha 0.05)" in v.failure


def test_drop_verdict_without_a_test_and_p_without_alpha():
    assert AG.drop_verdict(0.3, 0.3).passed and not AG.drop_verdict(0.31, 0.3).passed
    with pytest.raises(ValueError, match="alpha"):
        AG.drop_verdict(0.0, 0.1, 0.01)


def _s(qid, right, variant="v"):
    return Sample("c", variant, "t", qid, "h", "5", completion="x", token_ids=(1,), finish_reason="stop",
                  answers={"strict-numeric": "5"}, correct={"strict-numeric": right})


def test_judges_read_the_typed_records():
    g = _gate()
    m = Measurements()
    m.tasks[("v", "t")] = TaskMeasurement(score=score_task([_s("q1", True), _s("q2", True),
                                                            Sample("c", "v", "t", "q3", "h", "5", error="HTTP 500")]))
    r = AG.evaluate_gate(g, m)
    assert r.observed == pytest.approx(1 / 3) and r.passed is False and "1 of 3 requests failed" in r.detail
    m.tasks[("v", "t")].not_run = "server failed"
    r = AG.evaluate_gate(g, m)
    assert r.passed is None and r.detail == "not run: server failed"


def test_both_accuracy_drop_judges_use_the_one_drop_verdict(monkeypatch):
    calls = []
    real = AG.drop_verdict

    def spy(*a, **kw):
        calls.append(kw.get("worse"))
        return real(*a, **kw)

    monkeypatch.setattr(AG, "drop_verdict", spy)
    base = {"config": "c", "variant": "v", "task": "t", "limit": 0.1, "pipeline": "strict-numeric", "alpha": 0.05}
    drop = G.MaxAccuracyDrop(id="c/r->v/t/max_accuracy_drop", baseline="r", **base)
    m = Measurements()
    m.task_record("r", "t").samples = [_s(f"q{i}", True, "r") for i in range(10)]
    m.task_record("v", "t").samples = [_s(f"q{i}", i < 5) for i in range(10)]
    r = AG.evaluate_gate(drop, m)
    # 5 right only in r, 0 only in v: drop 0.5 > 0.1; exact one-sided McNemar p = 0.5**5
    assert r.passed is False and r.observed == pytest.approx(0.5)
    assert f"significantly worse (one-sided McNemar p={0.5 ** 5:.4g} < alpha 0.05)" in r.detail
    assert calls == ["significantly worse"]
    # the stored-baseline accuracy judge words its failure through the same verdict

    bt = BaselineTask.model_validate({
        "num_requests": 10, "error_count": 0, "accuracy": {}, "accuracy_ci": {},
        "correct": {"strict-numeric": 10}, "scored": {"strict-numeric": 10},
        "questions": {f"q{i}": {"prompt_hash": "h", "gold": "5", "correct": {"strict-numeric": True}}
                      for i in range(10)},
    })
    bg = G.BaselineAccuracyDrop(id="c/v/t/baseline_accuracy_drop", **base)
    r = AG._baseline_accuracy(bg, bt, m.task("v", "t").samples, "baseline:good")
    assert r.passed is False and r.observed == pytest.approx(0.5) and r.baseline == "baseline:good"
    assert f"; FAILED: drop 0.5000 > 0.1; significantly lower (p={0.5 ** 5:.4g} < alpha 0.05)" in r.detail
    assert calls == ["significantly worse", "significantly lower"]
