"""One variant's engine session: its server, its client, and metric snapshots around each task.

A session starts the variant's vLLM server, reads the effective engine facts, and
runs task requests, producing one immutable :class:`~harness.records.samples.Sample` per
request plus the speculative-decoding counter difference over the task.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import httpx

from harness.engine.client import CompletionClient
from harness.engine.info import EngineFacts, EngineInfoError
from harness.engine.metrics import (
    MetricsError,
    SpecDecodeCounters,
    SpecDecodeMetrics,
    has_spec_decode_counters,
    parse_spec_decode_counters,
)
from harness.records.samples import Sample
from harness.engine.server import VllmServer
from harness.tasks.gsm8k import Request, judge

#: Per-request metrics: seconds between two reads of /metrics that must agree.
SETTLE_INTERVAL = 0.02
#: Per-request metrics: longest wait for the counters to stop moving, in seconds.
SETTLE_SECONDS = 2.0


@dataclass(frozen=True)
class TaskOutcome:
    """What one task produced on one variant.

    Attributes:
        samples: one per request, in request order.
        spec_counters: counter difference over the task (None when the variant does
            not speculate).
        spec_metrics: ratios derived from ``spec_counters`` (None likewise).
        metrics_error: why speculative metrics could not be read, else None.
        seconds: wall-clock seconds of the task.
    """

    samples: tuple[Sample, ...]
    spec_counters: SpecDecodeCounters | None
    spec_metrics: SpecDecodeMetrics | None
    metrics_error: str | None
    seconds: float


class VariantSession:
    """Server + client + snapshots for one variant.

    Args:
        variant_id: ``<config>/<variant>`` for messages.
        argv: server command with ``{port}``.
        env: server environment additions.
        log_path: server log file.
        startup_timeout: seconds to wait for ``/health``.
        request_timeout: seconds per request.
        max_concurrency: requests in flight at once.
        speculative: whether the variant asked for speculative decoding.
        on_wait: progress callback while the server starts (elapsed seconds).

    Raises:
        harness.engine.server.ServerStartError: from ``__enter__``.
    """

    def __init__(
        self,
        variant_id: str,
        argv: Sequence[str],
        env: dict[str, str],
        log_path: Path,
        startup_timeout: float,
        request_timeout: float,
        max_concurrency: int,
        speculative: bool,
        on_wait: Callable[[float], None] | None = None,
    ) -> None:
        self.variant_id = variant_id
        self.server = VllmServer(
            list(argv), env, log_path, name=variant_id,
            startup_timeout=startup_timeout, on_wait=on_wait,
        )
        self.request_timeout = request_timeout
        self.max_concurrency = max_concurrency
        self.speculative = speculative
        self.client: CompletionClient | None = None

    def __enter__(self) -> "VariantSession":
        self.server.__enter__()
        try:
            model = CompletionClient.served_model(self.server.base_url)
            self.client = CompletionClient(self.server.base_url, model, timeout_s=self.request_timeout)
        except BaseException:
            self.server.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.client:
            self.client.close()
        self.server.stop()

    # ------------------------------------------------------------------ engine facts

    def engine_facts(self) -> EngineFacts:
        """Read ``/server_info?config_format=json`` and ``/version``.

        Raises:
            EngineInfoError: naming the variant when either cannot be read.
        """
        assert self.client is not None
        try:
            info = httpx.get(
                self.server.base_url + "/server_info",
                params={"config_format": "json"},
                timeout=60,
            )
            info.raise_for_status()
            body = info.json()
        except (httpx.HTTPError, ValueError) as e:
            raise EngineInfoError(f"{self.variant_id}: cannot read /server_info: {e}") from e
        try:
            version = httpx.get(self.server.base_url + "/version", timeout=30).json().get("version")
        except (httpx.HTTPError, ValueError):
            version = None
        return EngineFacts.from_server_info(body, version, self.variant_id)

    def snapshot(self) -> SpecDecodeCounters | None:
        """Current cumulative speculative-decoding counters (None for a non-speculative
        variant whose server exposes none).

        Raises:
            MetricsError: the variant speculates but a counter is missing, or
                ``/metrics`` cannot be read.
        """
        assert self.client is not None
        try:
            text = self.client.get_text("/metrics")
        except httpx.HTTPError as e:
            raise MetricsError(f"{self.variant_id}: cannot read /metrics: {e}") from e
        if not self.speculative and not has_spec_decode_counters(text):
            return None
        return parse_spec_decode_counters(text, source=f"{self.server.base_url}/metrics ({self.variant_id})")

    def _settled_snapshot(self, prev: SpecDecodeCounters) -> SpecDecodeCounters:
        """A snapshot taken once the counters stop moving: read until two reads
        :data:`SETTLE_INTERVAL` apart are equal, or :data:`SETTLE_SECONDS` pass.

        Raises:
            MetricsError: ``/metrics`` cannot be read or lost its counters.
        """
        deadline = time.monotonic() + SETTLE_SECONDS
        cur = self.snapshot()
        while True:
            if cur is None:
                raise MetricsError(f"{self.variant_id}: speculative-decoding counters disappeared from /metrics")
            if time.monotonic() >= deadline:
                return cur
            time.sleep(SETTLE_INTERVAL)
            nxt = self.snapshot()
            if nxt == cur:
                return cur
            cur = nxt

    # ------------------------------------------------------------------ tasks

    def run_task(
        self,
        config: str,
        variant: str,
        task: str,
        requests: Sequence[Request],
        max_tokens: int,
        temperature: float,
        seed: int,
        stop: Sequence[str],
        on_done: Callable[[Sample], None] | None = None,
        per_request: bool = False,
    ) -> TaskOutcome:
        """Send every request, judge the completions, diff the counters.

        Args:
            per_request: send the requests one at a time (no concurrency) and, for a
                variant exposing speculative-decoding counters, read ``/metrics``
                before and after each one: the difference is stored on the sample
                (``spec_drafts``, ``spec_draft_tokens``, ``spec_accepted_tokens``,
                ``spec_accepted_per_pos``). vLLM's counters are cumulative per
                engine, so this attribution is only possible for sequential requests.
                After each response the counters are read until two reads 20 ms
                apart agree (at most :data:`SETTLE_SECONDS`), because a request that
                ends on a stop string may run one more engine step before its abort
                lands.

        Returns:
            :class:`TaskOutcome` with one sample per request, in request order.
            Failed requests become samples with ``error`` set (never scored).
        """
        assert self.client is not None
        t0 = time.monotonic()
        metrics_error = None
        try:
            before = self.snapshot()
        except MetricsError as e:
            before, metrics_error = None, str(e)
        results: dict[int, Sample] = {}

        def one(i: int, r: Request) -> tuple[int, Sample]:
            res = self.client.complete(
                r.question_id, r.prompt, max_tokens=max_tokens,
                temperature=temperature, seed=seed, stop=stop,
            )
            if res.error is not None:
                s = Sample(
                    config=config, variant=variant, task=task, question_id=r.question_id,
                    prompt_hash=r.prompt_hash, gold=r.gold, error=res.error,
                    attempts=res.attempts, latency_s=round(res.latency_s, 4),
                )
            else:
                answers, correct = judge(res.text or "", r.gold)
                s = Sample(
                    config=config, variant=variant, task=task, question_id=r.question_id,
                    prompt_hash=r.prompt_hash, gold=r.gold, completion=res.text,
                    token_ids=res.token_ids, finish_reason=res.finish_reason,
                    stop_reason=res.stop_reason,
                    answers=answers, correct=correct, attempts=res.attempts,
                    latency_s=round(res.latency_s, 4),
                )
            return i, s

        if per_request:
            prev = before if metrics_error is None else None
            for i, r in enumerate(requests):
                _, s = one(i, r)
                if prev is not None:
                    try:
                        now = self._settled_snapshot(prev)
                        d = now.minus(prev)
                        s = dataclasses.replace(
                            s, spec_drafts=d.drafts, spec_draft_tokens=d.draft_tokens,
                            spec_accepted_tokens=d.accepted_tokens,
                            spec_accepted_per_pos=tuple(d.accepted_per_pos),
                        )
                        prev = now
                    except MetricsError as e:
                        metrics_error, prev = f"per-request metrics stopped at {r.question_id}: {e}", None
                results[i] = s
                if on_done:
                    on_done(s)
        else:
            with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
                futs = [pool.submit(one, i, r) for i, r in enumerate(requests)]
                for f in as_completed(futs):
                    i, s = f.result()
                    results[i] = s
                    if on_done:
                        on_done(s)
        samples = tuple(results[i] for i in range(len(requests)))

        counters = metrics = None
        if metrics_error is None:
            try:
                after = self.snapshot()
                if before is not None and after is not None:
                    counters = after.minus(before)
                    metrics = SpecDecodeMetrics.from_counters(counters)
                elif self.speculative:
                    metrics_error = f"{self.variant_id}: no speculative-decoding counters in /metrics"
            except MetricsError as e:
                metrics_error = str(e)
        return TaskOutcome(samples, counters, metrics, metrics_error, time.monotonic() - t0)
