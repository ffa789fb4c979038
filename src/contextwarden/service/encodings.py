"""Compressed request bodies (``Content-Encoding``): decoded within the body size bound, or refused.

Agents compress large histories (Codex sends ``zstd``; SDKs and proxies send ``gzip``). The proxy
reads the conversation, so it decodes: ``gzip``, ``deflate`` (zlib-wrapped or raw), ``zstd`` (with
the ``zstandard`` package) and ``br`` (with ``brotli`` or ``brotlicffi``). The decoded body is held
to the same bound as a plain one (``[service] max_body_bytes``): decoding stops as soon as the output
passes it, so a small body that expands to gigabytes (a decompression bomb) costs at most the bound,
and is refused with 413. An encoding the proxy cannot decode is refused with 415 naming it.
"""

from __future__ import annotations

import importlib
import io
import zlib
from collections.abc import Callable
from types import ModuleType

from starlette.requests import Request

from .errors import ServiceError
from .limits import body_too_large, read_body

__all__ = ["DECODERS", "decode_body", "read_decoded_body"]

_BROTLI_STEP = 1024
"""Compressed bytes fed to a brotli decoder at once: the output is checked against the bound between steps."""


def _too_large(limit: int) -> ServiceError:
    return body_too_large(limit + 1, limit, decoded=True)


def _corrupt(encoding: str, exc: Exception) -> ServiceError:
    return ServiceError(
        400,
        f"The request body is not valid {encoding} data ({type(exc).__name__}: {exc}); send it as the "
        "`Content-Encoding` header says, or uncompressed.",
        code="invalid_content_encoding",
    )


def _zlib(data: bytes, limit: int, *, wbits: int, encoding: str) -> bytes:
    """Decode gzip or zlib data (every gzip member), stopping once the output passes ``limit``."""
    out: list[bytes] = []
    size = 0
    while data:
        decoder = zlib.decompressobj(wbits)
        try:
            chunk = decoder.decompress(data, limit + 1 - size)
        except zlib.error as exc:
            raise _corrupt(encoding, exc) from None
        size += len(chunk)
        if size > limit or decoder.unconsumed_tail:
            raise _too_large(limit)
        if not decoder.eof:
            raise _corrupt(encoding, ValueError("the compressed data ends early"))
        out.append(chunk)
        data = decoder.unused_data if wbits > zlib.MAX_WBITS else b""  # gzip allows several members
    return b"".join(out)


def _gzip(data: bytes, limit: int) -> bytes:
    return _zlib(data, limit, wbits=16 + zlib.MAX_WBITS, encoding="gzip")


def _deflate(data: bytes, limit: int) -> bytes:
    # HTTP's deflate is zlib-wrapped; some clients send the raw stream
    wrapped = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
    return _zlib(data, limit, wbits=zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS, encoding="deflate")


def _module(*names: str) -> ModuleType | None:
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def _zstd(data: bytes, limit: int) -> bytes:
    zstandard = _module("zstandard")
    if zstandard is None:
        raise _unsupported("zstd", "install the `zstandard` package on the proxy's host")
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
        out = bytes(reader.read(limit + 1))
    except zstandard.ZstdError as exc:
        raise _corrupt("zstd", exc) from None
    if len(out) > limit:
        raise _too_large(limit)
    return out


def _brotli(data: bytes, limit: int) -> bytes:
    brotli = _module("brotli", "brotlicffi")
    if brotli is None:
        raise _unsupported("br", "install the `brotli` package on the proxy's host")
    decoder = brotli.Decompressor()
    out: list[bytes] = []
    size = 0
    try:
        for start in range(0, len(data), _BROTLI_STEP):
            chunk = decoder.process(data[start : start + _BROTLI_STEP])
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            out.append(chunk)
        if not decoder.is_finished():
            raise ValueError("the compressed data ends early")
    except ServiceError:
        raise
    except Exception as exc:  # brotli's error type differs between its two bindings
        raise _corrupt("br", exc) from None
    return b"".join(out)


DECODERS: dict[str, Callable[[bytes, int], bytes]] = {
    "gzip": _gzip,
    "x-gzip": _gzip,
    "deflate": _deflate,
    "zstd": _zstd,
    "br": _brotli,
}
"""The content codings the proxy reads, by their HTTP name."""


def _unsupported(encoding: str, fix: str | None = None) -> ServiceError:
    first = f"{fix}, or send" if fix else "send"
    return ServiceError(
        415,
        f"The request body's `Content-Encoding` is {encoding!r}, which this proxy cannot decode; {first} "
        f"the body as one of {', '.join(sorted(_readable()))}, or uncompressed.",
        param="content-encoding",
        code="unsupported_content_encoding",
    )


def _readable() -> set[str]:
    names = {"gzip", "deflate"}
    if _module("zstandard") is not None:
        names.add("zstd")
    if _module("brotli", "brotlicffi") is not None:
        names.add("br")
    return names


def decode_body(raw: bytes, content_encoding: str | None, limit: int) -> bytes:
    """The body ``raw`` with its ``Content-Encoding`` undone (codings listed in the order applied).

    Raises:
        ServiceError: 413 when the decoded body passes ``limit`` bytes, 415 for a coding the proxy
            cannot decode, 400 for data that is not what the header says.
    """
    if not content_encoding:
        return raw
    codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
    body = raw
    for coding in reversed(codings):
        if coding == "identity":
            continue
        decoder = DECODERS.get(coding)
        if decoder is None:
            raise _unsupported(coding)
        body = decoder(body, limit)
    return body


async def read_decoded_body(request: Request, limit: int) -> bytes:
    """The request body as sent (`read_body`'s bound), then decoded (`decode_body`, the same bound)."""
    raw = await read_body(request, limit)
    return decode_body(raw, request.headers.get("content-encoding"), limit)
