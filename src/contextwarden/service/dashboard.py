"""The dashboard: a static page (HTML, CSS, JavaScript; no build step) served at ``/``."""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response

__all__ = ["STATIC_DIR", "index"]

STATIC_DIR = Path(__file__).parent / "static"


async def index(request: Request) -> Response:
    """The dashboard page."""
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html")
