"""OpenAI-compatible completions client: errors are values, retries are bounded and counted.

A failed request returns a :class:`CompletionResult` with ``error`` set (naming the
request id, the HTTP status or transport error and the server's message); it is
never turned into an empty completion. Only transport errors and HTTP 5xx are
retried, at most ``max_retries`` times, and the number of attempts is recorded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx


@dataclass(frozen=True)
class CompletionResult:
    """The outcome of one ``/v1/completions`` request.

    Attributes:
        request_id: the caller's id (the question id).
        text: completion text, None on error.
        token_ids: completion token ids (``return_token_ids``), None on error or when
            the server did not return them.
        finish_reason: ``stop`` / ``length`` / ..., None on error.
        stop_reason: what ended a ``stop`` completion, as vLLM reports it: the stop
            string that matched, a stop token id, or None (end-of-sequence token,
            ``length``, an error, or a server that does not report it).
        error: None on success, else a message naming the request and the failure.
        attempts: HTTP attempts made (>= 1).
        latency_s: seconds of the last attempt.
    """

    request_id: str
    text: str | None
    token_ids: tuple[int, ...] | None
    finish_reason: str | None
    error: str | None
    attempts: int
    latency_s: float
    stop_reason: str | int | None = None


class CompletionClient:
    """Synchronous, thread-safe client for one server's ``/v1/completions``.

    Args:
        base_url: ``http://HOST:PORT``.
        model: the served model name (see :meth:`served_model`).
        timeout_s: per-request timeout in seconds.
        max_retries: extra attempts on transport errors or HTTP 5xx (default 1).
    """

    def __init__(self, base_url: str, model: str, timeout_s: float = 600, max_retries: int = 1):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.max_retries = max_retries
        self._http = httpx.Client(timeout=httpx.Timeout(timeout_s, connect=10.0))

    @staticmethod
    def served_model(base_url: str, timeout_s: float = 30) -> str:
        """The first model id listed by ``GET /v1/models``.

        Raises:
            RuntimeError: naming the URL when the list cannot be read.
        """
        try:
            r = httpx.get(base_url.rstrip("/") + "/v1/models", timeout=timeout_s)
            r.raise_for_status()
            return r.json()["data"][0]["id"]
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as e:
            raise RuntimeError(f"{base_url}/v1/models: cannot read the served model: {e}") from e

    def complete(
        self,
        request_id: str,
        prompt: str,
        max_tokens: int,
        temperature: float = 0.0,
        seed: int | None = None,
        stop: list[str] | tuple[str, ...] = (),
    ) -> CompletionResult:
        """Send one completion request (``return_token_ids`` on).

        Returns:
            A :class:`CompletionResult`; never raises for HTTP or transport errors.
        """
        body = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "stop": list(stop),
            "return_token_ids": True,
        }
        if seed is not None:
            body["seed"] = seed
        attempts = 0
        last_err = ""
        latency = 0.0
        while attempts <= self.max_retries:
            attempts += 1
            t0 = time.monotonic()
            try:
                r = self._http.post(self.base_url + "/v1/completions", json=body)
                latency = time.monotonic() - t0
            except httpx.HTTPError as e:
                latency = time.monotonic() - t0
                last_err = f"request {request_id}: {type(e).__name__}: {e}"
                continue
            if r.status_code >= 500:
                last_err = f"request {request_id}: HTTP {r.status_code}: {r.text[:500]}"
                continue
            if r.status_code != 200:
                return CompletionResult(
                    request_id, None, None, None,
                    f"request {request_id}: HTTP {r.status_code}: {r.text[:500]}",
                    attempts, latency,
                )
            try:
                choice = r.json()["choices"][0]
                ids = choice.get("token_ids")
                return CompletionResult(
                    request_id,
                    choice["text"],
                    tuple(int(t) for t in ids) if ids is not None else None,
                    choice.get("finish_reason"),
                    None,
                    attempts,
                    latency,
                    stop_reason=choice.get("stop_reason"),
                )
            except (ValueError, KeyError, IndexError, TypeError) as e:
                return CompletionResult(
                    request_id, None, None, None,
                    f"request {request_id}: malformed response ({e}): {r.text[:300]}",
                    attempts, latency,
                )
        return CompletionResult(request_id, None, None, None, last_err, attempts, latency)

    def get_text(self, path: str, params: dict | None = None) -> str:
        """GET ``path`` and return the body text.

        Raises:
            httpx.HTTPError: on transport errors or a non-2xx status.
        """
        r = self._http.get(self.base_url + path, params=params, timeout=30)
        r.raise_for_status()
        return r.text

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()
