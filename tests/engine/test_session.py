"""One variant's engine session (harness/engine/session.py): requests sent, completions
in request order, the speculative-decoding counter difference over a task and per
request, work measured between snapshots, impossible counters, a server that died.

The server is the FAKE one (tests/fake_vllm.py): its counters follow a stated rule the
real engine cannot be held to (each completion request adds 4 drafts, 8 draft tokens and
2 accepted tokens, all at position 0; ``FAKE_METRICS=impossible`` reports 5 x the
accepted tokens), and it can be made to crash at a chosen request. The expected figures
below are worked out from that rule by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from harness.engine.server import EngineProcesses, ServerStartError
from harness.engine.session import VariantSession, counter_problem
from harness.tasks.requests import Request

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

FAKE = Path(__file__).resolve().parents[1] / "fake_vllm.py"
SPEC = {"method": "mtp", "num_speculative_tokens": 2}


def session(tmp_path: Path, speculative: bool = True, concurrency: int = 4, **env: str) -> VariantSession:
    argv = [str(FAKE), "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--port", "{port}"]
    if speculative:
        argv += ["--speculative-config", json.dumps(SPEC)]
    return VariantSession("cfg/spec", argv, {"FAKE_MODE": "ok", **env}, tmp_path / "spec.log", startup_timeout=30,
                          request_timeout=10, max_concurrency=concurrency, speculative=speculative,
                          processes=EngineProcesses())


def requests(n: int) -> list[Request]:
    return [Request(f"t/test/{i}", f"question {i}?", "5", f"{i:016x}") for i in range(n)]


def test_a_task_returns_completions_in_request_order_and_the_counter_difference(tmp_path):
    with session(tmp_path) as s:
        assert s.model == "fake"   # the fake's /v1/models
        out = s.run_task(requests(6), 16, 0.0, 1, ["Question:"])
    assert [c.request_id for c in out.completions] == [f"t/test/{i}" for i in range(6)]
    assert all(c.error is None and c.text == " 2 + 3 = 5 #### 5" for c in out.completions)
    assert out.metrics_error is None and out.seconds > 0
    c = out.spec_counters
    assert c is not None and (c.drafts, c.draft_tokens, c.accepted_tokens) == (24, 48, 12)
    assert tuple(c.accepted_per_pos) == (12, 0)
    m = out.spec_metrics
    assert m is not None and m.mean_acceptance_length == pytest.approx(1 + 12 / 24)
    assert m.acceptance_rate == pytest.approx(12 / 48)
    assert counter_problem(out, SPEC, "cfg/spec t") is None


def test_per_request_counters_are_each_requests_share(tmp_path):
    with session(tmp_path) as s:
        out = s.run_task(requests(3), 16, 0.0, 1, [], per_request=True)
    assert [(c.spec_drafts, c.spec_draft_tokens, c.spec_accepted_tokens) for c in out.completions] == [(4, 8, 2)] * 3
    assert [tuple(c.spec_accepted_per_pos or ()) for c in out.completions] == [(2, 0)] * 3
    assert out.spec_counters is not None and out.spec_counters.drafts == 12


def test_work_sent_by_someone_else_is_measured_between_snapshots(tmp_path):
    with session(tmp_path) as s:
        def work() -> int:
            for _ in range(2):
                httpx.post(s.base_url + "/v1/completions", json={"prompt": "x", "max_tokens": 4}).raise_for_status()
            return 42
        out, result = s.measured(work)
    assert result == 42 and out.completions == ()
    assert out.spec_counters is not None and (out.spec_counters.drafts, out.spec_counters.accepted_tokens) == (8, 4)


def test_impossible_counters_are_named_and_not_read_as_acceptance(tmp_path):
    with session(tmp_path, FAKE_METRICS="impossible") as s:
        out = s.run_task(requests(2), 16, 0.0, 1, [])
    problem = counter_problem(out, SPEC, "cfg/spec t")
    assert problem is not None and problem.startswith("cfg/spec t: impossible speculative-decoding counters: ")
    assert counter_problem(out, None, "cfg/spec t") is None   # a variant that does not speculate: nothing checked


def test_a_variant_without_speculation_has_no_counters_and_no_error(tmp_path):
    with session(tmp_path, speculative=False) as s:
        out = s.run_task(requests(2), 16, 0.0, 1, [])
    assert out.spec_counters is None and out.spec_metrics is None and out.metrics_error is None


def test_a_speculative_variant_whose_server_has_no_counters_says_so(tmp_path):
    with session(tmp_path, speculative=False) as s:
        s.speculative = True   # asked for speculation, but the server exposes no counters
        out = s.run_task(requests(1), 16, 0.0, 1, [])
    assert out.spec_counters is None
    assert out.metrics_error is not None and out.metrics_error.startswith("counter vllm:spec_decode_num_drafts ")
    assert out.metrics_error.endswith(f"missing from {s.base_url}/metrics (cfg/spec)")


def test_a_server_that_dies_during_a_task_is_died_mid_task(tmp_path):
    with session(tmp_path, concurrency=1, FAKE_MODE="crash_after:1") as s:
        out = s.run_task(requests(3), 16, 0.0, 1, [])
        assert out.completions[0].error is None and all(c.error for c in out.completions[1:])
        with pytest.raises(ServerStartError) as e:
            s.raise_if_died("t", failures=True)
    assert e.value.status == "died_mid_task" and e.value.exit_code == 1   # the fake calls os._exit(1)
    assert "cfg/spec: the vLLM server died during task t (exit code 1)" in str(e.value)
