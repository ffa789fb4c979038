"""How a store writes messages, states and audit events as JSON text, and reads them back.

Every backend stores the same JSON: a message as pydantic dumps it, a state or an event as a
compact object. Reading checks each value and names the corrupted one (`SchemaError`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import TypeAdapter, ValidationError

from ..exceptions import MessageError, SchemaError, UsageError
from ..messages import Message, MessagesAdapter
from .values import RESTORE_HINT, check_id, check_stored_text, corrupted, dumps_value, id_problem, loads_stored

__all__ = [
    "check_slot",
    "decode_audit",
    "decode_messages",
    "decode_state",
    "encode_messages",
    "encode_state",
    "validation_problem",
]

_MessageAdapter: TypeAdapter[Message] = TypeAdapter(Message)


def validation_problem(exc: ValidationError | ValueError | TypeError | KeyError) -> str:
    """The first problem pydantic found, with the field it found it in (``parts.0.text: ...``)."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        path = [str(part) for part in first["loc"]]
        if path and path[0].isdigit():  # the position in the one-item list being validated
            path = path[1:]
        return f"`{'.'.join(path) or 'message'}`: {first['msg']}"
    if isinstance(exc, KeyError):
        return f"no `{exc.args[0]}` field"
    return str(exc).splitlines()[0]


def encode_messages(messages: Sequence[Message]) -> list[tuple[str, str]]:
    """``(message_id, JSON body)`` of each message, a repeated id once; `MessageError` names a bad one."""
    items: list[tuple[str, str]] = []
    seen: set[str] = set()
    for index, message in enumerate(messages):
        if not isinstance(message, Message):
            raise MessageError(
                f"message {index}: expected a `Message`, got {type(message).__name__}; convert it with a "
                "message adapter first.",
                index=index,
            )
        message_id = message.message_id
        problem = id_problem(message_id, "message_id")
        if problem is not None:
            raise MessageError(f"message {index}: {problem}; give it a printable id.", index=index)
        if message_id in seen:
            continue
        seen.add(message_id)
        try:
            body = _MessageAdapter.dump_json(message).decode()
        except Exception as exc:  # pydantic raises several types for values it cannot serialize
            raise MessageError(
                f"message {index} ({message_id!r}) cannot be serialized to JSON ({exc}); keep `extra` "
                "JSON-serializable and text free of lone surrogates.",
                index=index,
            ) from None
        items.append((message_id, body))
    return items


def decode_messages(session_id: str, rows: Sequence[tuple[int, str]]) -> list[Message]:
    """Messages from stored ``(seq, body)`` rows; `SchemaError` names the first corrupted one."""
    if not rows:
        return []
    try:
        return MessagesAdapter.validate_json("[" + ",".join(body for _, body in rows) + "]")
    except (ValidationError, ValueError, TypeError):
        pass
    # Find the culprit so the error can name it.
    messages: list[Message] = []
    for seq, body in rows:
        what = f"message at position {seq}"
        check_stored_text(body, session_id=session_id, what=what)
        try:
            messages.append(_MessageAdapter.validate_json(body))
        except (ValidationError, ValueError) as exc:
            raise SchemaError(
                f"Session {session_id!r}: the stored {what} is corrupted or in an unknown format "
                f"({validation_problem(exc)}); if a newer contextwarden wrote it, upgrade; otherwise "
                f"{RESTORE_HINT}.",
                session_id=session_id,
            ) from None
    return messages


def check_slot(slot: str) -> str:
    """``slot`` if it is a usable state slot name."""
    return check_id(slot, what="slot")


def encode_state(state: Mapping[str, Any]) -> str:
    """A state dict as JSON text, or `UsageError`."""
    if not isinstance(state, Mapping):
        raise UsageError(f"`state` must be a dict, got {type(state).__name__}; wrap the value in a dict.")
    return dumps_value(dict(state), what="`state`")


def decode_state(session_id: str, slot: str, body: str | None) -> dict[str, Any] | None:
    """A stored state (None when the slot is empty); `SchemaError` when it is not a JSON object."""
    if body is None:
        return None
    value = loads_stored(body, session_id=session_id, what=f"state {slot!r}")
    if not isinstance(value, dict):
        raise SchemaError(
            f"Session {session_id!r}: the stored state {slot!r} is {type(value).__name__}, not an object; "
            "restore the session from an export or save a fresh state.",
            session_id=session_id,
        )
    return value


def decode_audit(session_id: str, rows: Sequence[str]) -> list[dict[str, Any]]:
    """Stored audit events; `SchemaError` names the first that is not a JSON object."""
    events: list[dict[str, Any]] = []
    for position, row in enumerate(rows):
        event = loads_stored(row, session_id=session_id, what="audit event")
        if not isinstance(event, dict):
            raise corrupted(session_id, f"audit event {position}", f"{type(event).__name__}, not an object")
        events.append(event)
    return events
