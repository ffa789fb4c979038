"""The session-store contract and the code every backend shares.

`SessionStore` and `AsyncSessionStore` are the public Protocols; third parties implement them.
Our own backends subclass `BaseStore` / `BaseAsyncStore`, which hold everything that does not
touch a database: id validation, message (de)serialization, JSON encoding of state, audit and
metadata, the export/import format and the lock loop. A backend supplies two things:

* ``_ops``: an object whose methods are *generators* (sans-IO). Each yields backend commands (an
  SQL statement, a Redis command) and receives their results, so one implementation of the logic
  serves both the sync and the async twin.
* ``_run(op, write=...)``: the driver that runs one such generator inside one transaction.

Data layout per session (the same on every backend): metadata, an append-only transcript of
`Message` JSON with a sequence number per message and a unique message id, named state slots
(``"view"`` for the compaction state, ``"agent"`` for `AgentState`) each with a version for
compare-and-set, snapshots (bytes + JSON metadata), and an append-only audit log of JSON events.

Tenants: every call that names a session also takes ``tenant``. Given, it must be the session's
tenant, checked in the same atomic operation; a session of another tenant fails exactly like a
missing one (`SessionNotFound`, the same message), so a tenant cannot even tell it exists.

Locks: the holder of `lock` renews a short lease (``lock_lease``, 4 s by default) from a
background heartbeat while its block runs, so a holder that crashed or was killed loses the
lock within one lease, while a live one keeps it however long it works. The lock only saves
duplicate work: state saves are compare-and-set, so even two holders could not lose an update.
"""

from __future__ import annotations

import base64
import gc
import json
import logging
import math
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar, runtime_checkable

import anyio
from pydantic import TypeAdapter, ValidationError

from .. import toolpairs
from .._json import has_lone_surrogate
from ..exceptions import (
    LockTimeout,
    MessageError,
    MessageNotFound,
    SchemaError,
    SessionExists,
    SessionNotFound,
    SnapshotError,
    StoreError,
    UsageError,
    VersionConflict,
)
from ..messages import Message, MessagesAdapter, check_message

__all__ = [
    "DEFAULT_SLOT",
    "FORMAT_VERSION",
    "MAX_ID_LENGTH",
    "AsyncSessionStore",
    "BaseAsyncStore",
    "BaseStore",
    "SessionInfo",
    "SessionStore",
    "check_id",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")
Op = Generator[Any, Any, T]
"""A sans-IO store operation: yields backend commands, receives their results, returns a value."""

FORMAT_VERSION = 1
"""Storage format of one session's data; a row with a larger number was written by a newer release."""
EXPORT_FORMAT = "contextwarden.session"
EXPORT_VERSION = 1
MAX_ID_LENGTH = 200
"""Longest accepted session, snapshot, tenant or slot id, in characters."""
DEFAULT_SLOT = "view"
"""State slot of the compaction view state; `AgentState` uses ``"agent"``."""
DEFAULT_LOCK_LEASE = 4.0
"""Seconds a session lock outlives its holder's last heartbeat (the holder renews it every quarter)."""
_PAGE = 1000
_IMPORT_BATCH = 500

_MessageAdapter: TypeAdapter[Message] = TypeAdapter(Message)
_BAD_ID_CHAR = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


@contextmanager
def _gc_paused(objects: int) -> Iterator[None]:
    """Pause the cyclic GC while decoding a large batch.

    Decoding thousands of messages allocates enough to trigger full collections, which scan the
    whole heap and, in a large process, triple the decode time. Messages hold no cycles, so
    nothing is lost by collecting after the batch instead of during it.
    """
    if objects < 256 or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


# --- ids and values ---------------------------------------------------------------------------


def _id_problem(value: object, what: str) -> str | None:
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
    problem = _id_problem(value, what)
    if problem is not None:
        raise UsageError(f"{problem}; use a printable id of 1 to {MAX_ID_LENGTH} characters (hash longer ones).")
    assert isinstance(value, str)
    return value


def _check_snapshot_id(value: object) -> str:
    problem = _id_problem(value, "snapshot_id")
    if problem is not None:
        raise SnapshotError(f"{problem}; snapshot ids are printable strings of 1 to {MAX_ID_LENGTH} characters.")
    assert isinstance(value, str)
    return value


def _dumps(value: object, *, what: str) -> str:
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


_RESTORE_HINT = "restore the session from an export with `import_session`, or delete it"


def corrupted(session_id: str, what: str, problem: str) -> SchemaError:
    """The error for a stored value that cannot be read back (names the session and the field)."""
    return SchemaError(
        f"Session {session_id!r}: the stored {what} is corrupted ({problem}); {_RESTORE_HINT}.", session_id=session_id
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


def _stored_float(value: object, *, session_id: str, what: str) -> float:
    if not isinstance(value, bool):
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError, OverflowError):
            pass
        else:
            if math.isfinite(number):
                return number
    raise corrupted(session_id, what, f"{value!r:.60} is not a finite number")


def _loads(text: str | bytes, *, session_id: str, what: str) -> Any:
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


def _check_tenant(tenant: str | None) -> str | None:
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


# --- metadata ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SessionInfo:
    """What a store knows about a session besides its content."""

    session_id: str
    tenant: str
    """Owner of the session; the service isolates tenants by it."""
    created_at: float
    """Unix time the session was created."""
    last_active: float
    """Unix time of the last write or `touch`; idle expiry is measured from it."""
    model: str | None = None
    """Model the session talks to, when known."""
    window: int | None = None
    """Context window in tokens, when known."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """Free-form JSON metadata given at creation."""
    archived_at: float | None = None
    """Unix time the session was archived; archived sessions are kept but hidden from listing and expiry."""
    message_count: int = 0
    """Number of messages in the transcript."""

    @property
    def archived(self) -> bool:
        """Whether the session was archived."""
        return self.archived_at is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "session_id": self.session_id,
            "tenant": self.tenant,
            "created_at": self.created_at,
            "last_active": self.last_active,
            "model": self.model,
            "window": self.window,
            "metadata": dict(self.metadata),
            "archived_at": self.archived_at,
            "message_count": self.message_count,
        }


def session_info(
    session_id: str,
    *,
    tenant: object,
    created_at: object,
    last_active: object,
    model: object,
    window: object,
    metadata: str,
    archived_at: object,
    message_count: object,
    fmt: object,
) -> SessionInfo:
    """Build a `SessionInfo` from stored fields, checking the format and the type of every field.

    Raises:
        SchemaError: a field of the wrong type or not valid UTF-8 (the message names the session and
            the field), or a format newer than this release reads.
    """
    check_format(session_id, stored_int(fmt, session_id=session_id, what="`format`"))
    meta = _loads(metadata, session_id=session_id, what="session `metadata`")
    if not isinstance(meta, dict):
        raise corrupted(session_id, "session `metadata`", f"{type(meta).__name__}, not an object")
    model_name = None if model is None else check_stored_text(model, session_id=session_id, what="session `model`")
    window_value = (
        None if window is None else stored_int(window, session_id=session_id, what="session `window`", minimum=1)
    )
    return SessionInfo(
        session_id=session_id,
        tenant=check_stored_text(tenant, session_id=session_id, what="session `tenant`"),
        created_at=_stored_float(created_at, session_id=session_id, what="session `created_at`"),
        last_active=_stored_float(last_active, session_id=session_id, what="session `last_active`"),
        model=model_name,
        window=window_value,
        metadata=meta,
        archived_at=None
        if archived_at is None
        else _stored_float(archived_at, session_id=session_id, what="session `archived_at`"),
        message_count=stored_int(message_count, session_id=session_id, what="session `message_count`", minimum=0),
    )


# --- the Protocols ----------------------------------------------------------------------------


@runtime_checkable
class SessionStore(Protocol):
    """Where sessions live: transcript, versioned state, snapshots, audit log and metadata.

    Every method taking a ``session_id`` raises `SessionNotFound` when the session does not exist
    (create it with `create_session`), `UsageError` for an invalid id, and `StoreUnavailable` when
    the backing server cannot be reached. Each also takes ``tenant``: when given, a session that
    belongs to another tenant raises the very `SessionNotFound` a missing session raises (the
    check is part of the same atomic operation). Stored data that cannot be read back (a wrong
    type, invalid UTF-8, broken JSON) raises `SchemaError` naming the session and the field.
    """

    def create_session(
        self,
        session_id: str,
        *,
        tenant: str = "default",
        model: str | None = None,
        window: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        """Create the session if it is missing; return it (the existing one, unchanged, if it was there).

        Raises:
            SessionNotFound: the id is taken by a session of another tenant (it is neither
                returned nor changed; choose another id).
        """
        ...

    def get_session(self, session_id: str, *, tenant: str | None = None) -> SessionInfo:
        """The session's metadata."""
        ...

    def touch(self, session_id: str, *, tenant: str | None = None) -> None:
        """Mark the session active now (writes do this too)."""
        ...

    def list_sessions(
        self,
        *,
        tenant: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        include_archived: bool = False,
    ) -> tuple[list[SessionInfo], str | None]:
        """One page of sessions ordered by id (only ``tenant``'s when given), and the cursor of the next page."""
        ...

    def archive(self, session_id: str, *, tenant: str | None = None) -> None:
        """Archive the session: kept and readable, but hidden from listing and never expired."""
        ...

    def delete_session(self, session_id: str, *, tenant: str | None = None) -> None:
        """Delete the session and everything stored under it."""
        ...

    def expire_idle(self, max_idle_seconds: float) -> list[str]:
        """Delete every non-archived session idle for longer than ``max_idle_seconds``; return their ids."""
        ...

    def append_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        tenant: str | None = None,
        expected_count: int | None = None,
    ) -> int:
        """Append to the transcript in one transaction; return how many were new.

        A message whose ``message_id`` is already stored is skipped (appends are idempotent). The
        batch is all-or-nothing and keeps its order. With ``expected_count`` the append is a
        compare-and-set on the transcript's length: it happens only if the transcript holds exactly
        that many messages.

        Raises:
            VersionConflict: ``expected_count`` is not the transcript's length (``actual`` is); nothing was written.
        """
        ...

    def load_messages(
        self, session_id: str, *, start: int = 0, limit: int | None = None, tenant: str | None = None
    ) -> list[Message]:
        """Transcript messages from position ``start`` (0-based), at most ``limit`` of them."""
        ...

    def count_messages(self, session_id: str, *, tenant: str | None = None) -> int:
        """Number of messages in the transcript."""
        ...

    def get_message(self, session_id: str, message_id: str, *, tenant: str | None = None) -> Message:
        """One transcript message by id; raises `MessageNotFound` when absent."""
        ...

    def load_state(
        self, session_id: str, *, slot: str = DEFAULT_SLOT, tenant: str | None = None
    ) -> tuple[dict[str, Any] | None, int]:
        """The JSON state saved in ``slot`` and its version (``(None, 0)`` before the first save)."""
        ...

    def save_state(
        self,
        session_id: str,
        state: Mapping[str, Any],
        *,
        expected_version: int,
        slot: str = DEFAULT_SLOT,
        tenant: str | None = None,
    ) -> int:
        """Compare-and-set: save ``state`` if the stored version is ``expected_version``; return the new version.

        Raises:
            VersionConflict: another writer saved first; reload with `load_state` and retry.
        """
        ...

    def put_snapshot(
        self,
        session_id: str,
        snapshot_id: str,
        data: bytes,
        *,
        metadata: Mapping[str, Any] | None = None,
        tenant: str | None = None,
    ) -> None:
        """Store a blob under the session; writing the same id again replaces it."""
        ...

    def get_snapshot(self, session_id: str, snapshot_id: str, *, tenant: str | None = None) -> bytes:
        """The blob stored under ``snapshot_id``; raises `SnapshotError` when missing."""
        ...

    def list_snapshots(self, session_id: str, *, tenant: str | None = None) -> list[str]:
        """Snapshot ids of the session, sorted."""
        ...

    def append_audit(self, session_id: str, event: Mapping[str, Any], *, tenant: str | None = None) -> None:
        """Append one JSON event to the session's audit log."""
        ...

    def read_audit(
        self, session_id: str, *, since: int = 0, limit: int | None = None, tenant: str | None = None
    ) -> list[dict[str, Any]]:
        """Audit events from position ``since`` (0-based), oldest first."""
        ...

    def export_session(self, session_id: str, *, tenant: str | None = None) -> Iterator[str]:
        """The whole session as JSONL lines (each ending in a newline), for `import_session`."""
        ...

    def import_session(
        self, lines: Iterable[str | bytes], *, session_id: str | None = None, tenant: str | None = None
    ) -> SessionInfo:
        """Recreate a session from `export_session` lines, under ``session_id`` or the exported id.

        Every line is read and checked before anything is written: the header, each message (as
        `Session.add` would check it), the tool pairs of the transcript (no result without its
        call, no second result), states (the view state in slot ``"view"`` as a session opens it:
        its ``format`` and its shape), snapshots and audit events. ``tenant`` puts the session
        under that tenant instead of the one the export names (a service importing a tenant's
        upload passes it).

        Raises:
            SessionExists: the target session already exists.
            SchemaError: the lines are not a valid contextwarden export (the message names the line
                and the field); nothing was written.
        """
        ...

    def lock(
        self, session_id: str, *, timeout: float = 10.0, tenant: str | None = None
    ) -> AbstractContextManager[None]:
        """Hold the session's lock (for compaction) while the block runs; `LockTimeout` after ``timeout`` s.

        The holder's lease is renewed in the background while the block runs; a holder that dies
        loses the lock within one lease (Postgres: when its connection closes).
        """
        ...

    def close(self) -> None:
        """Release the connections the store owns."""
        ...


@runtime_checkable
class AsyncSessionStore(Protocol):
    """The async twin of `SessionStore`: the same methods, awaited."""

    async def create_session(
        self,
        session_id: str,
        *,
        tenant: str = "default",
        model: str | None = None,
        window: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo: ...

    async def get_session(self, session_id: str, *, tenant: str | None = None) -> SessionInfo: ...

    async def touch(self, session_id: str, *, tenant: str | None = None) -> None: ...

    async def list_sessions(
        self,
        *,
        tenant: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        include_archived: bool = False,
    ) -> tuple[list[SessionInfo], str | None]: ...

    async def archive(self, session_id: str, *, tenant: str | None = None) -> None: ...

    async def delete_session(self, session_id: str, *, tenant: str | None = None) -> None: ...

    async def expire_idle(self, max_idle_seconds: float) -> list[str]: ...

    async def append_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        tenant: str | None = None,
        expected_count: int | None = None,
    ) -> int: ...

    async def load_messages(
        self, session_id: str, *, start: int = 0, limit: int | None = None, tenant: str | None = None
    ) -> list[Message]: ...

    async def count_messages(self, session_id: str, *, tenant: str | None = None) -> int: ...

    async def get_message(self, session_id: str, message_id: str, *, tenant: str | None = None) -> Message: ...

    async def load_state(
        self, session_id: str, *, slot: str = DEFAULT_SLOT, tenant: str | None = None
    ) -> tuple[dict[str, Any] | None, int]: ...

    async def save_state(
        self,
        session_id: str,
        state: Mapping[str, Any],
        *,
        expected_version: int,
        slot: str = DEFAULT_SLOT,
        tenant: str | None = None,
    ) -> int: ...

    async def put_snapshot(
        self,
        session_id: str,
        snapshot_id: str,
        data: bytes,
        *,
        metadata: Mapping[str, Any] | None = None,
        tenant: str | None = None,
    ) -> None: ...

    async def get_snapshot(self, session_id: str, snapshot_id: str, *, tenant: str | None = None) -> bytes: ...

    async def list_snapshots(self, session_id: str, *, tenant: str | None = None) -> list[str]: ...

    async def append_audit(self, session_id: str, event: Mapping[str, Any], *, tenant: str | None = None) -> None: ...

    async def read_audit(
        self, session_id: str, *, since: int = 0, limit: int | None = None, tenant: str | None = None
    ) -> list[dict[str, Any]]: ...

    def export_session(self, session_id: str, *, tenant: str | None = None) -> AsyncIterator[str]: ...

    async def import_session(
        self,
        lines: Iterable[str | bytes] | AsyncIterable[str | bytes],
        *,
        session_id: str | None = None,
        tenant: str | None = None,
    ) -> SessionInfo: ...

    def lock(
        self, session_id: str, *, timeout: float = 10.0, tenant: str | None = None
    ) -> AbstractAsyncContextManager[None]: ...

    async def aclose(self) -> None: ...


class StoreOps(Protocol):
    """The sans-IO operations a backend implements (internal; see the module docstring).

    Operations raise `SessionNotFound` (via `not_found`) for a missing session and check its
    storage format with `check_format`. Ids arrive validated and payloads arrive as JSON text.
    An operation given a ``tenant`` treats a session of another tenant as missing, in the same
    atomic step that reads or writes it.
    """

    def setup(self) -> Op[int]: ...

    def create_session(
        self,
        session_id: str,
        *,
        tenant: str,
        model: str | None,
        window: int | None,
        metadata: str,
        created_at: float,
        last_active: float,
    ) -> Op[SessionInfo]: ...

    def get_session(self, session_id: str, *, tenant: str | None = None) -> Op[SessionInfo | None]: ...

    def touch(self, session_id: str, *, now: float, tenant: str | None = None) -> Op[None]: ...

    def list_sessions(
        self, *, tenant: str | None, limit: int, after: str | None, include_archived: bool
    ) -> Op[list[SessionInfo]]: ...

    def archive(self, session_id: str, *, now: float, tenant: str | None = None) -> Op[None]: ...

    def delete_session(self, session_id: str, *, tenant: str | None = None) -> Op[None]: ...

    def expire_idle(self, *, cutoff: float) -> Op[list[str]]: ...

    def append_messages(
        self,
        session_id: str,
        items: Sequence[tuple[str, str]],
        *,
        now: float,
        tenant: str | None = None,
        expected: int | None = None,
    ) -> Op[int]:
        """Append the new items; with ``expected``, only if the transcript has that many messages (else
        raise `transcript_moved`, writing nothing)."""
        ...

    def load_messages(
        self, session_id: str, *, start: int, limit: int | None, tenant: str | None = None
    ) -> Op[list[tuple[int, str]]]: ...

    def count_messages(self, session_id: str, *, tenant: str | None = None) -> Op[int]: ...

    def get_message(
        self, session_id: str, message_id: str, *, tenant: str | None = None
    ) -> Op[tuple[int, str] | None]: ...

    def load_state(self, session_id: str, slot: str, *, tenant: str | None = None) -> Op[tuple[str | None, int]]: ...

    def save_state(
        self, session_id: str, slot: str, body: str, *, expected: int, now: float, token: str, tenant: str | None = None
    ) -> Op[tuple[bool, int]]: ...

    def restore_state(self, session_id: str, slot: str, body: str, *, version: int, now: float) -> Op[None]: ...

    def list_states(self, session_id: str, *, tenant: str | None = None) -> Op[list[tuple[str, str, int]]]: ...

    def put_snapshot(
        self, session_id: str, snapshot_id: str, data: bytes, metadata: str, *, now: float, tenant: str | None = None
    ) -> Op[None]: ...

    def get_snapshot(
        self, session_id: str, snapshot_id: str, *, tenant: str | None = None
    ) -> Op[tuple[bytes, str] | None]: ...

    def list_snapshots(self, session_id: str, *, tenant: str | None = None) -> Op[list[str]]: ...

    def append_audit(self, session_id: str, event: str, *, now: float, tenant: str | None = None) -> Op[None]: ...

    def read_audit(
        self, session_id: str, *, since: int, limit: int | None, tenant: str | None = None
    ) -> Op[list[str]]: ...

    def try_lock(
        self, session_id: str, owner: str, *, lease: float, now: float, tenant: str | None = None
    ) -> Op[bool]: ...

    def renew_lock(self, session_id: str, owner: str, *, lease: float, now: float) -> Op[bool]:
        """Push the lease of a lock ``owner`` holds to ``now + lease``; False when it no longer holds it."""
        ...

    def lock_holder(self, session_id: str, *, now: float) -> Op[tuple[str, float] | None]:
        """The owner of the session's lock and the seconds its lease has left; None when it is free."""
        ...

    def unlock(self, session_id: str, owner: str) -> Op[None]: ...


def drive(op: Op[T], execute: Callable[[Any], Any]) -> T:
    """Run a sans-IO operation, executing each command it yields with ``execute``."""
    try:
        command = next(op)
    except StopIteration as stop:
        result: T = stop.value
        return result
    return resume(op, command, execute)


def resume(op: Op[T], command: Any, execute: Callable[[Any], Any]) -> T:
    """Continue `drive` from a command already taken from ``op``."""
    try:
        while True:
            command = op.send(execute(command))
    except StopIteration as stop:
        result: T = stop.value
        return result
    finally:
        op.close()


async def adrive(op: Op[T], execute: Callable[[Any], Awaitable[Any]]) -> T:
    """Async twin of `drive`."""
    try:
        command = next(op)
    except StopIteration as stop:
        result: T = stop.value
        return result
    return await aresume(op, command, execute)


async def aresume(op: Op[T], command: Any, execute: Callable[[Any], Awaitable[Any]]) -> T:
    """Async twin of `resume`."""
    try:
        while True:
            command = op.send(await execute(command))
    except StopIteration as stop:
        result: T = stop.value
        return result
    finally:
        op.close()


# --- shared logic -----------------------------------------------------------------------------


def _export_line(record: Mapping[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


# --- locks ------------------------------------------------------------------------------------

_HOST = socket.gethostname()


def _new_owner() -> str:
    """A lock owner: a unique token, then who holds it and since when (shown by `LockTimeout`)."""
    return f"{uuid.uuid4().hex}|{_HOST}|{os.getpid()}|{time.time():.3f}"


def _owner_details(owner: str) -> tuple[str | None, float | None]:
    """``(holder, since)`` of a lock owner written by `_new_owner` (None, None for another form)."""
    parts = owner.split("|")
    if len(parts) != 4:
        return None, None
    try:
        since = float(parts[3])
    except ValueError:
        return f"{parts[1]} pid {parts[2]}", None
    return f"{parts[1]} pid {parts[2]}", since


def lock_timeout(
    session_id: str,
    timeout: float,
    *,
    holder: str | None,
    since: float | None,
    expires_in: float | None,
    released: bool = False,
    renewal: str = "its holder renews the lease while it is alive",
) -> LockTimeout:
    """The `LockTimeout` for a lock not acquired in time, saying only what the store knows."""
    if released:
        known = "its holder released it just as the wait ran out"
    elif holder is None:
        known = "it is held by a holder the store cannot name"
    else:
        known = f"it is held by {holder}"
        if since is not None:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since))
            known += f" since {stamp} ({max(0.0, time.time() - since):.1f} s ago)"
    if expires_in is not None and not released:
        known += f"; the lease expires in {expires_in:.1f} s unless renewed ({renewal})"
    return LockTimeout(
        f"Session {session_id!r}: the lock was not acquired within {timeout} s; {known}. Retry later or raise "
        "`timeout`.",
        session_id=session_id,
        timeout=timeout,
        holder=holder,
        since=since,
        expires_in=None if released else expires_in,
    )


class _Heartbeat:
    """Renews a held lock's lease from a daemon thread until stopped (the sync stores' holder)."""

    def __init__(self, store: BaseStore, session_id: str, owner: str) -> None:
        self._store, self._session_id, self._owner = store, session_id, owner
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"cw-lock-{session_id[:40]}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        # Not joined: a renewal still running after the release finds the lock gone and does nothing.
        self._stopped.set()

    def _loop(self) -> None:
        store = self._store
        lease = store._lock_lease
        while not self._stopped.wait(lease / 4):
            try:
                op = store._ops.renew_lock(self._session_id, self._owner, lease=lease, now=time.time())
                held = store._run(op, write=True)
            except Exception as exc:  # the next beat retries; the lease covers three missed ones
                if self._stopped.is_set():  # released meanwhile (the store may be closed already)
                    return
                logger.warning("session %r: renewing its lock failed (%s); retrying", self._session_id, exc)
                continue
            if not held:
                if not self._stopped.is_set():
                    logger.warning(
                        "session %r: its lock was taken over after the lease ran out; this holder's state save "
                        "is still checked by compare-and-set",
                        self._session_id,
                    )
                return


def _sole(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception a task group wrapped (the lock body's own), or the group itself."""
    return group.exceptions[0] if len(group.exceptions) == 1 else group


# --- the export format --------------------------------------------------------------------------


@dataclass(kw_only=True)
class _ImportPlan:
    """What an export will write, read and checked in full before the first write."""

    target: str
    create: dict[str, Any]
    messages: list[tuple[str, str]] = field(default_factory=list)
    states: list[tuple[str, str, int]] = field(default_factory=list)
    snapshots: list[tuple[str, bytes, str]] = field(default_factory=list)
    audit: list[str] = field(default_factory=list)
    archived_at: float | None = None


def _validation_problem(exc: ValidationError | ValueError | TypeError | KeyError) -> str:
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


def _bad_export(number: int, problem: str, session_id: str | None) -> SchemaError:
    return SchemaError(
        f"line {number} of the export: {problem.rstrip('.')}; nothing was imported.", session_id=session_id
    )


class _StoreCommon:
    """Validation, serialization and the export/import format, shared by both twins."""

    _ops: StoreOps

    def __init__(self, *, clock: Callable[[], float] = time.time, lock_lease: float = DEFAULT_LOCK_LEASE) -> None:
        if not (lock_lease > 0 and math.isfinite(lock_lease)):
            raise UsageError(f"`lock_lease` must be a positive number of seconds, got {lock_lease!r}.")
        self._clock = clock
        self._lock_lease = lock_lease

    # messages
    @staticmethod
    def _encode_messages(messages: Sequence[Message]) -> list[tuple[str, str]]:
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
            problem = _id_problem(message_id, "message_id")
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

    @staticmethod
    def _decode_messages(session_id: str, rows: Sequence[tuple[int, str]]) -> list[Message]:
        if not rows:
            return []
        try:
            with _gc_paused(len(rows)):
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
                    f"({_validation_problem(exc)}); if a newer contextwarden wrote it, upgrade; otherwise "
                    f"{_RESTORE_HINT}.",
                    session_id=session_id,
                ) from None
        return messages

    # state
    @staticmethod
    def _check_slot(slot: str) -> str:
        return check_id(slot, what="slot")

    @staticmethod
    def _encode_state(state: Mapping[str, Any]) -> str:
        if not isinstance(state, Mapping):
            raise UsageError(f"`state` must be a dict, got {type(state).__name__}; wrap the value in a dict.")
        return _dumps(dict(state), what="`state`")

    @staticmethod
    def _decode_state(session_id: str, slot: str, body: str | None) -> dict[str, Any] | None:
        if body is None:
            return None
        value = _loads(body, session_id=session_id, what=f"state {slot!r}")
        if not isinstance(value, dict):
            raise SchemaError(
                f"Session {session_id!r}: the stored state {slot!r} is {type(value).__name__}, not an object; "
                "restore the session from an export or save a fresh state.",
                session_id=session_id,
            )
        return value

    @staticmethod
    def _decode_audit(session_id: str, rows: Sequence[str]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for position, row in enumerate(rows):
            event = _loads(row, session_id=session_id, what="audit event")
            if not isinstance(event, dict):
                raise corrupted(session_id, f"audit event {position}", f"{type(event).__name__}, not an object")
            events.append(event)
        return events

    @staticmethod
    def _conflict(session_id: str, slot: str, expected: int, actual: int) -> VersionConflict:
        return VersionConflict(
            f"Session {session_id!r}: state {slot!r} is at version {actual}, not the expected {expected}; another "
            "writer saved first. Reload it with `load_state`, reapply your change and save again.",
            session_id=session_id,
            expected=expected,
            actual=actual,
        )

    @staticmethod
    def _check_expected(expected_version: int) -> int:
        if isinstance(expected_version, bool) or not isinstance(expected_version, int) or expected_version < 0:
            raise UsageError(
                f"`expected_version` must be an int >= 0 (0 before the first save), got {expected_version!r}; "
                "pass the version `load_state` returned."
            )
        return expected_version

    # misc
    @staticmethod
    def _check_range(name: str, value: int | None, *, allow_none: bool = False) -> None:
        if value is None and allow_none:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise UsageError(f"`{name}` must be an int >= 0, got {value!r}.")

    @staticmethod
    def _missing_snapshot(session_id: str, snapshot_id: str) -> SnapshotError:
        return SnapshotError(
            f"Session {session_id!r} has no snapshot {snapshot_id!r}; list the existing ones with `list_snapshots`."
        )

    def _lock_timeout(self, session_id: str, timeout: float, found: tuple[str, float] | None) -> LockTimeout:
        if found is None:
            return lock_timeout(session_id, timeout, holder=None, since=None, expires_in=None, released=True)
        holder, since = _owner_details(found[0])
        # The read's "now" is taken when it is queued; a busy database can run it after a renewal,
        # and no lease ever has more than one lease left.
        expires_in = min(found[1], self._lock_lease)
        return lock_timeout(session_id, timeout, holder=holder, since=since, expires_in=expires_in)

    def _create_args(
        self,
        session_id: str,
        tenant: str,
        model: str | None,
        window: int | None,
        metadata: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
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
        now = self._clock()
        return {
            "tenant": tenant,
            "model": model,
            "window": window,
            "metadata": _dumps(dict(metadata or {}), what="`metadata`"),
            "created_at": now,
            "last_active": now,
        }

    @staticmethod
    def _tenant_taken(session_id: str, tenant: str) -> SessionNotFound:
        return SessionNotFound(
            f"No session {session_id!r} for tenant {tenant!r} in this store, and the id is taken by another "
            "tenant's session, so it cannot be created for this one; choose another session id.",
            session_id=session_id,
        )

    # export / import
    def _export_header(self, info: SessionInfo) -> str:
        return _export_line(
            {"type": "session", "format": EXPORT_FORMAT, "version": EXPORT_VERSION, "session": info.to_dict()}
        )

    def _export_messages(self, session_id: str, rows: Sequence[tuple[int, str]]) -> Iterator[str]:
        # Decoding validates every row, so an export never carries a corrupted message.
        self._decode_messages(session_id, rows)
        for seq, body in rows:
            yield f'{{"type":"message","seq":{seq},"message":{body}}}\n'

    @staticmethod
    def _export_state(slot: str, body: str, version: int) -> str:
        return f'{{"type":"state","slot":{json.dumps(slot, ensure_ascii=False)},"version":{version},"state":{body}}}\n'

    @staticmethod
    def _export_snapshot(session_id: str, snapshot_id: str, data: bytes, metadata: str) -> str:
        return _export_line(
            {
                "type": "snapshot",
                "snapshot_id": snapshot_id,
                "metadata": _loads(metadata, session_id=session_id, what=f"metadata of snapshot {snapshot_id!r}"),
                "data_b64": base64.b64encode(data).decode("ascii"),
            }
        )

    @staticmethod
    def _export_audit(seq: int, event: str) -> str:
        return f'{{"type":"audit","seq":{seq},"event":{event}}}\n'

    def _read_export(self, lines: Iterable[str | bytes], session_id: str | None, tenant: str | None) -> _ImportPlan:
        """Read and check a whole export; raises before anything is written."""
        if session_id is not None:
            check_id(session_id)
        tenant = _check_tenant(tenant)
        iterator = iter(lines)
        header = self._parse_line(next(iterator, None), 1, session_id)
        if header.get("type") != "session" or header.get("format") != EXPORT_FORMAT:
            raise SchemaError(
                f"line 1 is not a contextwarden session export header (type={header.get('type')!r}, "
                f"format={header.get('format')!r}); pass lines produced by `export_session`.",
                session_id=session_id,
            )
        version = header.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or version > EXPORT_VERSION:
            raise SchemaError(
                f"export version {version!r} is newer than this contextwarden reads ({EXPORT_VERSION}); upgrade "
                "contextwarden to import it.",
                session_id=session_id,
            )
        info = header.get("session")
        if not isinstance(info, dict):
            raise _bad_export(1, "the header has no `session` object (the file is truncated or edited)", session_id)
        plan = _ImportPlan(target="", create={})
        try:
            plan.target = check_id(session_id if session_id is not None else info.get("session_id"))
            plan.create = self._create_args(
                plan.target,
                tenant if tenant is not None else info.get("tenant", "default"),
                info.get("model"),
                info.get("window"),
                info.get("metadata"),
            )
        except UsageError as exc:
            raise _bad_export(1, f"the `session` header: {exc}", session_id) from None
        for name in ("created_at", "last_active", "archived_at"):
            value = info.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise _bad_export(1, f"`session.{name}` is {value!r:.60}, not a Unix time", plan.target)
            if name == "archived_at":
                plan.archived_at = float(value)
            else:
                plan.create[name] = float(value)
        messages: list[Message] = []
        lines_of: list[int] = []
        seen_ids: dict[str, int] = {}
        seen_slots: set[str] = set()
        target = plan.target
        for number, raw in enumerate(iterator, start=2):
            record = self._parse_line(raw, number, target)
            if not record:
                continue
            kind = record.get("type")
            if kind == "message":
                message = self._import_message(record, number, target)
                first = seen_ids.setdefault(message.message_id, number)
                if first != number:
                    raise _bad_export(
                        number, f"message id {message.message_id!r} was already used on line {first}", target
                    )
                messages.append(message)
                lines_of.append(number)
            elif kind == "state":
                plan.states.append(self._import_state(record, number, target, seen_slots))
            elif kind == "snapshot":
                plan.snapshots.append(self._import_snapshot(record, number, target))
            elif kind == "audit":
                event = record.get("event")
                if not isinstance(event, dict):
                    raise _bad_export(number, f"`event` is {type(event).__name__}, not an object", target)
                plan.audit.append(self._import_json(event, number, "event", target))
            else:
                raise _bad_export(number, f"unknown record type {kind!r}", target)
        self._check_import_pairs(messages, lines_of, target)
        try:
            plan.messages = self._encode_messages(messages)
        except MessageError as exc:
            number = lines_of[exc.index] if exc.index is not None else 0
            raise _bad_export(number, str(exc), target) from None
        return plan

    @staticmethod
    def _check_import_pairs(messages: Sequence[Message], lines_of: Sequence[int], session_id: str) -> None:
        """Refuse a transcript a session could never be opened with (`toolpairs.validate`'s pairing).

        A result without its call and a second result for one call are refused; so is a call id
        made again while its first call still waits. Abandoned calls and late results are states
        a live transcript can be in, and stay allowed.
        """
        for problem in toolpairs.validate(messages):
            if problem.kind not in ("orphan-result", "duplicate-result"):
                continue
            message_id = messages[problem.index].message_id
            if problem.kind == "orphan-result":
                what = (
                    f"its `tool_call_id` {problem.call_id!r} answers no call made before it (a result without its call)"
                )
            else:
                what = f"it is a second result for call {problem.call_id!r} (`tool_call_id`); one result per call"
            raise _bad_export(lines_of[problem.index], f"message {message_id!r}: {what}", session_id)
        waiting: set[str] = set()
        for index, message in enumerate(messages):
            if message.role == "tool":
                waiting.discard(message.tool_call_id or "")
            for call in message.tool_calls:
                if call.call_id in waiting:
                    raise _bad_export(
                        lines_of[index],
                        f"`tool_calls`: call id {call.call_id!r} is made again while its earlier call still waits "
                        "for its result; give the calls distinct ids",
                        session_id,
                    )
                waiting.add(call.call_id)

    @staticmethod
    def _import_json(value: object, number: int, name: str, session_id: str) -> str:
        try:
            return _dumps(value, what=f"`{name}`")
        except UsageError as exc:
            raise _bad_export(number, str(exc), session_id) from None

    def _import_state(
        self, record: Mapping[str, Any], number: int, session_id: str, seen: set[str]
    ) -> tuple[str, str, int]:
        slot = record.get("slot", DEFAULT_SLOT)
        problem = _id_problem(slot, "slot")
        if problem is not None:
            raise _bad_export(number, problem, session_id)
        if slot in seen:
            raise _bad_export(number, f"state slot {slot!r} appears twice", session_id)
        seen.add(slot)
        state = record.get("state")
        if not isinstance(state, dict):
            raise _bad_export(number, f"`state` is {type(state).__name__}, not an object", session_id)
        version = record.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise _bad_export(number, f"`version` {version!r:.60} is not an int >= 1", session_id)
        if slot == DEFAULT_SLOT:
            # the view state must open: a session that imports and then never loads is worse than a refusal
            from ..compaction.state import check_saved_view

            try:
                check_saved_view(session_id, state)
            except SchemaError as exc:
                raise _bad_export(number, f"the view state cannot be opened ({exc})", session_id) from None
        return slot, self._import_json(state, number, "state", session_id), version

    def _import_snapshot(self, record: Mapping[str, Any], number: int, session_id: str) -> tuple[str, bytes, str]:
        snapshot_id = record.get("snapshot_id")
        problem = _id_problem(snapshot_id, "snapshot_id")
        if problem is not None:
            raise _bad_export(number, problem, session_id)
        assert isinstance(snapshot_id, str)
        try:
            data = base64.b64decode(record["data_b64"], validate=True)
        except (KeyError, TypeError, ValueError) as exc:
            raise _bad_export(number, f"`data_b64` is not base64 ({exc})", session_id) from None
        metadata = record.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise _bad_export(number, f"`metadata` is {type(metadata).__name__}, not an object", session_id)
        return snapshot_id, data, self._import_json(metadata, number, "metadata", session_id)

    def _import_flow(self, plan: _ImportPlan) -> Op[SessionInfo]:
        """Yield the writes of a checked export; a failure removes the partial import."""
        target = plan.target
        existing = yield self._ops.get_session(target)
        if existing is not None:
            raise SessionExists(
                f"Session {target!r} already exists; delete it first or import under another `session_id`.",
                session_id=target,
            )
        yield self._ops.create_session(target, **plan.create)
        try:
            for start in range(0, len(plan.messages), _IMPORT_BATCH):
                batch = plan.messages[start : start + _IMPORT_BATCH]
                yield self._ops.append_messages(target, batch, now=self._clock())
            for slot, body, version in plan.states:
                yield self._ops.restore_state(target, slot, body, version=version, now=self._clock())
            for snapshot_id, data, meta in plan.snapshots:
                yield self._ops.put_snapshot(target, snapshot_id, data, meta, now=self._clock())
            for event in plan.audit:
                yield self._ops.append_audit(target, event, now=self._clock())
            if plan.archived_at is not None:
                yield self._ops.archive(target, now=plan.archived_at)
            result = yield self._ops.get_session(target)
        except GeneratorExit:
            raise
        except BaseException:
            yield self._ops.delete_session(target)
            raise
        assert isinstance(result, SessionInfo)
        return result

    @staticmethod
    def _parse_line(raw: str | bytes | None, number: int, session_id: str | None) -> dict[str, Any]:
        if raw is None:
            raise SchemaError("the export is empty; pass the lines `export_session` produced.", session_id=session_id)
        if isinstance(raw, bytes):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _bad_export(number, f"not valid UTF-8 ({exc.reason} at byte {exc.start})", session_id) from None
        elif isinstance(raw, str):
            text = raw
        else:
            raise _bad_export(number, f"a {type(raw).__name__}, not a line of text", session_id)
        if not text.strip():
            return {}
        try:
            record = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise SchemaError(
                f"line {number} of the export is not JSON ({exc}); the file is truncated or edited.",
                session_id=session_id,
            ) from None
        if not isinstance(record, dict):
            raise SchemaError(f"line {number} of the export is not a JSON object.", session_id=session_id)
        return record

    @staticmethod
    def _import_message(record: Mapping[str, Any], number: int, session_id: str) -> Message:
        try:
            message = Message.from_dict(record["message"])
        except (KeyError, TypeError, ValueError, ValidationError) as exc:
            raise _bad_export(
                number, f"the message cannot be decoded ({_validation_problem(exc)})", session_id
            ) from None
        try:
            return check_message(message)
        except MessageError as exc:
            field_name = f"`{exc.field}` of " if exc.field else ""
            raise _bad_export(number, f"{field_name}message {message.message_id!r}: {exc}", session_id) from None


# --- sync base ------------------------------------------------------------------------------------


class BaseStore(_StoreCommon):
    """Shared implementation of `SessionStore`; a backend provides ``_ops`` and ``_run``."""

    def _run(self, op: Op[T], *, write: bool) -> T:
        """Run ``op`` in one transaction (a write transaction when ``write``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement `_run`")

    def setup(self) -> None:
        """Create or migrate the backend's schema (idempotent; stores also do it on first use)."""
        self._run(self._ops.setup(), write=True)

    def close(self) -> None:
        """Release the resources the store owns (a given connection or client stays open)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # lifecycle
    def create_session(
        self,
        session_id: str,
        *,
        tenant: str = "default",
        model: str | None = None,
        window: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        args = self._create_args(session_id, tenant, model, window, metadata)
        info = self._run(self._ops.create_session(session_id, **args), write=True)
        if info.tenant != tenant:
            raise self._tenant_taken(session_id, tenant)
        return info

    def get_session(self, session_id: str, *, tenant: str | None = None) -> SessionInfo:
        tenant = _check_tenant(tenant)
        info = self._run(self._ops.get_session(check_id(session_id), tenant=tenant), write=False)
        if info is None:
            raise not_found(session_id, tenant)
        return info

    def touch(self, session_id: str, *, tenant: str | None = None) -> None:
        op = self._ops.touch(check_id(session_id), now=self._clock(), tenant=_check_tenant(tenant))
        self._run(op, write=True)

    def list_sessions(
        self,
        *,
        tenant: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        include_archived: bool = False,
    ) -> tuple[list[SessionInfo], str | None]:
        if tenant is not None:
            check_id(tenant, what="tenant")
        if cursor is not None:
            check_id(cursor, what="cursor")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise UsageError(f"`limit` must be an int >= 1, got {limit!r}.")
        rows = self._run(
            self._ops.list_sessions(tenant=tenant, limit=limit + 1, after=cursor, include_archived=include_archived),
            write=False,
        )
        page = rows[:limit]
        return page, (page[-1].session_id if len(rows) > limit else None)

    def archive(self, session_id: str, *, tenant: str | None = None) -> None:
        op = self._ops.archive(check_id(session_id), now=self._clock(), tenant=_check_tenant(tenant))
        self._run(op, write=True)

    def delete_session(self, session_id: str, *, tenant: str | None = None) -> None:
        self._run(self._ops.delete_session(check_id(session_id), tenant=_check_tenant(tenant)), write=True)

    def expire_idle(self, max_idle_seconds: float) -> list[str]:
        if not max_idle_seconds >= 0:
            raise UsageError(f"`max_idle_seconds` must be >= 0, got {max_idle_seconds!r}.")
        return self._run(self._ops.expire_idle(cutoff=self._clock() - max_idle_seconds), write=True)

    # transcript
    def append_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        tenant: str | None = None,
        expected_count: int | None = None,
    ) -> int:
        check_id(session_id)
        tenant = _check_tenant(tenant)
        self._check_range("expected_count", expected_count, allow_none=True)
        items = self._encode_messages(messages)
        op = self._ops.append_messages(session_id, items, now=self._clock(), tenant=tenant, expected=expected_count)
        return self._run(op, write=True)

    def load_messages(
        self, session_id: str, *, start: int = 0, limit: int | None = None, tenant: str | None = None
    ) -> list[Message]:
        check_id(session_id)
        self._check_range("start", start)
        self._check_range("limit", limit, allow_none=True)
        op = self._ops.load_messages(session_id, start=start, limit=limit, tenant=_check_tenant(tenant))
        return self._decode_messages(session_id, self._run(op, write=False))

    def count_messages(self, session_id: str, *, tenant: str | None = None) -> int:
        return self._run(self._ops.count_messages(check_id(session_id), tenant=_check_tenant(tenant)), write=False)

    def get_message(self, session_id: str, message_id: str, *, tenant: str | None = None) -> Message:
        check_id(session_id)
        op = self._ops.get_message(session_id, check_id(message_id, what="message_id"), tenant=_check_tenant(tenant))
        row = self._run(op, write=False)
        if row is None:
            raise MessageNotFound(
                f"Session {session_id!r} has no message {message_id!r}.", session_id=session_id, message_id=message_id
            )
        return self._decode_messages(session_id, [row])[0]

    # state
    def load_state(
        self, session_id: str, *, slot: str = DEFAULT_SLOT, tenant: str | None = None
    ) -> tuple[dict[str, Any] | None, int]:
        check_id(session_id)
        op = self._ops.load_state(session_id, self._check_slot(slot), tenant=_check_tenant(tenant))
        body, version = self._run(op, write=False)
        stored = stored_int(version, session_id=session_id, what=f"version of state {slot!r}", minimum=0)
        return self._decode_state(session_id, slot, body), stored

    def save_state(
        self,
        session_id: str,
        state: Mapping[str, Any],
        *,
        expected_version: int,
        slot: str = DEFAULT_SLOT,
        tenant: str | None = None,
    ) -> int:
        check_id(session_id)
        expected = self._check_expected(expected_version)
        body = self._encode_state(state)
        op = self._ops.save_state(
            session_id,
            self._check_slot(slot),
            body,
            expected=expected,
            now=self._clock(),
            token=uuid.uuid4().hex,
            tenant=_check_tenant(tenant),
        )
        ok, version = self._run(op, write=True)
        if not ok:
            raise self._conflict(session_id, slot, expected, version)
        return version

    # snapshots
    def put_snapshot(
        self,
        session_id: str,
        snapshot_id: str,
        data: bytes,
        *,
        metadata: Mapping[str, Any] | None = None,
        tenant: str | None = None,
    ) -> None:
        check_id(session_id)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise UsageError(f"snapshot data must be bytes, got {type(data).__name__}; encode text with `.encode()`.")
        meta = _dumps(dict(metadata or {}), what="snapshot `metadata`")
        op = self._ops.put_snapshot(
            session_id,
            _check_snapshot_id(snapshot_id),
            bytes(data),
            meta,
            now=self._clock(),
            tenant=_check_tenant(tenant),
        )
        self._run(op, write=True)

    def get_snapshot(self, session_id: str, snapshot_id: str, *, tenant: str | None = None) -> bytes:
        check_id(session_id)
        op = self._ops.get_snapshot(session_id, _check_snapshot_id(snapshot_id), tenant=_check_tenant(tenant))
        row = self._run(op, write=False)
        if row is None:
            raise self._missing_snapshot(session_id, snapshot_id)
        return row[0]

    def list_snapshots(self, session_id: str, *, tenant: str | None = None) -> list[str]:
        return self._run(self._ops.list_snapshots(check_id(session_id), tenant=_check_tenant(tenant)), write=False)

    # audit
    def append_audit(self, session_id: str, event: Mapping[str, Any], *, tenant: str | None = None) -> None:
        check_id(session_id)
        if not isinstance(event, Mapping):
            raise UsageError(f"an audit event must be a dict, got {type(event).__name__}.")
        body = _dumps(dict(event), what="the audit event")
        self._run(self._ops.append_audit(session_id, body, now=self._clock(), tenant=_check_tenant(tenant)), write=True)

    def read_audit(
        self, session_id: str, *, since: int = 0, limit: int | None = None, tenant: str | None = None
    ) -> list[dict[str, Any]]:
        check_id(session_id)
        self._check_range("since", since)
        self._check_range("limit", limit, allow_none=True)
        op = self._ops.read_audit(session_id, since=since, limit=limit, tenant=_check_tenant(tenant))
        return self._decode_audit(session_id, self._run(op, write=False))

    # export / import
    def export_session(self, session_id: str, *, tenant: str | None = None) -> Iterator[str]:
        info = self.get_session(session_id, tenant=tenant)
        yield self._export_header(info)
        start = 0
        while True:
            rows = self._run(self._ops.load_messages(session_id, start=start, limit=_PAGE, tenant=tenant), write=False)
            yield from self._export_messages(session_id, rows)
            start += len(rows)
            if len(rows) < _PAGE:
                break
        for slot, body, version in self._run(self._ops.list_states(session_id, tenant=tenant), write=False):
            self._decode_state(session_id, slot, body)
            yield self._export_state(slot, body, version)
        for snapshot_id in self._run(self._ops.list_snapshots(session_id, tenant=tenant), write=False):
            record = self._run(self._ops.get_snapshot(session_id, snapshot_id, tenant=tenant), write=False)
            if record is not None:
                yield self._export_snapshot(session_id, snapshot_id, *record)
        since = 0
        while True:
            events = self._run(self._ops.read_audit(session_id, since=since, limit=_PAGE, tenant=tenant), write=False)
            self._decode_audit(session_id, events)
            for offset, event in enumerate(events):
                yield self._export_audit(since + offset, event)
            since += len(events)
            if len(events) < _PAGE:
                break

    def import_session(
        self, lines: Iterable[str | bytes], *, session_id: str | None = None, tenant: str | None = None
    ) -> SessionInfo:
        flow = self._import_flow(self._read_export(lines, session_id, tenant))
        try:
            op = next(flow)
            while True:
                try:
                    result = self._run(op, write=True)
                except BaseException as exc:
                    op = flow.throw(exc)
                else:
                    op = flow.send(result)
        except StopIteration as stop:
            info: SessionInfo = stop.value
            return info
        finally:
            flow.close()

    # locking
    @contextmanager
    def lock(self, session_id: str, *, timeout: float = 10.0, tenant: str | None = None) -> Iterator[None]:
        check_id(session_id)
        tenant = _check_tenant(tenant)
        owner = _new_owner()
        deadline = time.monotonic() + timeout
        delay = 0.002
        # Leases run on the wall clock, shared by every process (not the injectable `clock`).
        while not self._run(
            self._ops.try_lock(session_id, owner, lease=self._lock_lease, now=time.time(), tenant=tenant), write=True
        ):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                found = self._run(self._ops.lock_holder(session_id, now=time.time()), write=False)
                raise self._lock_timeout(session_id, timeout, found)
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.05)
        heartbeat = _Heartbeat(self, session_id, owner)
        heartbeat.start()
        try:
            yield
        finally:
            heartbeat.stop()
            try:
                self._run(self._ops.unlock(session_id, owner), write=True)
            except StoreError as exc:  # the lease ends it; the block's own outcome must not be masked
                logger.warning("session %r: releasing its lock failed (%s); it ends with its lease", session_id, exc)


# --- async base ---------------------------------------------------------------------------------


class BaseAsyncStore(_StoreCommon):
    """Shared implementation of `AsyncSessionStore`; a backend provides ``_ops`` and an async ``_run``."""

    async def _run(self, op: Op[T], *, write: bool) -> T:
        """Run ``op`` in one transaction (a write transaction when ``write``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement `_run`")

    async def setup(self) -> None:
        """Create or migrate the backend's schema (idempotent; stores also do it on first use)."""
        await self._run(self._ops.setup(), write=True)

    async def aclose(self) -> None:
        """Release the resources the store owns (a given connection or client stays open)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def create_session(
        self,
        session_id: str,
        *,
        tenant: str = "default",
        model: str | None = None,
        window: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        args = self._create_args(session_id, tenant, model, window, metadata)
        info = await self._run(self._ops.create_session(session_id, **args), write=True)
        if info.tenant != tenant:
            raise self._tenant_taken(session_id, tenant)
        return info

    async def get_session(self, session_id: str, *, tenant: str | None = None) -> SessionInfo:
        tenant = _check_tenant(tenant)
        info = await self._run(self._ops.get_session(check_id(session_id), tenant=tenant), write=False)
        if info is None:
            raise not_found(session_id, tenant)
        return info

    async def touch(self, session_id: str, *, tenant: str | None = None) -> None:
        op = self._ops.touch(check_id(session_id), now=self._clock(), tenant=_check_tenant(tenant))
        await self._run(op, write=True)

    async def list_sessions(
        self,
        *,
        tenant: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        include_archived: bool = False,
    ) -> tuple[list[SessionInfo], str | None]:
        if tenant is not None:
            check_id(tenant, what="tenant")
        if cursor is not None:
            check_id(cursor, what="cursor")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise UsageError(f"`limit` must be an int >= 1, got {limit!r}.")
        rows = await self._run(
            self._ops.list_sessions(tenant=tenant, limit=limit + 1, after=cursor, include_archived=include_archived),
            write=False,
        )
        page = rows[:limit]
        return page, (page[-1].session_id if len(rows) > limit else None)

    async def archive(self, session_id: str, *, tenant: str | None = None) -> None:
        op = self._ops.archive(check_id(session_id), now=self._clock(), tenant=_check_tenant(tenant))
        await self._run(op, write=True)

    async def delete_session(self, session_id: str, *, tenant: str | None = None) -> None:
        await self._run(self._ops.delete_session(check_id(session_id), tenant=_check_tenant(tenant)), write=True)

    async def expire_idle(self, max_idle_seconds: float) -> list[str]:
        if not max_idle_seconds >= 0:
            raise UsageError(f"`max_idle_seconds` must be >= 0, got {max_idle_seconds!r}.")
        return await self._run(self._ops.expire_idle(cutoff=self._clock() - max_idle_seconds), write=True)

    async def append_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        tenant: str | None = None,
        expected_count: int | None = None,
    ) -> int:
        check_id(session_id)
        tenant = _check_tenant(tenant)
        self._check_range("expected_count", expected_count, allow_none=True)
        items = self._encode_messages(messages)
        op = self._ops.append_messages(session_id, items, now=self._clock(), tenant=tenant, expected=expected_count)
        return await self._run(op, write=True)

    async def load_messages(
        self, session_id: str, *, start: int = 0, limit: int | None = None, tenant: str | None = None
    ) -> list[Message]:
        check_id(session_id)
        self._check_range("start", start)
        self._check_range("limit", limit, allow_none=True)
        op = self._ops.load_messages(session_id, start=start, limit=limit, tenant=_check_tenant(tenant))
        return self._decode_messages(session_id, await self._run(op, write=False))

    async def count_messages(self, session_id: str, *, tenant: str | None = None) -> int:
        op = self._ops.count_messages(check_id(session_id), tenant=_check_tenant(tenant))
        return await self._run(op, write=False)

    async def get_message(self, session_id: str, message_id: str, *, tenant: str | None = None) -> Message:
        check_id(session_id)
        op = self._ops.get_message(session_id, check_id(message_id, what="message_id"), tenant=_check_tenant(tenant))
        row = await self._run(op, write=False)
        if row is None:
            raise MessageNotFound(
                f"Session {session_id!r} has no message {message_id!r}.", session_id=session_id, message_id=message_id
            )
        return self._decode_messages(session_id, [row])[0]

    async def load_state(
        self, session_id: str, *, slot: str = DEFAULT_SLOT, tenant: str | None = None
    ) -> tuple[dict[str, Any] | None, int]:
        check_id(session_id)
        op = self._ops.load_state(session_id, self._check_slot(slot), tenant=_check_tenant(tenant))
        body, version = await self._run(op, write=False)
        stored = stored_int(version, session_id=session_id, what=f"version of state {slot!r}", minimum=0)
        return self._decode_state(session_id, slot, body), stored

    async def save_state(
        self,
        session_id: str,
        state: Mapping[str, Any],
        *,
        expected_version: int,
        slot: str = DEFAULT_SLOT,
        tenant: str | None = None,
    ) -> int:
        check_id(session_id)
        expected = self._check_expected(expected_version)
        body = self._encode_state(state)
        op = self._ops.save_state(
            session_id,
            self._check_slot(slot),
            body,
            expected=expected,
            now=self._clock(),
            token=uuid.uuid4().hex,
            tenant=_check_tenant(tenant),
        )
        ok, version = await self._run(op, write=True)
        if not ok:
            raise self._conflict(session_id, slot, expected, version)
        return version

    async def put_snapshot(
        self,
        session_id: str,
        snapshot_id: str,
        data: bytes,
        *,
        metadata: Mapping[str, Any] | None = None,
        tenant: str | None = None,
    ) -> None:
        check_id(session_id)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise UsageError(f"snapshot data must be bytes, got {type(data).__name__}; encode text with `.encode()`.")
        meta = _dumps(dict(metadata or {}), what="snapshot `metadata`")
        op = self._ops.put_snapshot(
            session_id,
            _check_snapshot_id(snapshot_id),
            bytes(data),
            meta,
            now=self._clock(),
            tenant=_check_tenant(tenant),
        )
        await self._run(op, write=True)

    async def get_snapshot(self, session_id: str, snapshot_id: str, *, tenant: str | None = None) -> bytes:
        check_id(session_id)
        op = self._ops.get_snapshot(session_id, _check_snapshot_id(snapshot_id), tenant=_check_tenant(tenant))
        row = await self._run(op, write=False)
        if row is None:
            raise self._missing_snapshot(session_id, snapshot_id)
        return row[0]

    async def list_snapshots(self, session_id: str, *, tenant: str | None = None) -> list[str]:
        op = self._ops.list_snapshots(check_id(session_id), tenant=_check_tenant(tenant))
        return await self._run(op, write=False)

    async def append_audit(self, session_id: str, event: Mapping[str, Any], *, tenant: str | None = None) -> None:
        check_id(session_id)
        if not isinstance(event, Mapping):
            raise UsageError(f"an audit event must be a dict, got {type(event).__name__}.")
        body = _dumps(dict(event), what="the audit event")
        op = self._ops.append_audit(session_id, body, now=self._clock(), tenant=_check_tenant(tenant))
        await self._run(op, write=True)

    async def read_audit(
        self, session_id: str, *, since: int = 0, limit: int | None = None, tenant: str | None = None
    ) -> list[dict[str, Any]]:
        check_id(session_id)
        self._check_range("since", since)
        self._check_range("limit", limit, allow_none=True)
        op = self._ops.read_audit(session_id, since=since, limit=limit, tenant=_check_tenant(tenant))
        return self._decode_audit(session_id, await self._run(op, write=False))

    async def export_session(self, session_id: str, *, tenant: str | None = None) -> AsyncIterator[str]:
        info = await self.get_session(session_id, tenant=tenant)
        yield self._export_header(info)
        start = 0
        while True:
            op = self._ops.load_messages(session_id, start=start, limit=_PAGE, tenant=tenant)
            rows = await self._run(op, write=False)
            for line in self._export_messages(session_id, rows):
                yield line
            start += len(rows)
            if len(rows) < _PAGE:
                break
        for slot, body, version in await self._run(self._ops.list_states(session_id, tenant=tenant), write=False):
            self._decode_state(session_id, slot, body)
            yield self._export_state(slot, body, version)
        for snapshot_id in await self._run(self._ops.list_snapshots(session_id, tenant=tenant), write=False):
            record = await self._run(self._ops.get_snapshot(session_id, snapshot_id, tenant=tenant), write=False)
            if record is not None:
                yield self._export_snapshot(session_id, snapshot_id, *record)
        since = 0
        while True:
            op_audit = self._ops.read_audit(session_id, since=since, limit=_PAGE, tenant=tenant)
            events = await self._run(op_audit, write=False)
            self._decode_audit(session_id, events)
            for offset, event in enumerate(events):
                yield self._export_audit(since + offset, event)
            since += len(events)
            if len(events) < _PAGE:
                break

    async def import_session(
        self,
        lines: Iterable[str | bytes] | AsyncIterable[str | bytes],
        *,
        session_id: str | None = None,
        tenant: str | None = None,
    ) -> SessionInfo:
        # An async source is read fully first: the import is checked whole before it writes.
        source: Iterable[str | bytes] = [line async for line in lines] if isinstance(lines, AsyncIterable) else lines
        flow = self._import_flow(self._read_export(source, session_id, tenant))
        try:
            op = next(flow)
            while True:
                try:
                    result = await self._run(op, write=True)
                except BaseException as exc:
                    op = flow.throw(exc)
                else:
                    op = flow.send(result)
        except StopIteration as stop:
            info: SessionInfo = stop.value
            return info
        finally:
            flow.close()

    @asynccontextmanager
    async def lock(self, session_id: str, *, timeout: float = 10.0, tenant: str | None = None) -> AsyncIterator[None]:
        check_id(session_id)
        tenant = _check_tenant(tenant)
        owner = _new_owner()
        deadline = time.monotonic() + timeout
        delay = 0.002
        while not await self._run(
            self._ops.try_lock(session_id, owner, lease=self._lock_lease, now=time.time(), tenant=tenant), write=True
        ):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                found = await self._run(self._ops.lock_holder(session_id, now=time.time()), write=False)
                raise self._lock_timeout(session_id, timeout, found)
            await anyio.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.05)
        try:
            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(self._heartbeat, session_id, owner)
                    try:
                        yield
                    finally:
                        group.cancel_scope.cancel()
            except BaseExceptionGroup as errors:
                # The heartbeat never raises: the group holds the block's own exception.
                raise _sole(errors) from None
        finally:
            # A cancelled holder must still release, or the lock stays taken until its lease ends.
            with anyio.CancelScope(shield=True):
                try:
                    await self._run(self._ops.unlock(session_id, owner), write=True)
                except StoreError as exc:
                    logger.warning(
                        "session %r: releasing its lock failed (%s); it ends with its lease", session_id, exc
                    )

    async def _heartbeat(self, session_id: str, owner: str) -> None:
        """Renew the lease every quarter of it until cancelled (when the lock's block ends)."""
        lease = self._lock_lease
        while True:
            await anyio.sleep(lease / 4)
            try:
                held = await self._run(
                    self._ops.renew_lock(session_id, owner, lease=lease, now=time.time()), write=True
                )
            except Exception as exc:  # the next beat retries; the lease covers three missed ones
                logger.warning("session %r: renewing its lock failed (%s); retrying", session_id, exc)
                continue
            if not held:
                logger.warning(
                    "session %r: its lock was taken over after the lease ran out; this holder's state save is "
                    "still checked by compare-and-set",
                    session_id,
                )
                return
