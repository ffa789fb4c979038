"""Checks of what memory accepts: every field of a record, and the arguments of a recall.

A record is checked before it is written, so a bad value is refused at the call that made it
(with a `MemoryRecordError` naming the field) instead of being stored and breaking every later
recall of its tenant, in any process. Text that no backend can keep as it is — a lone surrogate
(not encodable as UTF-8) or a NUL character (refused by Postgres) — is refused too;
`clean_text` gives the form the library stores for text that comes from messages.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from ..exceptions import MemoryQueryError, MemoryRecordError
from .records import MemoryRecord

__all__ = ["MAX_POSITION", "check_limit", "check_now", "check_record", "clean_text"]

MAX_POSITION = 2**53
"""The largest position magnitude kept exactly by every backend (SQLite and Postgres integers, JSON numbers)."""

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with NUL characters and lone surrogates replaced by U+FFFD, so any backend keeps it."""
    return _UNSTORABLE.sub("\ufffd", text)


def _fail(field: str, value: object, expected: str) -> MemoryRecordError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return MemoryRecordError(f"MemoryRecord.{field}={shown} is not valid: expected {expected}.", field=field)


def _check_text(field: str, value: object, *, optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        kind = "a str or None" if optional else "a str"
        raise _fail(field, value, f"{kind} (render images and tool calls to text first)")
    bad = _UNSTORABLE.search(value)
    if bad is not None:
        what = "a NUL character" if bad.group() == "\x00" else "a lone surrogate"
        raise MemoryRecordError(
            f"MemoryRecord.{field} holds {what} at index {bad.start()}, which no store keeps; clean the text"
            " first (contextwarden.memory.clean_text replaces them with U+FFFD).",
            field=field,
        )


def _check_number(
    field: str, value: object, *, optional: bool, low: float | None = None, high: float | None = None
) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(field, value, "a finite number" + (" or None" if optional else ""))
    if (low is not None and value < low) or (high is not None and value > high):
        raise _fail(field, value, f"a number from {low} to {high}")


def _check_ids(field: str, value: object) -> None:
    if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
        raise _fail(field, value, "a tuple of str ids")
    for item in value:
        _check_text(field, item, optional=False)


def _check_metadata(value: object) -> None:
    if not isinstance(value, Mapping):
        raise _fail("metadata", value, "a mapping of str to str")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise MemoryRecordError(
                f"MemoryRecord.metadata[{key!r}]={item!r} is not valid: metadata maps str to str (write numbers"
                " as text, e.g. str(3)).",
                field="metadata",
            )
        _check_text("metadata", key, optional=False)
        _check_text("metadata", item, optional=False)


def check_record(record: object) -> MemoryRecord:
    """``record`` if every field has the type and range memory needs; else `MemoryRecordError` naming it."""
    if not isinstance(record, MemoryRecord):
        raise MemoryRecordError(
            f"A memory must be a MemoryRecord or text, got {type(record).__name__}.", field="record"
        )
    _check_text("text", record.text, optional=False)
    for name in ("memory_id", "tenant"):
        value = getattr(record, name)
        _check_text(name, value, optional=False)
        if not value:
            raise _fail(name, value, "a non-empty str")
    for name in ("session_id", "role", "speaker", "group", "subject", "superseded_by"):
        _check_text(name, getattr(record, name), optional=True)
    _check_ids("message_ids", record.message_ids)
    _check_ids("supersedes", record.supersedes)
    _check_number("created_at", record.created_at, optional=False)
    _check_number("last_access", record.last_access, optional=True)
    _check_number("importance", record.importance, optional=True, low=0.0, high=1.0)
    if isinstance(record.position, bool) or not isinstance(record.position, int):
        raise _fail("position", record.position, "an int")
    if abs(record.position) > MAX_POSITION:
        raise _fail("position", record.position, f"an int from -{MAX_POSITION} to {MAX_POSITION}")
    _check_metadata(record.metadata)
    return record


def check_limit(limit: object) -> int:
    """``limit`` if it is a positive int; else `MemoryQueryError`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise MemoryQueryError(f"recall limit={limit!r} is not valid: give a positive int.", field="limit")
    return limit


def check_now(now: object) -> float | None:
    """``now`` if it is None or a finite number of seconds; else `MemoryQueryError`."""
    if now is None:
        return None
    if isinstance(now, bool) or not isinstance(now, int | float) or not math.isfinite(now):
        raise MemoryQueryError(
            f"recall now={now!r} is not valid: give seconds since the epoch as a finite number, or None.", field="now"
        )
    return float(now)
