"""OpenAI-style error replies: ``{"error": {"message", "type", "param", "code"}}`` with the right status.

Agents behind the proxy already handle OpenAI's errors; answering in the same shape keeps their
retry and back-off logic working unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse

from ..exceptions import ContextWardenError, StoreError, UsageError

__all__ = ["ServiceError", "error_body", "error_response", "status_of"]

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "upstream_timeout",
}


class ServiceError(Exception):
    """A request the service answers with an error body (raised inside route handlers)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.headers = dict(headers or {})

    def response(self) -> JSONResponse:
        """The error as a response."""
        return error_response(self.status, self.message, code=self.code, param=self.param, headers=self.headers)


def error_response(
    status: int,
    message: str,
    *,
    code: str | None = None,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """An OpenAI-style error body with ``status``."""
    return JSONResponse(
        error_body(status, message, code=code, param=param), status_code=status, headers=dict(headers or {})
    )


def error_body(status: int, message: str, *, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """The OpenAI-style error object for ``status``."""
    return {"error": {"message": message, "type": _TYPES.get(status, "api_error"), "param": param, "code": code}}


def status_of(exc: ContextWardenError) -> int:
    """The HTTP status for a library error a request ran into: the store's failures are 503 (retry
    later; the upstream was not at fault), a caller's mistake 400, anything else the upstream's 502."""
    if isinstance(exc, StoreError):
        return 503
    if isinstance(exc, UsageError):
        return 400
    return 502
