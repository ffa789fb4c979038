"""Carrying out the HTTP calls of `served_window`'s probe flows (sync and async), with httpx."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

import httpx

from ..exceptions import UpstreamError
from ._http import check_allowed, decode_reply, transport_failure
from .served_calls import Answer, Call

__all__ = ["run_async", "run_sync"]


def _headers(api_key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


def _answer(response: httpx.Response, url: str) -> Answer:
    try:
        data = decode_reply(response.content, url, "a probe answer")
    except UpstreamError:
        data = None
    return Answer(response.status_code, data, response.text)


class _Unreachable(Exception):
    def __init__(self, error: UpstreamError) -> None:
        super().__init__(str(error))
        self.error = error


def _send_sync(client: httpx.Client, call: Call, headers: Mapping[str, str], timeout: float) -> Answer:
    check_allowed(call.url)
    try:
        response = client.request(call.method, call.url, json=call.body, headers=headers, timeout=timeout)
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise _Unreachable(transport_failure(exc, call.url)) from exc
    except httpx.TransportError:
        return Answer(None, None)
    return _answer(response, call.url)


async def _send_async(client: httpx.AsyncClient, call: Call, headers: Mapping[str, str], timeout: float) -> Answer:
    check_allowed(call.url)
    try:
        response = await client.request(call.method, call.url, json=call.body, headers=headers, timeout=timeout)
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise _Unreachable(transport_failure(exc, call.url)) from exc
    except httpx.TransportError:
        return Answer(None, None)
    return _answer(response, call.url)


def run_sync(
    flow: Generator[Call, Answer, Any], client: httpx.Client | None, api_key: str | None, timeout: float
) -> Any:
    owned = client is None
    http = client if client is not None else httpx.Client(trust_env=False)
    try:
        call = next(flow)
        while True:
            call = flow.send(_send_sync(http, call, _headers(api_key), timeout))
    except StopIteration as stop:
        return stop.value
    except _Unreachable as exc:
        raise exc.error from exc.__cause__
    finally:
        if owned:
            http.close()


async def run_async(
    flow: Generator[Call, Answer, Any], client: httpx.AsyncClient | None, api_key: str | None, timeout: float
) -> Any:
    owned = client is None
    http = client if client is not None else httpx.AsyncClient(trust_env=False)
    try:
        call = next(flow)
        while True:
            call = flow.send(await _send_async(http, call, _headers(api_key), timeout))
    except StopIteration as stop:
        return stop.value
    except _Unreachable as exc:
        raise exc.error from exc.__cause__
    finally:
        if owned:
            await http.aclose()
