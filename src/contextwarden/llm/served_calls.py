"""The HTTP calls a served-window probe asks for, and what comes back (the sans-IO steps).

`served_window` writes its probes as generators of `Call` that receive an `Answer`;
`_served_io` carries them out with httpx. Both import these two types from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Answer", "Call"]


@dataclass(frozen=True, slots=True)
class Call:
    """One HTTP call the probe wants made."""

    method: Literal["GET", "POST"]
    url: str
    body: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """The outcome of a `Call`: a status and the decoded JSON (``None`` when not JSON), or no reply."""

    status: int | None
    data: Any
    text: str = ""
