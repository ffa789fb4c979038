"""Compressed request bodies: decoded within the body bound; bombs get 413, unknown codings 415 (per dialect)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import zlib
from collections.abc import Callable
from typing import Any

import pytest
import zstandard

from contextwarden.service.encodings import decode_body
from contextwarden.service.errors import ServiceError
from contextwarden.settings import Settings
from contextwarden.testing import ScriptedOpenAIServer

from ._stored import stored
from .conftest import MODEL, SYSTEM, Running, chat, make_settings, user

LIMIT = 200_000
"""The test service's `max_body_bytes`."""


def _raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


ENCODERS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,
    "zstd": lambda data: zstandard.ZstdCompressor().compress(data),
}


@pytest.fixture
def small_service(
    service_factory: Callable[[Settings], Running], upstream: ScriptedOpenAIServer, sqlite_url: str
) -> Running:
    return service_factory(make_settings(sqlite_url, upstream.base_url, max_body_bytes=LIMIT))


def _post(service: Running, path: str, body: bytes, encoding: str, session: str = "enc") -> Any:
    headers = {"content-type": "application/json", "content-encoding": encoding, "x-session-id": session}
    return service.client.post(path, content=body, headers=headers)


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "zstd"])
def test_a_compressed_request_is_read_and_managed(
    small_service: Running, upstream: ScriptedOpenAIServer, encoding: str
) -> None:
    body = chat(SYSTEM, user("compressed question"))
    r = _post(small_service, "/v1/chat/completions", ENCODERS[encoding](json.dumps(body).encode()), encoding)
    assert r.status_code == 200, r.text
    assert upstream.requests[-1]["messages"][-1] == user("compressed question")
    assert "content-encoding" not in {k.lower() for k in upstream.received[-1].headers}
    assert stored(small_service, "enc")[-2:] == [("user", "compressed question"), ("assistant", "ok")]


def test_raw_deflate_and_stacked_codings_are_read(small_service: Running, upstream: ScriptedOpenAIServer) -> None:
    data = json.dumps(chat(user("raw deflate"))).encode()
    assert _post(small_service, "/v1/chat/completions", _raw_deflate(data), "deflate", "a").status_code == 200
    stacked = zstandard.ZstdCompressor().compress(gzip.compress(data))  # gzip applied first, then zstd
    r = _post(small_service, "/v1/chat/completions", stacked, "gzip, zstd", "b")
    assert r.status_code == 200, r.text
    assert upstream.requests[-1]["messages"] == [user("raw deflate")]


def _bomb(encoding: str) -> bytes:
    """A valid request body padded with 20 MB of spaces: a few KB compressed, 100 times the bound decoded."""
    body = json.dumps(chat(user("hi"))).encode()
    return ENCODERS[encoding](body[:-1] + b" " * 20_000_000 + body[-1:])


DIALECTS = {
    "/v1/chat/completions": lambda r: r.json()["error"]["code"] == "request_too_large",
    "/v1/responses": lambda r: r.json()["error"]["code"] == "request_too_large",
    "/v1/messages": lambda r: (
        r.json() == {"type": "error", "error": {"type": "request_too_large", "message": r.json()["error"]["message"]}}
    ),
}


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
@pytest.mark.parametrize("path", list(DIALECTS))
def test_a_decompression_bomb_is_refused_with_413_in_the_dialects_shape(
    small_service: Running, upstream: ScriptedOpenAIServer, encoding: str, path: str
) -> None:
    bomb = _bomb(encoding)
    assert len(bomb) < LIMIT  # the body as sent is within the bound: only decoding finds it too large
    r = _post(small_service, path, bomb, encoding)
    assert r.status_code == 413, r.text
    assert DIALECTS[path](r)
    assert "decoded" in r.text and "max_body_bytes" in r.text
    assert not upstream.requests


@pytest.mark.parametrize("path", list(DIALECTS))
def test_an_unknown_coding_is_415_naming_it(small_service: Running, upstream: ScriptedOpenAIServer, path: str) -> None:
    r = _post(small_service, path, b"\x1f\x9d\x90", "compress")
    assert r.status_code == 415, r.text
    message = r.json()["error"]["message"]
    assert "'compress'" in message and "gzip" in message
    assert not upstream.requests


def test_brotli_without_a_decoder_is_415_saying_what_to_install(
    small_service: Running, upstream: ScriptedOpenAIServer
) -> None:
    if importlib.util.find_spec("brotli") or importlib.util.find_spec("brotlicffi"):
        pytest.skip("a brotli decoder is installed here: br bodies are decoded")
    r = _post(small_service, "/v1/chat/completions", b"\x8b\x02\x80", "br")
    assert r.status_code == 415
    assert "'br'" in r.json()["error"]["message"] and "`brotli`" in r.json()["error"]["message"]


def test_a_body_that_is_not_what_its_header_says_is_400(small_service: Running) -> None:
    r = _post(small_service, "/v1/chat/completions", b"not gzip at all", "gzip")
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_content_encoding"


def test_count_tokens_reads_a_compressed_body(small_service: Running) -> None:
    body = {"model": MODEL, "max_tokens": 10, "messages": [user("count me")]}
    r = small_service.client.post(
        "/v1/messages/count_tokens",
        content=gzip.compress(json.dumps(body).encode()),
        headers={"content-type": "application/json", "content-encoding": "gzip"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["input_tokens"] > 0


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "zstd"])
def test_decoding_stops_at_the_bound(encoding: str) -> None:
    data = b"x" * 10_001
    assert decode_body(ENCODERS[encoding](data), encoding, 10_001) == data
    with pytest.raises(ServiceError) as refused:
        decode_body(ENCODERS[encoding](data), encoding, 10_000)
    assert refused.value.status == 413
    assert decode_body(data, "identity", 10) == data
