"""vLLM's client semantics for what a vLLM-form floor counts.

vLLM's ``gsm8k_eval.py`` gathers every question at once on one ``aiohttp.ClientSession``
whose connector holds ``max_concurrency`` connections and whose total timeout
(``request_timeout_seconds``) also runs while a request waits for one; a request that
fails is scored as a wrong answer, and nothing is retried. A GSM8K task with
``vllm_rules`` is sent the same way; evalrun's own way (a worker pool, each request timed
from when a worker takes it, one retry) stays for every other task.

The server is the FAKE one (tests/fake_vllm.py, ``FAKE_LATENCY``: every completion
answers after that many seconds), because a server that answers in exactly one second
cannot be had from the real engine. Figures by hand: 8 questions, 2 in flight, 1 s each,
a 2.5 s timeout. vLLM's client: the first two pairs end at 1 s and 2 s; the other four
requests are still waiting or running at 2.5 s and time out, one attempt each. evalrun's
own client: 8 requests, 1 s each from when a worker takes it, all answered.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.engine.server import EngineProcesses
from harness.engine.session import VariantSession
from harness.tasks.requests import Request

pytestmark = pytest.mark.integration  # a subprocess and sockets (tests/README.md)

FAKE = Path(__file__).resolve().parents[1] / "fake_vllm.py"


def _session(tmp_path: Path) -> VariantSession:
    argv = [str(FAKE), "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--port", "{port}"]
    return VariantSession("cfg/reference", argv, {"FAKE_MODE": "ok", "FAKE_LATENCY": "1.0"}, tmp_path / "s.log",
                          startup_timeout=30, request_timeout=2.5, max_concurrency=2, speculative=False,
                          processes=EngineProcesses())


def _requests(n: int) -> list[Request]:
    return [Request(f"gsm8k/test/{i}", f"question {i}?", "5", f"{i:016x}") for i in range(n)]


def test_vllms_client_times_the_wait_for_a_connection_and_does_not_retry(tmp_path):
    with _session(tmp_path) as s:
        vllm = s.run_task(_requests(8), 16, 0.0, 42, ["Question"], vllm_client=True)
        own = s.run_task(_requests(8), 16, 0.0, 42, ["Question"])
    ok = [c for c in vllm.completions if c.ok]
    failed = [c for c in vllm.completions if not c.ok]
    assert [c.request_id for c in ok] == [f"gsm8k/test/{i}" for i in range(4)]
    assert len(failed) == 4 and all("no response within 2.5 s" in (c.error or "") for c in failed)
    assert all(c.attempts == 1 for c in vllm.completions)
    # evalrun's own client, on the same server: every request answered
    assert all(c.ok for c in own.completions)
