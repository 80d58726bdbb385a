"""The registries of task kinds (``@task_kind``) and answer pipelines (``@register_pipeline``):
every kind and pipeline is registered once by its own module, a second registration is
refused, an unknown name is refused, and a recorded task's pipelines are read back from
its record (:func:`harness.tasks.kinds.record_pipelines`)."""

from __future__ import annotations

import pytest

from harness.tasks import TASK_KINDS, TaskKindError, task_for
from harness.tasks.answers import GSM8K_PIPELINES, NUMERIC_PIPELINES, extract_flexible, extract_strict
from harness.tasks.base import PreparedTask, RequestTask
from harness.tasks.kinds import record_pipelines, task_kind
from harness.tasks.lm_eval_task import LmEvalTaskKind
from harness.tasks.pipelines import ANSWER_PIPELINES, PipelineError, answer_pipeline, declare_pipeline


def test_every_kind_is_registered_by_its_module():
    assert sorted(TASK_KINDS) == ["gsm8k", "lm_eval", "shape", "synthetic"]
    for kind, cls in TASK_KINDS.items():
        assert cls.kind == kind and task_for(kind).kind == kind


def test_a_kind_registered_twice_or_unknown_is_refused():
    with pytest.raises(TaskKindError, match="task kind 'gsm8k' registered twice"):
        @task_kind("gsm8k")
        class Again(RequestTask[None]):
            def prepare(self, name, spec, data_dir, allow_contamination=False, base_dir=None):
                raise NotImplementedError
    assert TASK_KINDS["gsm8k"].__name__ == "Gsm8kTask"
    with pytest.raises(ValueError, match="unknown task kind 'nope'"):
        task_for("nope")


def test_each_kind_says_which_pipelines_it_scores():
    for kind in ("gsm8k", "synthetic", "shape"):
        assert TASK_KINDS[kind].pipelines == GSM8K_PIPELINES
    assert LmEvalTaskKind.pipelines == ()  # its task's own, reported by its run
    assert all(p in ANSWER_PIPELINES for p in GSM8K_PIPELINES)


def test_pipelines_are_registered_with_their_code():
    assert answer_pipeline("strict-numeric").extract is extract_strict
    assert answer_pipeline("flexible-numeric").extract is extract_flexible
    assert {answer_pipeline(p).source for p in NUMERIC_PIPELINES} == {"evalrun"}
    assert {answer_pipeline(p).source for p in ("strict-match", "flexible-extract")} == {"lm-eval"}
    assert answer_pipeline("strict-match").extract is None
    with pytest.raises(PipelineError, match="'strict-numeric' registered twice"):
        declare_pipeline("strict-numeric", "a second strict-numeric")
    with pytest.raises(PipelineError, match="no answer pipeline 'acc'"):
        answer_pipeline("acc")


def test_record_pipelines():
    # an lm-eval task's own, as its record lists them (even none: lm-eval failed)
    assert record_pipelines("lm_eval", ["acc", "acc_norm"], ["acc"]) == ("acc", "acc_norm")
    assert record_pipelines("lm_eval", [], []) == ()
    # a kind's own, whatever was scored (lm-eval's absent without lm-eval)
    assert record_pipelines("synthetic", None, NUMERIC_PIPELINES) == GSM8K_PIPELINES
    # no kind (a baseline file) or an unknown one: the default kind's when the scored fit it
    assert record_pipelines(None, None, ["flexible-numeric"]) == GSM8K_PIPELINES
    assert record_pipelines("future", None, []) == GSM8K_PIPELINES
    assert record_pipelines(None, None, ["acc", "f1"]) == ("acc", "f1")


def test_a_prepared_task_without_payload_says_so():
    pt: PreparedTask[str] = PreparedTask((), (), "h", "src")
    with pytest.raises(TypeError, match="no payload"):
        pt.typed_payload()
    assert PreparedTask((), (), "h", "src", payload="plan").typed_payload() == "plan"
