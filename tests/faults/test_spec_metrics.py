"""harness.faults.spec_metrics: evalrun's workaround of vLLM 0.32 attaching per-request
speculative metrics only to outputs the scheduler finishes (vLLM's own
``RequestSpecDecodeMetrics`` / ``EngineCoreOutput`` types, no engine)."""

from __future__ import annotations

import inspect
import types

import pytest

from harness.faults.reports import counts
from harness.faults.spec_metrics import _wrapper, attach_metrics
from tests.faults.fakes import needs_vllm

# importing vLLM starts a subprocess (its platform probe): the integration tier (tests/README.md)
pytestmark = [needs_vllm, pytest.mark.integration]


def _vllm_types():
    from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs
    from vllm.v1.metrics.stats import RequestSpecDecodeMetrics

    return EngineCoreOutput, EngineCoreOutputs, RequestSpecDecodeMetrics


def _step(ids):
    EngineCoreOutput, EngineCoreOutputs, _ = _vllm_types()
    return {0: EngineCoreOutputs(outputs=[
        EngineCoreOutput(request_id=r, new_token_ids=[1], finish_reason=None) for r in ids])}


def _request(metrics):
    return types.SimpleNamespace(spec_decode_metrics=metrics)


def test_flag_off_leaves_every_output_alone():
    # --per-request-spec-decode-metrics none: vLLM gives no request metrics (Scheduler.add_request)
    out = _step(["a", "b"])
    assert attach_metrics(out.values(), {"a": _request(None), "b": _request(None)}) == 0
    assert [o.spec_decode_metrics for o in out[0].outputs] == [None, None]


def test_every_output_gets_a_snapshot_of_its_request():
    *_, Metrics = _vllm_types()
    m = Metrics.new(num_spec_tokens=2)
    m.observe(num_draft_tokens=2, num_accepted=2, detailed=True)
    m.observe(num_draft_tokens=2, num_accepted=1, detailed=True)
    out = _step(["a", "gone"])
    assert attach_metrics(out.values(), {"a": _request(m)}) == 1
    got = out[0].outputs[0].spec_decode_metrics
    assert got is not m  # a copy: the request keeps growing, the output must not
    m.observe(num_draft_tokens=2, num_accepted=0, detailed=True)
    d = got.to_dict()
    assert (d["num_spec_steps"], d["num_draft_tokens"], d["num_accepted_draft_tokens"]) == (2, 4, 3)
    assert d["acceptance_histogram"] == [0, 1, 1] and d["per_step_accepted"] == [2, 1]
    assert out[0].outputs[1].spec_decode_metrics is None  # freed request: nothing to attach


def test_vllms_own_metrics_are_kept():
    *_, Metrics = _vllm_types()
    own, other = Metrics.new(2), Metrics.new(2)
    out = _step(["a"])
    out[0].outputs[0].spec_decode_metrics = own
    assert attach_metrics(out.values(), {"a": _request(other)}) == 0
    assert out[0].outputs[0].spec_decode_metrics is own


def test_wrapper_calls_the_original_unchanged_and_counts():
    *_, Metrics = _vllm_types()
    m = Metrics.new(2)
    calls = []
    result = _step(["a"])

    def original(self, *a, **kw):
        calls.append((a, kw))
        return result

    sched = types.SimpleNamespace(requests={"a": _request(m)})
    assert _wrapper(original)(sched, "so", model_runner_output="mro") is result
    assert calls == [(("so",), {"model_runner_output": "mro"})]
    assert result[0].outputs[0].spec_decode_metrics == m
    assert counts().get("spec_metrics.attached") == 1


@pytest.mark.parametrize("needle", [
    # the front end keeps the latest metrics it received and puts them on the finished output
    # (a stop string included): the workaround relies on both lines of vLLM 0.32
    "req_state.spec_decode_metrics = engine_core_output.spec_decode_metrics",
    "spec_decode_metrics=self.spec_decode_metrics if finished else None",
])
def test_front_end_keeps_the_latest_metrics(needle):
    from vllm.v1.engine import output_processor

    assert needle in inspect.getsource(output_processor)
