"""Checks of the values a store is given and of the values it reads back.

Ids (sessions, tenants, slots, snapshots, messages) are checked before any I/O and refused with
`UsageError`; stored values that cannot be read back (wrong type, invalid UTF-8, a negative count)
are refused with `SchemaError` naming the session and the field, never read as something else.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from .._json import has_lone_surrogate
from ..exceptions import SchemaError, SessionNotFound, SnapshotError, UsageError, VersionConflict

__all__ = [
    "DEFAULT_SLOT",
    "FORMAT_VERSION",
    "MAX_ID_LENGTH",
    "RESTORE_HINT",
    "check_expected",
    "check_format",
    "check_id",
    "check_range",
    "check_snapshot_id",
    "check_stored_text",
    "check_tenant",
    "corrupted",
    "create_args",
    "dumps_value",
    "id_problem",
    "loads_stored",
    "missing_snapshot",
    "not_found",
    "state_conflict",
    "stored_float",
    "stored_int",
    "tenant_taken",
    "transcript_moved",
]

FORMAT_VERSION = 1
"""Storage format of one session's data; a row with a larger number was written by a newer release."""
MAX_ID_LENGTH = 200
"""Longest accepted session, snapshot, tenant or slot id, in characters."""
DEFAULT_SLOT = "view"
"""State slot of the compaction view state; `AgentState` uses ``"agent"``."""

_BAD_ID_CHAR = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def id_problem(value: object, what: str) -> str | None:
    """What is wrong with ``value`` as an id named ``what`` (None when it is usable)."""
    if not isinstance(value, str):
        return f"`{what}` must be a string, got {type(value).__name__} ({value!r:.60})"
    if not value:
        return f"`{what}` is empty"
    if len(value) > MAX_ID_LENGTH:
        return f"`{what}` {value[:40]!r}... is {len(value)} characters long, over the limit of {MAX_ID_LENGTH}"
    bad = _BAD_ID_CHAR.search(value)
    if bad is not None:
        return (
            f"`{what}` {value[:60]!r} contains the control character or lone surrogate {bad.group()!r} "
            f"at position {bad.start()}"
        )
    return None


def check_id(value: object, *, what: str = "session_id") -> str:
    """Return ``value`` if it is a usable id: a non-empty string of at most 200 characters, no control characters.

    Path separators, quotes and braces are allowed: every backend stores ids as parameters or
    encoded key parts, never as file names or SQL text.

    Raises:
        UsageError: the id is not a string, empty, too long, or has control characters.
    """
    problem = id_problem(value, what)
    if problem is not None:
        raise UsageError(f"{problem}; use a printable id of 1 to {MAX_ID_LENGTH} characters (hash longer ones).")
    assert isinstance(value, str)
    return value


def check_snapshot_id(value: object) -> str:
    """``value`` if it is a usable snapshot id, else `SnapshotError`."""
    problem = id_problem(value, "snapshot_id")
    if problem is not None:
        raise SnapshotError(f"{problem}; snapshot ids are printable strings of 1 to {MAX_ID_LENGTH} characters.")
    assert isinstance(value, str)
    return value


def dumps_value(value: object, *, what: str) -> str:
    """``value`` as compact JSON text, or `UsageError` naming ``what`` (not JSON, or a lone surrogate)."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        # Every backend stores UTF-8: a lone surrogate must fail here, with a clear message.
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UsageError(
            f"{what} contains a lone surrogate ({exc.object[exc.start : exc.end]!r}); decode the source bytes "
            "with errors='replace' or fix the string."
        ) from None
    except (TypeError, ValueError) as exc:
        raise UsageError(
            f"{what} is not JSON-serializable ({exc}); store only dicts, lists, strings, finite numbers, "
            "booleans and None."
        ) from None
    return text


RESTORE_HINT = "restore the session from an export with `import_session`, or delete it"


def corrupted(session_id: str, what: str, problem: str) -> SchemaError:
    """The error for a stored value that cannot be read back (names the session and the field)."""
    return SchemaError(
        f"Session {session_id!r}: the stored {what} is corrupted ({problem}); {RESTORE_HINT}.", session_id=session_id
    )


def check_stored_text(value: object, *, session_id: str, what: str) -> str:
    """``value`` if it is a str of valid UTF-8, else `SchemaError` naming the session and ``what``.

    Backends decode stored bytes with ``surrogateescape``, so an invalid byte arrives as a lone
    surrogate and is found here, instead of being read as U+FFFD and passing for text.
    """
    if not isinstance(value, str):
        raise corrupted(session_id, what, f"a {type(value).__name__} where text belongs")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raw = value[exc.start : exc.end].encode("utf-8", "surrogateescape")
            raise corrupted(session_id, what, f"not valid UTF-8: byte {raw[:1]!r} at character {exc.start}") from None
    return value


def stored_int(value: object, *, session_id: str, what: str, minimum: int | None = None) -> int:
    """A stored integer (a version, a position, a count), or `SchemaError` naming the session and ``what``.

    Args:
        value: The stored value (an int, or its text or bytes as a backend returns it).
        session_id: The session it belongs to (named by the error).
        what: The field (named by the error).
        minimum: The smallest value the field can hold (0 for counts, positions and versions): a
            smaller one is a corrupted row, refused before anything is read or written by it.
    """
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    else:
        text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
        if isinstance(text, str) and text.isascii() and text.strip().removeprefix("-").isdigit():
            number = int(text)
    if number is None:
        raise corrupted(session_id, what, f"{value!r:.60} is not an integer")
    if minimum is not None and number < minimum:
        raise corrupted(session_id, what, f"{number} is below {minimum}, which it never is")
    return number


def stored_float(value: object, *, session_id: str, what: str) -> float:
    """A stored finite number (a Unix time), or `SchemaError` naming the session and ``what``."""
    if not isinstance(value, bool):
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError, OverflowError):
            pass
        else:
            if math.isfinite(number):
                return number
    raise corrupted(session_id, what, f"{value!r:.60} is not a finite number")


def loads_stored(text: str | bytes, *, session_id: str, what: str) -> Any:
    """Stored JSON text decoded, or `SchemaError` naming the session and ``what``."""
    if isinstance(text, str):
        check_stored_text(text, session_id=session_id, what=what)
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError) as exc:
        raise corrupted(session_id, what, str(exc)) from None


def not_found(session_id: str, tenant: str | None = None) -> SessionNotFound:
    """The error for a missing session (raised by backends' operations).

    With ``tenant``, a session of another tenant gets this very error: the message does not tell
    the two cases apart.
    """
    owner = "" if tenant is None else f" for tenant {tenant!r}"
    return SessionNotFound(
        f"No session {session_id!r}{owner} in this store; create it with `create_session` first.",
        session_id=session_id,
    )


def transcript_moved(session_id: str, expected: int, actual: int) -> VersionConflict:
    """The error for an append whose ``expected_count`` is not the transcript's length (raised by backends)."""
    return VersionConflict(
        f"Session {session_id!r} has {actual} transcript messages, not the expected {expected}: another writer "
        "appended meanwhile and nothing was written. Reload the transcript and append what is still new.",
        session_id=session_id,
        expected=expected,
        actual=actual,
    )


def check_tenant(tenant: str | None) -> str | None:
    """``tenant`` if it is None or a usable id."""
    return None if tenant is None else check_id(tenant, what="tenant")


def check_format(session_id: str, fmt: int) -> None:
    """Refuse a session written in a storage format newer than this release reads."""
    if fmt > FORMAT_VERSION:
        raise SchemaError(
            f"Session {session_id!r} is stored in format {fmt}, but this contextwarden reads formats up to "
            f"{FORMAT_VERSION}; upgrade contextwarden (`pip install -U contextwarden`), or export the session with "
            "the newer release and import it here.",
            session_id=session_id,
        )


def create_args(
    session_id: str,
    tenant: str,
    model: str | None,
    window: int | None,
    metadata: Mapping[str, Any] | None,
    *,
    now: float,
) -> dict[str, Any]:
    """The checked keyword arguments of `StoreOps.create_session` (times set to ``now``).

    Raises:
        UsageError: an invalid id, model, window or metadata (the message names the argument).
    """
    check_id(session_id)
    check_id(tenant, what="tenant")
    if model is not None and not isinstance(model, str):
        raise UsageError(f"`model` must be a string or None, got {type(model).__name__}.")
    if model is not None and has_lone_surrogate(model):
        raise UsageError(
            f"`model` {model!r} holds a lone surrogate character (an unpaired \\ud800-\\udfff), which no store "
            "can hold; pass the model's name as valid Unicode."
        )
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window <= 0):
        raise UsageError(f"`window` must be a positive int (tokens) or None, got {window!r}.")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise UsageError(f"`metadata` must be a dict or None, got {type(metadata).__name__}.")
    return {
        "tenant": tenant,
        "model": model,
        "window": window,
        "metadata": dumps_value(dict(metadata or {}), what="`metadata`"),
        "created_at": now,
        "last_active": now,
    }


def state_conflict(session_id: str, slot: str, expected: int, actual: int) -> VersionConflict:
    """The error for a state save whose expected version is not the stored one."""
    return VersionConflict(
        f"Session {session_id!r}: state {slot!r} is at version {actual}, not the expected {expected}; another "
        "writer saved first. Reload it with `load_state`, reapply your change and save again.",
        session_id=session_id,
        expected=expected,
        actual=actual,
    )


def check_expected(expected_version: int) -> int:
    """``expected_version`` if it is an int >= 0, else `UsageError`."""
    if isinstance(expected_version, bool) or not isinstance(expected_version, int) or expected_version < 0:
        raise UsageError(
            f"`expected_version` must be an int >= 0 (0 before the first save), got {expected_version!r}; "
            "pass the version `load_state` returned."
        )
    return expected_version


def check_range(name: str, value: int | None, *, allow_none: bool = False) -> None:
    """Raise `UsageError` unless ``value`` is an int >= 0 (or None, with ``allow_none``)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(f"`{name}` must be an int >= 0, got {value!r}.")


def missing_snapshot(session_id: str, snapshot_id: str) -> SnapshotError:
    """The error for a snapshot the session does not have."""
    return SnapshotError(
        f"Session {session_id!r} has no snapshot {snapshot_id!r}; list the existing ones with `list_snapshots`."
    )


def tenant_taken(session_id: str, tenant: str) -> SessionNotFound:
    """The error for creating a session whose id another tenant's session has."""
    return SessionNotFound(
        f"No session {session_id!r} for tenant {tenant!r} in this store, and the id is taken by another "
        "tenant's session, so it cannot be created for this one; choose another session id.",
        session_id=session_id,
    )
