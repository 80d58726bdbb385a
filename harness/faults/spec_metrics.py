"""evalrun's workaround of a vLLM 0.32 limit: per-request speculative metrics for a request
that a stop *string* ends.

vLLM 0.32 attaches a request's ``RequestSpecDecodeMetrics`` (``--per-request-spec-decode-metrics``)
to its ``EngineCoreOutput`` only when the scheduler itself finishes it
(``vllm/v1/core/sched/scheduler.py``, ``Scheduler.update_from_output``, about line 2276:
``spec_decode_metrics=request.spec_decode_metrics if finish_reason is not None else None``).
A stop string is matched later, by the front end's detokenizer
(``vllm/v1/engine/output_processor.py``, ``OutputProcessor.process_outputs``), which finishes
the response there and aborts the request in the engine: that response carries no
``metrics.speculative_decoding``. The output processor already keeps the latest metrics it
received (``req_state.spec_decode_metrics = engine_core_output.spec_decode_metrics``) and puts
them on the finished output, so attaching them to *every* output is enough.

The wrapper of ``Scheduler.update_from_output`` calls vLLM's original unchanged, then gives
each output that carries no metrics a copy of its request's accumulated metrics (a copy: the engine
core serializes its outputs on another thread, and a single-process engine hands them over as
they are, so the live object could grow before the front end reads it). The sums over a task's
requests then equal its ``/metrics`` difference as long as the front end's abort reaches the
engine core before that core counts the request's next step (``EngineCore.step`` applies aborts
before ``update_from_output``); evalrun checks it and fails the acceptance gates closed otherwise
(``harness.records.spec_request.sums_mismatch``). A request
without metrics (the flag off: ``request.spec_decode_metrics is None``) is left alone, so the
patch is inert unless the server asked for per-request metrics. Counted as
``spec_metrics.attached`` (outputs given metrics) in the plugin report.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from harness.faults.env import REPORT_ENV
from harness.faults.log import logger
from harness.faults.patching import patch_as
from harness.faults.reports import count
from harness.faults.target import FaultConfigError, PatchTarget

UPDATE_FROM_OUTPUT = PatchTarget(
    module="vllm.v1.core.sched.scheduler",
    qualname="Scheduler.update_from_output",
    params=("scheduler_output", "model_runner_output"),
    reads=("requests",),
)
#: The patch's label (``__evalrun_fault__`` mark) and counter prefix.
LABEL = "spec_metrics"


class _Request(Protocol):
    spec_decode_metrics: object | None


class _Output(Protocol):
    request_id: str
    spec_decode_metrics: object | None


class _Outputs(Protocol):
    outputs: list[_Output]


def attach_metrics(outputs: Iterable[_Outputs], requests: Mapping[str, _Request]) -> int:
    """Give every output without ``spec_decode_metrics`` a copy of its request's metrics.

    Args:
        outputs: the ``EngineCoreOutputs`` of one scheduler step (``.outputs``: a list of
            ``EngineCoreOutput``).
        requests: the scheduler's requests by id (``Scheduler.requests``); a request that left
            it (finished and freed) keeps the metrics vLLM attached itself.

    Returns:
        how many outputs were given metrics (0 when no request has metrics: the flag is off).
    """
    n = 0
    for eco in outputs:
        for out in eco.outputs:
            if out.spec_decode_metrics is not None:
                continue  # vLLM's own (a request the scheduler finished)
            req = requests.get(out.request_id)
            if req is None or req.spec_decode_metrics is None:
                continue
            out.spec_decode_metrics = snapshot(req.spec_decode_metrics)
            n += 1
    return n


def snapshot(metrics: object) -> object:
    """A copy of a ``RequestSpecDecodeMetrics`` that later ``observe`` calls leave alone: the
    object copied, its lists (of ints: ``histogram``, ``per_step_accepted``,
    ``per_step_drafted``) copied at C speed; ``copy.deepcopy`` would cost a Python call per
    element on every output of every step."""
    snap = copy.copy(metrics)
    for name, value in vars(metrics).items():
        if isinstance(value, list):
            setattr(snap, name, list(value))
    return snap


def _wrapper(original: Callable[..., object]) -> Callable[..., object]:
    def update_from_output(self: object, *a: object, **kw: object) -> object:
        result = original(self, *a, **kw)
        requests = getattr(self, "requests", None)
        if isinstance(result, dict) and isinstance(requests, dict):
            count(f"{LABEL}.attached", attach_metrics(result.values(), requests))
        return result

    return update_from_output


def install_spec_metrics() -> None:
    """Patch ``Scheduler.update_from_output`` (:func:`attach_metrics` after the original).

    A vLLM without the target still runs, without the workaround: ``spec_metrics.missing``
    is counted and a warning logged (requests ending on a stop string then carry no
    metrics, and evalrun's per-request gates say NOT RUN).
    """
    try:
        patch_as(LABEL, UPDATE_FROM_OUTPUT, _wrapper, what=REPORT_ENV)
    except FaultConfigError as e:
        count(f"{LABEL}.missing")
        logger.warning("evalrun plugin: per-request spec metrics workaround not installed: %s", e)
