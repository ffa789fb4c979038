"""HTTP plumbing shared by the provider clients: sending with retries, SSE decoding, error mapping.

The retry loop exists twice (sync and async) because sleeping and sending differ; every decision
in it (what is retryable, how long to wait, which error to raise) is made by pure functions here
and in `RetryPolicy`, so both loops behave the same.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Self, TypeVar

import anyio
import httpx

from .._json import MAX_DEPTH, BadJSON, loads
from .._version import __version__
from ..exceptions import ContextOverflowError, UpstreamError, UsageError
from .base import RetryPolicy
from .errors import blames_request, classify_error, transport_error

logger = logging.getLogger("contextwarden.llm")

DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=10.0)
"""Generations can take minutes; connecting should not."""

USER_AGENT = f"contextwarden/{__version__}"

_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0"})


def is_local_url(url: str | httpx.URL) -> bool:
    """Whether a URL points at this machine (where a test server may run)."""
    host = httpx.URL(str(url)).host.lower()
    return host in _LOCAL_HOSTS or host.endswith(".localhost") or host.startswith("127.")


def check_allowed(url: str) -> None:
    """Refuse a request to a remote server while ``ALLOW_MODEL_REQUESTS`` is off.

    Raises:
        UsageError: The flag is off and the URL is not on this machine.
    """
    # Read at call time, so flipping the flag (in a test's conftest) takes effect immediately.
    from contextwarden import llm

    if not llm.ALLOW_MODEL_REQUESTS and not is_local_url(url):
        raise UsageError(
            f"Refusing to send a model request to {url}: `contextwarden.llm.ALLOW_MODEL_REQUESTS` is False"
            " (tests set it to stop accidental paid calls); point the client at a local server such as"
            " `contextwarden.testing.ScriptedOpenAIServer`, use `TestModel`, or set the flag to True."
        )


def transport_failure(exc: httpx.TransportError, url: str, *, stream: bool = False) -> UpstreamError:
    """The library error for a request that got no (complete) HTTP reply.

    ``stream``: the failure cut a streamed reply (a disconnect is then a `StreamInterrupted`).
    """
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return transport_error(url, "connect", detail)
    if isinstance(exc, httpx.TimeoutException):
        timeout = exc.request.extensions.get("timeout", {}).get("read") if _has_request(exc) else None
        return transport_error(url, "timeout", detail or "timed out", timeout=timeout)
    return transport_error(url, "disconnect", detail, stream=stream)


def _has_request(exc: httpx.TransportError) -> bool:
    try:
        exc.request  # noqa: B018 - the property raises when the error has no request attached
    except RuntimeError:
        return False
    return True


def _is_retryable_transport(exc: httpx.TransportError) -> bool:
    # A malformed URL or a protocol misuse on our side fails again; network trouble may not.
    return isinstance(exc, httpx.NetworkError | httpx.TimeoutException | httpx.RemoteProtocolError)


@dataclass(kw_only=True)
class HTTPConfig:
    """The connection settings every HTTP model client takes."""

    base_url: str
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float | httpx.Timeout | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    @classmethod
    def build(
        cls,
        *,
        base_url: str,
        headers: Mapping[str, str] | None,
        timeout: float | httpx.Timeout | None,
        retry: RetryPolicy | None,
        max_retries: int | None,
    ) -> HTTPConfig:
        policy = retry or RetryPolicy()
        if max_retries is not None:
            policy = RetryPolicy(
                max_retries=max_retries,
                initial_delay=policy.initial_delay,
                max_delay=policy.max_delay,
                jitter=policy.jitter,
                max_retry_after=policy.max_retry_after,
            )
        return cls(base_url=base_url.rstrip("/"), headers=dict(headers or {}), timeout=timeout, retry=policy)

    def request_kwargs(self) -> dict[str, Any]:
        """Per-request httpx options (a given timeout overrides the client's own)."""
        return {} if self.timeout is None else {"timeout": self.timeout}

    def new_timeout(self) -> httpx.Timeout:
        """The timeout of a client this model creates for itself."""
        if self.timeout is None:
            return DEFAULT_TIMEOUT
        return self.timeout if isinstance(self.timeout, httpx.Timeout) else httpx.Timeout(self.timeout)


class _Retry(Exception):
    """Internal: the attempt failed with ``error`` and may be retried after ``wait`` seconds."""

    def __init__(self, error: UpstreamError, wait: float | None) -> None:
        super().__init__(str(error))
        self.error = error
        self.wait = wait


def _decide_status(response: httpx.Response, url: str, retry: RetryPolicy, attempt: int) -> _Retry:
    error = classify_error(response.status_code, response.content, url=url)
    wait = None
    if (
        not isinstance(error, ContextOverflowError)
        and RetryPolicy.is_retryable_status(response.status_code)
        and not blames_request(response.status_code, response.content)
    ):
        wait = retry.wait_before(attempt + 1, response.headers)
    return _Retry(error, wait)


def _decide_transport(
    exc: httpx.TransportError, url: str, retry: RetryPolicy, attempt: int, *, stream: bool = False
) -> _Retry:
    # A streamed request the server drops before answering is a `StreamInterrupted` like an empty
    # stream: some servers (llama-cpp-python's) reset the connection on a prompt too long for them.
    wait = retry.wait_before(attempt + 1) if _is_retryable_transport(exc) else None
    return _Retry(transport_failure(exc, url, stream=stream), wait)


def _log_retry(url: str, decision: _Retry, attempt: int, retry: RetryPolicy) -> None:
    logger.warning(
        "model request to %s failed (%s); retry %d/%d in %.2fs",
        url,
        decision.error.status_code or "no reply",
        attempt,
        retry.max_retries,
        decision.wait or 0.0,
    )


def send_sync(
    client: httpx.Client,
    config: HTTPConfig,
    url: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    *,
    stream: bool,
) -> httpx.Response:
    """POST ``body`` as JSON with retries; return a successful response (open, when ``stream``).

    Raises:
        ContextOverflowError: The prompt does not fit the model's window.
        UpstreamError: No success after the retries.
    """
    check_allowed(url)
    attempt = 0
    while True:
        try:
            request = client.build_request("POST", url, json=body, headers=headers, **config.request_kwargs())
            try:
                response = client.send(request, stream=True)
            except httpx.TransportError as exc:
                raise _decide_transport(exc, url, config.retry, attempt, stream=stream) from exc
            try:
                if response.status_code >= 400 or not stream:
                    response.read()
            except httpx.TransportError as exc:
                response.close()
                raise _decide_transport(exc, url, config.retry, attempt, stream=stream) from exc
            if response.status_code >= 400:
                response.close()
                raise _decide_status(response, url, config.retry, attempt)
            return response
        except _Retry as decision:
            if decision.wait is None:
                raise decision.error from decision.__cause__
            attempt += 1
            _log_retry(url, decision, attempt, config.retry)
            time.sleep(decision.wait)


async def send_async(
    client: httpx.AsyncClient,
    config: HTTPConfig,
    url: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    *,
    stream: bool,
) -> httpx.Response:
    """The async twin of `send_sync`."""
    check_allowed(url)
    attempt = 0
    while True:
        try:
            request = client.build_request("POST", url, json=body, headers=headers, **config.request_kwargs())
            try:
                response = await client.send(request, stream=True)
            except httpx.TransportError as exc:
                raise _decide_transport(exc, url, config.retry, attempt, stream=stream) from exc
            try:
                if response.status_code >= 400 or not stream:
                    await response.aread()
            except httpx.TransportError as exc:
                await response.aclose()
                raise _decide_transport(exc, url, config.retry, attempt, stream=stream) from exc
            if response.status_code >= 400:
                await response.aclose()
                raise _decide_status(response, url, config.retry, attempt)
            return response
        except _Retry as decision:
            if decision.wait is None:
                raise decision.error from decision.__cause__
            attempt += 1
            _log_retry(url, decision, attempt, config.retry)
            await anyio.sleep(decision.wait)


REPLY_MAX_DEPTH = MAX_DEPTH + 16
"""Deepest nesting accepted in a reply: the bound on tool arguments plus room for the envelope."""


def decode_reply(text: str | bytes, url: str, what: str) -> Any:
    """A reply body or stream event decoded with bounded depth; ``None`` when it is not JSON.

    Raises:
        UpstreamError: It nests deeper than `REPLY_MAX_DEPTH` or holds a number Python cannot read.
    """
    try:
        return loads(text, max_depth=REPLY_MAX_DEPTH)
    except BadJSON as exc:
        if exc.problem.startswith("is not valid JSON"):
            return None
        raise UpstreamError(
            f"{url} sent {what} that {exc.problem}; no model reply looks like this: check the server (and any"
            " proxy in front of it).",
            url=url,
            status_code=200,
        ) from None


def json_body(response: httpx.Response, url: str) -> dict[str, Any]:
    """The decoded JSON object of a successful reply.

    Raises:
        UpstreamError: The body is not a JSON object (a proxy's HTML page, usually), or nests
            deeper than `REPLY_MAX_DEPTH`.
    """
    data = decode_reply(response.content, url, f"an HTTP {response.status_code} body")
    if not isinstance(data, dict):
        raise UpstreamError(
            f"{url} answered HTTP {response.status_code} with a body that is not a JSON object "
            f"({response.text[:200]!r}); check that `base_url` points at the API and not at a web page or proxy.",
            url=url,
            status_code=response.status_code,
        )
    return data


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One server-sent event."""

    event: str | None
    data: str


class SSEDecoder:
    """Turns the lines of a ``text/event-stream`` body into events (the parts the APIs use)."""

    def __init__(self) -> None:
        self._event: str | None = None
        self._data: list[str] = []

    def feed(self, line: str) -> SSEEvent | None:
        """Take one line (without its newline); return an event when a blank line completes one."""
        if not line:
            if not self._data and self._event is None:
                return None
            event = SSEEvent(self._event, "\n".join(self._data))
            self._event, self._data = None, []
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None

    def flush(self) -> SSEEvent | None:
        """The last event when the body ended without a blank line."""
        return self.feed("")


def iter_sse_sync(response: httpx.Response, url: str) -> Generator[SSEEvent, None, None]:
    """The events of a streamed response; closes it at the end.

    Raises:
        UpstreamError: The connection broke or timed out mid-stream.
    """
    decoder = SSEDecoder()
    try:
        for line in response.iter_lines():
            event = decoder.feed(line)
            if event is not None:
                yield event
        last = decoder.flush()
        if last is not None:
            yield last
    except httpx.TransportError as exc:
        raise transport_failure(exc, url, stream=True) from exc
    finally:
        response.close()


async def iter_sse_async(response: httpx.Response, url: str) -> AsyncGenerator[SSEEvent, None]:
    """The async twin of `iter_sse_sync`."""
    decoder = SSEDecoder()
    try:
        async for line in response.aiter_lines():
            event = decoder.feed(line)
            if event is not None:
                yield event
        last = decoder.flush()
        if last is not None:
            yield last
    except httpx.TransportError as exc:
        raise transport_failure(exc, url, stream=True) from exc
    finally:
        await response.aclose()


def incomplete_stream(url: str, *, empty: bool = False) -> UpstreamError:
    """The error (a `StreamInterrupted`) for a stream that ended without the provider's end marker.

    ``empty``: the server sent no event at all (some servers answer a prompt too long for their
    window this way).
    """
    detail = "the stream ended before any event" if empty else "the stream ended before its end marker"
    return transport_error(url, "disconnect", detail, stream=True)


def base_headers(extra: Mapping[str, str]) -> dict[str, str]:
    """Headers every request carries, the caller's own last so they can override ours."""
    return {"user-agent": USER_AGENT, "accept": "application/json", **extra}


ClientT = TypeVar("ClientT", bound=httpx.Client | httpx.AsyncClient)


class HTTPModelBase(Generic[ClientT]):
    """Connection settings and client ownership shared by the HTTP model clients.

    A client passed in is used as is and left open on ``close()`` (its owner closes it); a client
    the model creates itself is closed with the model.
    """

    def __init__(
        self,
        *,
        base_url: str,
        headers: Mapping[str, str] | None,
        timeout: float | httpx.Timeout | None,
        retry: RetryPolicy | None,
        max_retries: int | None,
        http_client: ClientT | None,
    ) -> None:
        self._config = HTTPConfig.build(
            base_url=base_url, headers=headers, timeout=timeout, retry=retry, max_retries=max_retries
        )
        self._owns_client = http_client is None
        self._client: ClientT = http_client if http_client is not None else self._new_client(self._config.new_timeout())

    def _new_client(self, timeout: httpx.Timeout) -> ClientT:
        raise NotImplementedError(f"{type(self).__name__} does not create its own HTTP client")

    @property
    def base_url(self) -> str:
        """The API's base URL, without a trailing slash."""
        return self._config.base_url

    @property
    def retry(self) -> RetryPolicy:
        """The retry policy in use."""
        return self._config.retry


class SyncLifecycle:
    """``close()`` and ``with`` support for the synchronous clients."""

    _client: httpx.Client
    _owns_client: bool

    def _new_client(self, timeout: httpx.Timeout) -> httpx.Client:
        # trust_env=False: the library reads no environment variables (proxies included); pass
        # your own `http_client` to use a proxy or custom certificates.
        return httpx.Client(timeout=timeout, trust_env=False)

    def close(self) -> None:
        """Close the HTTP client if this model created it."""
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncLifecycle:
    """``aclose()`` and ``async with`` support for the asynchronous clients."""

    _client: httpx.AsyncClient
    _owns_client: bool

    def _new_client(self, timeout: httpx.Timeout) -> httpx.AsyncClient:
        # See SyncLifecycle._new_client.
        return httpx.AsyncClient(timeout=timeout, trust_env=False)

    async def aclose(self) -> None:
        """Close the HTTP client if this model created it."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
