"""One variant's engine session: its server, its client, and metric snapshots around each task.

A session starts the variant's vLLM server, reads the effective engine facts, and
sends task requests, producing one raw :class:`~harness.records.completions.Completion`
per request plus the speculative-decoding counter difference over the task. Judging the
completions is the task stage's work (:mod:`harness.tasks.judging`), not the engine's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import TypeVar

import httpx

from harness.engine.client import (
    CONNECT_TIMEOUT_S,
    AsyncCompletionClient,
    chat_complete,
    served_model,
    target_logprobs,
)
from harness.engine.info import EngineInfoError, SpeculativeConfig, read_engine_facts
from harness.engine.metrics import (
    MetricsError,
    counter_violations,
    has_spec_decode_counters,
    parse_engine_counters,
    parse_spec_decode_counters,
)
from harness.engine.server import EngineProcesses, ServerStartError, VllmServer
from harness.faults.plugin import FAULT_ENV, FLUSH_INTERVAL_S, REPORT_ENV
from harness.records.completions import Completion, TokenScores
from harness.records.measures import (
    EngineCountersRecord,
    EngineFactsRecord,
    SpecDecodeCountersRecord,
    SpecDecodeRecord,
)
from harness.records.spec_request import sums_mismatch
from harness.records.task_outcome import TaskOutcome
from harness.tasks.requests import Request

#: Per-request metrics: seconds between two reads of /metrics that must agree.
SETTLE_INTERVAL = 0.02
#: Per-request metrics: longest wait for the counters to stop moving, in seconds.
SETTLE_SECONDS = 2.0

T = TypeVar("T")


def run_coroutine(coro: Coroutine[object, None, T]) -> T:
    """Run ``coro`` to completion on a new event loop: uvloop's where it is installed
    (its loop costs less CPU per request than asyncio's default), else asyncio's."""
    try:
        import uvloop
    except ImportError:  # e.g. Windows, where uvloop does not build
        return asyncio.run(coro)
    return uvloop.run(coro)


def counter_problem(outcome: TaskOutcome, speculative_config: SpeculativeConfig | None, where: str) -> str | None:
    """Why a task's speculative-decoding counters cannot be read as acceptance figures
    (:func:`harness.engine.metrics.counter_violations`: impossible values for the
    variant's ``num_speculative_tokens``; or the requests' own ``metrics.speculative_decoding``
    sums differ from the counters' difference, :func:`harness.records.spec_request.sums_mismatch`),
    or None when they pass or there are none.

    Args:
        outcome: the task's outcome.
        speculative_config: the variant's requested speculative config (None: does
            not speculate, nothing checked).
        where: ``<variant id> <task>`` for the message.
    """
    if outcome.spec_counters is None or speculative_config is None:
        return None
    bad = counter_violations(outcome.spec_counters, speculative_config.get("num_speculative_tokens"))
    if bad:
        return f"{where}: impossible speculative-decoding counters: " + "; ".join(bad)
    return sums_mismatch([c.spec_decoding for c in outcome.completions], outcome.spec_counters, where)


class VariantSession:
    """Server + client + snapshots for one variant.

    Args:
        variant_id: ``<config>/<variant>`` for messages.
        argv: server command with ``{port}``.
        env: server environment additions.
        log_path: server log file.
        startup_timeout: seconds to wait for ``/health``.
        request_timeout: seconds per request.
        max_concurrency: requests in flight at once (asyncio; the pool has as many
            connections).
        speculative: whether the variant asked for speculative decoding.
        on_wait: progress callback while the server starts (elapsed seconds).
        processes: the registry the server enters (default: the process-wide one,
            :func:`harness.engine.server.processes`).

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
        processes: EngineProcesses | None = None,
    ) -> None:
        self.variant_id = variant_id
        self.server = VllmServer(
            list(argv), env, log_path, name=variant_id,
            startup_timeout=startup_timeout, on_wait=on_wait, processes=processes,
        )
        self.request_timeout = request_timeout
        self.max_concurrency = max_concurrency
        self._in_flight = self._peak_in_flight = 0
        self.speculative = speculative
        self.model: str | None = None
        self._http: httpx.Client | None = None
        self._ready_at: float | None = None

    def __enter__(self) -> "VariantSession":
        self.server.__enter__()
        self._ready_at = time.monotonic()  # acceptance by uptime: requests' send times count from here
        try:
            self.model = served_model(self.server.base_url)
            # plain HTTP to the local server (verify=False): no CA bundle read, about 70 ms a client
            self._http = httpx.Client(timeout=httpx.Timeout(30.0, connect=10.0), verify=False)
        except BaseException:
            self.server.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._http is not None:
            self._http.close()
        if exc[0] is None and self.server.env.get(REPORT_ENV) and self.server.env.get(FAULT_ENV):
            # evalrun's plugin writes its counters every FLUSH_INTERVAL_S from a thread of each
            # server process, and SIGTERM gives no last write: a fault's counts ("exercised")
            # must be on disk before the stop (measured: a 6-step task's counts lost to the race)
            time.sleep(2 * FLUSH_INTERVAL_S)
        self.server.stop()

    @property
    def base_url(self) -> str:
        """The server's root URL (``http://127.0.0.1:PORT``)."""
        return self.server.base_url

    def raise_if_died(self, task: str, failures: bool) -> None:
        """Raise when the server died during ``task``; with ``failures`` (failed requests
        or unreadable metrics) a dying server is first given 2 s to finish exiting.

        Raises:
            ServerStartError: status ``died_mid_task``, naming the variant, the task, the
                exit code and the server log.
        """
        srv = self.server
        if failures and srv.alive():
            srv.wait_exit(2.0)
        if not srv.alive():
            code = srv.returncode()
            raise ServerStartError(
                f"{self.variant_id}: the vLLM server died during task {task} (exit code {code}); log: {srv.log_path}",
                status="died_mid_task", exit_code=code, seconds=round(srv.seconds() or 0, 1),
            )

    def measured(self, work: Callable[[], T]) -> tuple[TaskOutcome, T]:
        """Run ``work`` (requests sent by someone else, e.g. lm-eval, or several
        :meth:`run_task` passes of a traffic shape) between two ``/metrics`` snapshots:
        ``(outcome without completions, work's result)``; the outcome's speculative and
        engine counters are differences over the whole of ``work``."""
        t0 = time.monotonic()
        engine_before, engine_error = self._engine_counters()
        before, metrics_error = self.counters_before()
        result = work()
        counters, metrics, metrics_error = self.counters_since(before, metrics_error)
        engine_delta, engine_error = self._engine_delta(engine_before, engine_error)
        return TaskOutcome((), counters, metrics, metrics_error, time.monotonic() - t0,
                           engine_counters=engine_delta, engine_counters_error=engine_error), result

    # ------------------------------------------------------------------ engine facts

    def engine_facts(self) -> EngineFactsRecord:
        """Read ``/server_info?config_format=json`` and ``/version``.

        Raises:
            EngineInfoError: naming the variant when either cannot be read.
        """
        try:
            info = httpx.get(
                self.server.base_url + "/server_info",
                params={"config_format": "json"},
                timeout=60,
                verify=False,
            )
            info.raise_for_status()
            body = info.json()
        except (httpx.HTTPError, ValueError) as e:
            raise EngineInfoError(f"{self.variant_id}: cannot read /server_info: {e}") from e
        try:
            doc = httpx.get(self.server.base_url + "/version", timeout=30, verify=False).json()
        except (httpx.HTTPError, ValueError):
            doc = None
        # a body that is not {"version": "<text>"} reads as no version (the runner then says so)
        version = doc.get("version") if isinstance(doc, dict) else None
        if not isinstance(version, str):
            version = None
        return read_engine_facts(body, version, self.variant_id)

    def counters_before(self) -> tuple[SpecDecodeCountersRecord | None, str | None]:
        """``(snapshot, None)`` before a piece of work, or ``(None, why)`` when
        ``/metrics`` cannot be read (see :meth:`snapshot`)."""
        try:
            return self.snapshot(), None
        except MetricsError as e:
            return None, str(e)

    def counters_since(self, before: SpecDecodeCountersRecord | None, metrics_error: str | None
                       ) -> tuple[SpecDecodeCountersRecord | None, SpecDecodeRecord | None, str | None]:
        """The counters' difference since ``before`` (from :meth:`counters_before`) and
        the acceptance figures from it: ``(counters, metrics, metrics_error)``; both
        None with the reason when ``/metrics`` could not be read before or now, or a
        speculative variant exposes no counters."""
        if metrics_error is not None:
            return None, None, metrics_error
        try:
            after = self.snapshot()
            if before is not None and after is not None:
                counters = after.minus(before)  # a counter that went backwards raises
                return counters, SpecDecodeRecord.from_counters(counters), None
        except MetricsError as e:
            return None, None, str(e)
        if self.speculative:
            return None, None, f"{self.variant_id}: no speculative-decoding counters in /metrics"
        return None, None, None

    def snapshot(self) -> SpecDecodeCountersRecord | None:
        """Current cumulative speculative-decoding counters (None for a non-speculative
        variant whose server exposes none).

        Raises:
            MetricsError: the variant speculates but a counter is missing, or
                ``/metrics`` cannot be read.
        """
        assert self._http is not None, "use VariantSession as a context manager"
        try:
            r = self._http.get(self.server.base_url + "/metrics")
            r.raise_for_status()
            text = r.text
        except httpx.HTTPError as e:
            raise MetricsError(f"{self.variant_id}: cannot read /metrics: {e}") from e
        if not self.speculative and not has_spec_decode_counters(text):
            return None
        return parse_spec_decode_counters(text, source=f"{self.server.base_url}/metrics ({self.variant_id})")

    def _settled_snapshot(self) -> SpecDecodeCountersRecord:
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
        requests: Sequence[Request],
        max_tokens: int,
        temperature: float | None,
        seed: "int | None | Callable[[str], int | None]",
        stop: Sequence[str],
        on_done: Callable[[Completion], None] | None = None,
        per_request: bool = False,
        chat: bool = False,
        logprobs: int | None = None,
        max_concurrency: int | None = None,
        vllm_client: bool = False,
    ) -> TaskOutcome:
        """Send every request and diff the counters; nothing is judged here.

        Requests go out on one asyncio event loop (:class:`AsyncCompletionClient`),
        at most ``max_concurrency`` in flight (as many workers, each sending the next
        request in order when its last one is done; the connection pool has as many
        connections, so none waits for one).

        Args:
            requests: the task's requests (``question_id``, ``prompt``).
            max_tokens, temperature, stop: sampling settings of every request.
            seed: the seed every request sends, or a function of the question id giving
                each request's own (None: no seed sent); kept on each completion.
            on_done: called with each completion as it arrives (progress).
            per_request: send the requests one at a time (no concurrency) and, for a
                variant exposing speculative-decoding counters, read ``/metrics``
                before and after each one: the difference is stored on the completion
                (``spec_drafts``, ``spec_draft_tokens``, ``spec_accepted_tokens``,
                ``spec_accepted_per_pos``). vLLM's counters are cumulative per
                engine, so this attribution is only possible for sequential requests.
                After each response the counters are read until two reads 20 ms
                apart agree (at most :data:`SETTLE_SECONDS`), because a request that
                ends on a stop string may run one more engine step before its abort
                lands.
            chat: send each prompt as one user message to ``/v1/chat/completions``
                (:func:`harness.engine.client.chat_complete`, with ``stop``),
                as vLLM's ``gsm8k_eval.py`` does with ``use_chat_completions``.
            logprobs: ask every request for its top-``logprobs`` log-probabilities
                per generated token (the output-match reference only; see
                :meth:`AsyncCompletionClient.complete`); None asks for none.
            max_concurrency: requests in flight for this call (a traffic shape's
                concurrency sweep); None: the session's ``max_concurrency``.
            vllm_client: send as vLLM's ``gsm8k_eval.py`` sends (a task with
                ``vllm_rules``): every request at once on one session whose pool has
                ``max_concurrency`` connections, each request's total timeout counted from
                the start (its wait for a pooled connection included), and no retry.

        A request's own ``max_tokens`` (:attr:`Request.max_tokens`) overrides the
        task's.

        Returns:
            :class:`TaskOutcome` with one raw :class:`Completion` per request, in
            request order (failed requests carry ``error``), and ``peak_in_flight``,
            the most requests that were in flight at once (the client's own count);
            the task stage judges them (:func:`harness.tasks.judging.judge_completions`).
        """
        assert self.model is not None, "use VariantSession as a context manager"
        t0 = time.monotonic()
        engine_before, engine_error = self._engine_counters()
        before, metrics_error = self.counters_before()
        self._in_flight = self._peak_in_flight = 0
        completions, metrics_error = run_coroutine(self._send_all(
            requests, max_tokens, temperature, seed, stop, on_done, per_request, before, metrics_error, chat,
            logprobs, max_concurrency, vllm_client))
        counters, metrics, metrics_error = self.counters_since(before, metrics_error)
        engine_delta, engine_error = self._engine_delta(engine_before, engine_error)
        return TaskOutcome(completions, counters, metrics, metrics_error, time.monotonic() - t0,
                           engine_counters=engine_delta, engine_counters_error=engine_error,
                           peak_in_flight=self._peak_in_flight)

    def _engine_delta(self, before: EngineCountersRecord | None, error: str | None
                      ) -> tuple[EngineCountersRecord | None, str | None]:
        """The engine counters' difference since ``before`` (from :meth:`_engine_counters`),
        or ``(None, why)``: ``before`` was not read (``error``), they cannot be read now, or
        one went down (a restarted server)."""
        if before is None:
            return None, error
        after, error = self._engine_counters()
        try:
            return (after.minus(before) if after is not None else None), error
        except MetricsError as e:
            return None, f"{self.variant_id}: {e}"

    def _engine_counters(self) -> tuple[EngineCountersRecord | None, str | None]:
        """vLLM's engine counters now (prompt / generation tokens, preemptions, prefix
        cache), or ``(None, why)`` when ``/metrics`` cannot be read or parsed."""
        assert self._http is not None, "use VariantSession as a context manager"
        source = f"{self.server.base_url}/metrics ({self.variant_id})"
        try:
            r = self._http.get(self.server.base_url + "/metrics")
            r.raise_for_status()
            return parse_engine_counters(r.text, source), None
        except httpx.HTTPError as e:
            return None, f"{self.variant_id}: cannot read /metrics: {e}"
        except MetricsError as e:
            return None, str(e)

    async def _send_all(
        self, requests: Sequence[Request], max_tokens: int, temperature: float | None,
        seed: "int | None | Callable[[str], int | None]", stop: Sequence[str],
        on_done: Callable[[Completion], None] | None, per_request: bool,
        before: SpecDecodeCountersRecord | None, metrics_error: str | None, chat: bool = False,
        logprobs: int | None = None, max_concurrency: int | None = None, vllm_client: bool = False,
    ) -> tuple[tuple[Completion, ...], str | None]:
        """Send the requests on this event loop; return completions in request order
        and the (possibly updated) metrics error (``vllm_client``: see :meth:`run_task`)."""
        if self.model is None:
            raise RuntimeError("use VariantSession as a context manager (no served model name yet)")
        results: list[Completion | None] = [None] * len(requests)
        width = 1 if per_request else (max_concurrency or self.max_concurrency)
        # vLLM's client: no retry, and the total timeout alone bounds the wait for a connection
        async with AsyncCompletionClient(
            self.server.base_url, self.model, timeout_s=self.request_timeout, max_connections=width,
            max_retries=0 if vllm_client else 1, connect_timeout_s=None if vllm_client else CONNECT_TIMEOUT_S,
        ) as client:
            def seed_of(r: Request) -> int | None:
                return seed(r.question_id) if callable(seed) else seed

            if chat:  # vLLM's chat path: one user message, the same stop strings

                # no logprobs here: divergences fall back to the rerun rule
                async def send_one(r: Request) -> Completion:
                    s = seed_of(r)
                    c = await chat_complete(client, r.question_id, r.prompt, r.max_tokens or max_tokens,
                                            temperature, s, stop)
                    return dataclasses.replace(c, seed=s)
            else:
                async def send_one(r: Request) -> Completion:
                    s = seed_of(r)
                    prompt = r.prompt if r.prompt_token_ids is None else r.prompt_token_ids
                    c = await client.complete(r.question_id, prompt, r.max_tokens or max_tokens, temperature, s, stop,
                                              logprobs)
                    return dataclasses.replace(c, seed=s)

            async def send(r: Request) -> Completion:
                self._in_flight += 1
                self._peak_in_flight = max(self._peak_in_flight, self._in_flight)
                sent = time.monotonic()
                try:
                    c = await send_one(r)
                finally:
                    self._in_flight -= 1
                if c.spec_decoding is not None and self._ready_at is not None:  # only beside vLLM's own counts
                    c = dataclasses.replace(c, sent_after_start_s=round(sent - self._ready_at, 3))
                return c
            if per_request:
                prev = before if metrics_error is None else None
                for i, r in enumerate(requests):
                    c = await send(r)
                    if c.spec_decoding is not None:  # the response's own counts win; /metrics checks their sum
                        prev = None if metrics_error is not None else self._settled_snapshot()
                    elif prev is not None:
                        try:
                            # a blocking read is fine here: nothing else is in flight
                            now = self._settled_snapshot()
                            d = now.minus(prev)
                            c = dataclasses.replace(
                                c, spec_drafts=d.drafts, spec_draft_tokens=d.draft_tokens,
                                spec_accepted_tokens=d.accepted_tokens,
                                spec_accepted_per_pos=tuple(d.accepted_per_pos),
                            )
                            prev = now
                        except MetricsError as e:
                            metrics_error, prev = f"per-request metrics stopped at {r.question_id}: {e}", None
                    results[i] = c
                    if on_done:
                        on_done(c)
            else:
                # ``width`` workers take the requests in order from one iterator: at most
                # ``width`` in flight, a freed slot refilled at once, and one task per
                # worker instead of one per request behind a semaphore (less CPU per request)
                todo = iter(enumerate(requests))

                async def worker() -> None:
                    for i, r in todo:
                        c = await send(r)
                        results[i] = c
                        if on_done:
                            on_done(c)

                # vLLM's client gathers every question at once: the pool holds back all but
                # ``width``, and each one's timeout runs while it waits there
                workers = len(requests) if vllm_client else min(width, len(requests))
                await asyncio.gather(*(worker() for _ in range(workers)))
        return tuple(results), metrics_error  # type: ignore[arg-type]

    def score_completions(self, items: Sequence[tuple[str, str, Sequence[int]]],
                          chat: bool = False) -> list[TokenScores | str]:
        """The served model's log-likelihood of each ``(request id, prompt, completion
        token ids)`` (:func:`harness.engine.client.target_logprobs`), at most
        ``max_concurrency`` in flight; one :class:`TokenScores` or error string per
        item, in order; ``chat``: the prompts were sent as one user message. Used on a
        non-speculative server only (the sampled verdict)."""
        if self.model is None:
            raise RuntimeError("use VariantSession as a context manager (no served model name yet)")
        model = self.model

        async def all_items() -> list[TokenScores | str]:
            out: list[TokenScores | str] = ["not scored"] * len(items)
            async with AsyncCompletionClient(self.server.base_url, model, timeout_s=self.request_timeout,
                                             max_connections=self.max_concurrency) as client:
                todo = iter(enumerate(items))

                async def worker() -> None:
                    for i, (rid, prompt, ids) in todo:
                        out[i] = await target_logprobs(client, rid, prompt, ids, chat)

                await asyncio.gather(*(worker() for _ in range(max(1, min(self.max_concurrency, len(items))))))
            return out

        return run_coroutine(all_items())
