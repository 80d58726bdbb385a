"""harness.analysis.gates and the gate kinds' judges: dispatch by declared class, the shared
drop verdict, and judges reading the typed measurements.

Every class of the ``Gate`` union of ``harness.config.gates`` must have exactly one
judge, its own; a gate class without one is an error, never a skipped gate.
"""

from __future__ import annotations

import dataclasses
import math
import typing

import pydantic
import pytest

from harness.analysis import gates as AG
from harness.analysis.familywise import holm_adjust
from harness.analysis.gatekinds import _common as JC
from harness.analysis.gatekinds._common import drop_verdict
from harness.analysis.gatekinds.baseline_accuracy_drop import BaselineAccuracyDrop, _baseline_accuracy
from harness.analysis.gatekinds.max_accuracy_drop import MaxAccuracyDrop
from harness.analysis.gatekinds.max_error_rate import MaxErrorRate
from harness.analysis.gatekinds.shape_proven import ShapeProven
from harness.analysis.gates import evaluate_gates
from harness.analysis.measurements import (
    Measurements,
    TaskMeasurement,
)
from harness.analysis.scoring import output_match, score_task
from harness.config import gates as G
from harness.config.loader import load_config
from harness.config.plan import build_plan
from harness.engine.info import check_effective
from harness.records.baselines import BaselineTask
from harness.records.measures import EngineCountersRecord, EngineFactsRecord, SpecDecodeCountersRecord, SpecDecodeRecord
from harness.records.samples import Sample
from harness.records.shape_proof import ShapeProofRecord
from tests.sample_factory import constructed_sample as s


def _union_classes() -> set[type]:
    """The classes of ``G.Gate`` (``Annotated[Union[...], Field(...)]``), read from the type."""
    (union, *_meta) = typing.get_args(G.Gate)
    classes = set(typing.get_args(union))
    assert classes and all(isinstance(c, type) for c in classes)
    return classes


def test_every_gate_class_of_the_union_has_exactly_one_judge():
    classes = _union_classes()
    missing = sorted(c.__name__ for c in classes if "judge" not in vars(c))
    assert not missing, f"gate classes without a judge of their own: {missing}"
    assert classes == {d.spec for d in G.declarations().values()}
    # one judge per class: no function judges two classes
    judges = [vars(c)["judge"] for c in classes]
    assert len(set(judges)) == len(judges) == len(classes)


def test_every_gate_kind_is_the_kind_of_one_class_of_the_union():
    kinds = [c.model_fields["kind"].default for c in _union_classes()]
    assert sorted(kinds) == sorted(G.declarations())


def test_the_gate_union_parses_a_gate_by_its_kind():
    g = MaxErrorRate(id="c/v/t/max_error_rate", config="c", variant="v", task="t", limit=0.1)
    back = pydantic.TypeAdapter(G.Gate).validate_python(g.model_dump())
    assert type(back) is MaxErrorRate and back == g
    with pytest.raises(pydantic.ValidationError, match="no_such_kind"):
        pydantic.TypeAdapter(G.Gate).validate_python({**g.model_dump(), "kind": "no_such_kind"})


def _gate(**kw):
    base = {"id": "c/v/t/max_error_rate", "config": "c", "variant": "v", "task": "t", "limit": 0.1}
    return MaxErrorRate(**{**base, **kw})


def test_a_gate_class_without_a_judge_is_an_error_not_a_skip():
    class Unjudged(MaxErrorRate):  # a subclass is a different class: exact-type dispatch
        pass

    g = Unjudged(id="c/v/t/unjudged", config="c", variant="v", task="t", limit=0.1)
    m = Measurements()
    m.variant_record("v").not_run = "variant not selected"  # even a not-run gate is refused
    with pytest.raises(TypeError, match=r"c/v/t/unjudged.*no judge for gate class Unjudged"):
        AG.evaluate_gate(g, m)
    with pytest.raises(TypeError, match="no judge"):
        AG.evaluate_gates([g], Measurements())


def test_a_declaration_without_its_own_judge_is_refused():
    """A kind is judged by its own class's judge: a class that would inherit another kind's
    judge (or none) is refused by @gate, so a declaration without a judge cannot exist."""
    ns = {"__annotations__": {"kind": typing.Literal["scratch_kind"]}, "kind": "scratch_kind",
          "plan": classmethod(lambda cls, at: None)}
    with pytest.raises(TypeError, match="Scratch: no judge"):
        G.gate(scope="task", order=999, doc="x")(type("Scratch", (MaxErrorRate,), ns))
    assert "scratch_kind" not in G.declarations()
    assert G.declarations()["max_error_rate"].spec is MaxErrorRate and "judge" in vars(MaxErrorRate)


@pytest.mark.parametrize("drop, p, passed, n_reasons", [
    (0.05, 0.5, True, 0),     # within the limit, not significant
    (0.10, 0.5, True, 0),     # exactly at the limit passes (<=)
    (0.11, 0.5, False, 1),    # over the limit
    (0.01, 0.049, False, 1),  # significant
    (0.20, 0.001, False, 2),  # both
    (-0.3, 1.0, True, 0),     # an improvement never fails
])
def test_drop_verdict(drop, p, passed, n_reasons):
    v = drop_verdict(drop, 0.10, p, 0.05, worse="significantly worse", test="one-sided McNemar ")
    assert v.passed is passed and len(v.reasons) == n_reasons
    assert (v.failure == "") is passed
    if drop > 0.10:
        assert f"drop {drop:.4f} > 0.1" in v.failure
    if p < 0.05:
        assert f"significantly worse (one-sided McNemar p={p:.4g} < alpha 0.05)" in v.failure


def test_drop_verdict_without_a_test_and_p_without_alpha():
    assert drop_verdict(0.3, 0.3).passed and not drop_verdict(0.31, 0.3).passed
    with pytest.raises(ValueError, match="alpha"):
        drop_verdict(0.0, 0.1, 0.01)


def test_holm_adjust_matches_the_step_down_definition():
    # Holm 1979 worked by hand: sorted p = .01, .02, .04 with m = 3 ->
    # 3*.01 = .03, max(.03, 2*.02 = .04) = .04, max(.04, 1*.04) = .04
    assert holm_adjust([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert holm_adjust([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    assert holm_adjust([]) == []


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
    real = drop_verdict

    def spy(*a, **kw):
        calls.append(kw.get("worse"))
        return real(*a, **kw)

    monkeypatch.setattr(JC, "drop_verdict", spy)  # the judges call it through their family's common module
    base = {"config": "c", "variant": "v", "task": "t", "limit": 0.1, "pipeline": "strict-numeric", "alpha": 0.05}
    drop = MaxAccuracyDrop(id="c/r->v/t/max_accuracy_drop", baseline="r", **base)
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
    bg = BaselineAccuracyDrop(id="c/v/t/baseline_accuracy_drop", **base)
    r = _baseline_accuracy(bg, bt, m.task("v", "t").samples, "baseline:good")
    assert r.passed is False and r.observed == pytest.approx(0.5) and r.baseline == "baseline:good"
    assert f"; FAILED: drop 0.5000 > 0.1; significantly lower (p={0.5 ** 5:.4g} < alpha 0.05)" in r.detail
    assert calls == ["significantly worse", "significantly lower"]


# ----------------------------------------------------------------- gates of a planned config

CFG = """\
model: m
false_alarm_budget: null
variants:
  reference: {}
  spec:
    speculative_config: {method: mtp, num_speculative_tokens: 2}
    async_scheduling: true
    expected_effective: {cpu: {async_scheduling: false}}
  spec2:
    speculative_config: {method: mtp, num_speculative_tokens: 2}
    async_scheduling: true
tasks:
  t: {num_questions: 10}
gates:
  accuracy_threshold: 0.8
  tolerance: 0.1
  min_acceptance_length: 1.5
comparisons:
  - {baseline: reference, candidate: spec, max_accuracy_drop: 0.05, min_output_match: 1.0}
  - {baseline: spec, candidate: spec2, max_accuracy_drop: null, min_output_match: null, max_acceptance_length_drop: 0.1}
"""


def facts(async_sched, method="mtp", n=2):
    return EngineFactsRecord("0.32.0", "cpu", "torch.float32", async_sched, method, n, 2048, False)


def test_gates_end_to_end_on_constructed_measurements(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(CFG)
    cp = build_plan([load_config(p)]).configs[0]
    m = Measurements()
    ref = [s(f"q{i}", i < 9) for i in range(10)]                 # 0.9
    spec = [s(f"q{i}", i < 7, ids=(1, 2, 3) if i else (1, 2, 4)) for i in range(10)]  # 0.7, q0 diverges
    for v, xs in (("reference", ref), ("spec", spec), ("spec2", spec)):
        m.task_record(v, "t").score = score_task(xs)
    m.task_record("spec", "t").spec = SpecDecodeRecord.from_counters(SpecDecodeCountersRecord(100, 200, 80, (50, 30)))
    m.task_record("spec2", "t").spec = SpecDecodeRecord.from_counters(SpecDecodeCountersRecord(100, 200, 60, (40, 20)))
    m.variant_record("reference").effectiveness = check_effective(facts(False, None, None), None, None, {})
    mtp2 = {"method": "mtp", "num_speculative_tokens": 2}
    m.variant_record("spec").effectiveness = check_effective(facts(False), mtp2, True,
                                              {"cpu": {"async_scheduling": False}})
    m.variant_record("spec2").effectiveness = check_effective(facts(False), dict(mtp2), True, {})
    m.task_record("reference", "t").samples, m.task_record("spec", "t").samples = ref, spec
    m.comparison_record("reference", "spec", "t").match = output_match(ref, spec)
    res = {g.id.split("/", 1)[1]: g for g in evaluate_gates(cp.gates, m)}

    assert res["reference/t/accuracy_floor"].passed is True        # 0.9 >= 0.7
    assert res["spec/t/accuracy_floor"].passed is True             # 0.7 >= 0.7
    assert res["spec/t/accuracy_floor"].observed == pytest.approx(0.7)
    assert res["spec/t/min_acceptance_length"].observed == pytest.approx(1.8)   # 1 + 80/100
    assert res["spec2/t/min_acceptance_length"].observed == pytest.approx(1.6)
    assert res["spec->spec2/t/max_acceptance_length_drop"].observed == pytest.approx(0.2)
    assert res["spec->spec2/t/max_acceptance_length_drop"].passed is False
    drop = res["reference->spec/t/max_accuracy_drop"]
    assert drop.observed == pytest.approx(0.2) and drop.passed is False
    assert set(drop.questions) == {"q7", "q8"}                      # right in reference, wrong in spec
    om = res["reference->spec/t/min_output_match"]
    assert om.observed == pytest.approx(0.9) and om.passed is False and om.questions == ("q0",)
    assert res["spec/variant_effective"].passed is True            # declared expected on cpu
    assert "not effective" in res["spec/variant_effective"].detail
    assert res["spec2/variant_effective"].passed is False           # async asked, engine ran sync
    assert res["reference/variant_effective"].passed is True
    assert res["spec/t/drafts_observed"].passed is True


def test_zero_drafts_fails_with_message(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(CFG)
    cp = build_plan([load_config(p)]).configs[0]
    m = Measurements()
    m.task_record("spec", "t").spec = SpecDecodeRecord.from_counters(SpecDecodeCountersRecord(0, 0, 0, ()))
    res = {g.id.split("/", 1)[1]: g for g in evaluate_gates(cp.gates, m)}
    for k in ("spec/t/drafts_observed", "spec/t/min_acceptance_length"):
        assert res[k].passed is False and "no drafts observed" in res[k].detail


def test_not_run_is_never_passed(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(CFG)
    cp = build_plan([load_config(p)]).configs[0]
    m = Measurements()
    m.variant_record("spec").not_run = "server failed to start"
    res = {g.id.split("/", 1)[1]: g for g in evaluate_gates(cp.gates, m)}
    assert res["spec/t/accuracy_floor"].passed is None
    assert res["spec/t/accuracy_floor"].verdict == "NOT RUN"
    assert res["reference->spec/t/min_output_match"].passed is None


def test_floor_widened_for_smaller_run_than_calibration(tmp_path):
    text = CFG.replace("tolerance: 0.1", "tolerance: 0.0\n  calibration_questions: 1319")
    p = tmp_path / "c.yaml"
    p.write_text(text)
    cp = build_plan([load_config(p)]).configs[0]
    m = Measurements()
    m.task_record("reference", "t").score = score_task([s(f"q{i}", i < 7) for i in range(10)])  # 0.7
    g = next(x for x in evaluate_gates(cp.gates, m) if x.id.endswith("reference/t/accuracy_floor"))
    # one-sided 95%: 1.6449 * sqrt(0.8*0.2*(1319-10)/(10*1318)) = 0.2074 -> floor 0.5926
    margin = 1.6448536269514722 * math.sqrt(0.8 * 0.2 * (1319 - 10) / (10 * 1318))
    assert g.limit == pytest.approx(0.8 - margin, abs=1e-6)
    assert g.passed is True


def _shape_gate():
    return ShapeProven(id="c/v/edges/shape_proven", config="c", variant="v", task="edges")


def test_shape_proven_passes_on_a_proof_without_problems_and_names_the_counters():
    m = Measurements()
    m.task_record("v", "edges").shape = ShapeProofRecord(
        shape="prompt_edges", edges={"spec_k2": 3}, prompt_lengths={"3": 2}, prompt_tokens_sent=6,
        counters=EngineCountersRecord(prompt_tokens=6, generation_tokens=9, preemptions=0))
    r = AG.evaluate_gate(_shape_gate(), m)
    assert r.passed is True and "prompt tokens 6" in r.detail and "preemptions 0" in r.detail


@pytest.mark.parametrize("problems", [None, ("chunk edge 64: no prompt longer than the chunk",)])
def test_shape_proven_fails_closed_without_a_proof_or_with_a_problem(problems):
    m = Measurements()
    m.task_record("v", "edges").score = None
    if problems is not None:
        m.task_record("v", "edges").shape = ShapeProofRecord(
            shape="prompt_edges", edges={"chunk": 64}, prompt_lengths={"63": 1}, prompt_tokens_sent=63,
            problems=problems)
    r = AG.evaluate_gate(_shape_gate(), m)
    assert r.passed is False
    assert (problems[0] if problems else "no shape proof recorded") in r.detail


# ----------------------------------------------------------------- the registry fails closed both ways


def test_a_subclass_of_a_declared_kind_is_not_judged_by_its_parent():
    class Undeclared(MaxErrorRate):
        pass

    g = Undeclared(id="c/v/t/max_error_rate", config="c", variant="v", task="t", limit=0.1)
    with pytest.raises(TypeError, match=r"no judge for gate class Undeclared.*not the spec class of a declared"):
        AG.evaluate_gate(g, Measurements())


def test_a_kind_module_without_its_declaration_is_a_load_error(monkeypatch):
    declared = dict(G.declarations())
    without = {k: d for k, d in declared.items() if k != "max_error_rate"}
    with pytest.raises(TypeError, match=r"module harness.analysis.gatekinds.max_error_rate declares no gate kind "
                                        r"max_error_rate"):
        G.check_declared(["max_error_rate"], without)

    class NewSpec(ShapeProven):  # a declaration made outside the module of its kind
        pass

    d = declared["shape_proven"]
    monkeypatch.setitem(declared, "shape_proven", dataclasses.replace(d, spec=NewSpec, module=__name__))
    with pytest.raises(TypeError, match=rf"shape_proven is declared in {__name__}, not in its own module"):
        G.check_declared(["shape_proven"], declared)


def test_every_judge_lives_in_the_module_of_its_kind():
    for kind, d in G.declarations().items():
        assert d.module == f"harness.analysis.gatekinds.{kind}", d
        assert vars(d.spec)["judge"].__module__ == d.module, (kind, d.spec)
        assert vars(d.spec)["plan"].__func__.__module__ == d.module, (kind, d.spec)
