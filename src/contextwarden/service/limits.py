"""Request limits: body size (413) and concurrent requests per tenant (429)."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.requests import Request

from .errors import ServiceError

__all__ = ["Concurrency", "body_too_large", "read_body"]


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it passes ``limit`` bytes (never read whole first)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise body_too_large(int(declared), limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise body_too_large(size, limit)
        chunks.append(chunk)
    return b"".join(chunks)


def body_too_large(size: int, limit: int, *, decoded: bool = False) -> ServiceError:
    """The 413 for a body (``decoded``: once its `Content-Encoding` is undone) past ``limit`` bytes."""
    what = "The request body, decoded," if decoded else "The request body"
    return ServiceError(
        413,
        f"{what} has {size} bytes or more, over the service's limit of {limit} bytes; send a shorter "
        "history, or raise `[service] max_body_bytes`.",
        code="request_too_large",
    )


class Concurrency:
    """At most ``limit`` requests in flight per tenant; the next one gets 429 at once (never queued)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight: Counter[str] = Counter()

    @asynccontextmanager
    async def slot(self, tenant: str) -> AsyncIterator[None]:
        """Hold one of the tenant's slots while the block runs.

        Raises:
            ServiceError: 429 when the tenant already has ``limit`` requests in flight.
        """
        self.take(tenant)
        try:
            yield
        finally:
            self.give(tenant)

    def take(self, tenant: str) -> None:
        """Take one of the tenant's slots (`give` returns it).

        Raises:
            ServiceError: 429 when the tenant already has ``limit`` requests in flight.
        """
        if self.in_flight[tenant] >= self.limit:
            raise ServiceError(
                429,
                f"Tenant {tenant!r} already has {self.in_flight[tenant]} requests in flight (the limit is "
                f"{self.limit}); retry when one finishes, or raise `[service] max_concurrent_per_tenant`.",
                code="concurrency_limit_exceeded",
                headers={"retry-after": "1"},
            )
        self.in_flight[tenant] += 1

    def give(self, tenant: str) -> None:
        """Return a slot `take` took."""
        self.in_flight[tenant] -= 1
        if self.in_flight[tenant] <= 0:
            del self.in_flight[tenant]

    def total(self) -> int:
        """Requests in flight over all tenants."""
        return sum(self.in_flight.values())
