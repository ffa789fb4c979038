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
"""

from __future__ import annotations

import base64
import gc
import json
import math
import re
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

from ..exceptions import (
    LockTimeout,
    MessageError,
    MessageNotFound,
    SchemaError,
    SessionExists,
    SessionNotFound,
    SnapshotError,
    UsageError,
    VersionConflict,
)
from ..messages import Message, MessagesAdapter

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

T = TypeVar("T")
Op = Generator[Any, Any, T]
"""A sans-IO store operation: yields backend commands, receives their results, returns a value."""

FORMAT_VERSION = 1
"""Storage format of one session's data; a row with a larger number was written by a newer release."""
EXPORT_FORMAT = "contextkeeper.session"
EXPORT_VERSION = 1
MAX_ID_LENGTH = 200
"""Longest accepted session, snapshot, tenant or slot id, in characters."""
DEFAULT_SLOT = "view"
"""State slot of the compaction view state; `AgentState` uses ``"agent"``."""
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


def _loads(text: str | bytes, *, session_id: str, what: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise SchemaError(
            f"Session {session_id!r}: the stored {what} is corrupted ({exc}); restore the session from an "
            "export with `import_session`, or delete it.",
            session_id=session_id,
        ) from None


def not_found(session_id: str) -> SessionNotFound:
    """The error for a missing session (raised by backends' operations)."""
    return SessionNotFound(
        f"No session {session_id!r} in this store; create it with `create_session` first.", session_id=session_id
    )


def check_format(session_id: str, fmt: int) -> None:
    """Refuse a session written in a storage format newer than this release reads."""
    if fmt > FORMAT_VERSION:
        raise SchemaError(
            f"Session {session_id!r} is stored in format {fmt}, but this contextkeeper reads formats up to "
            f"{FORMAT_VERSION}; upgrade contextkeeper (`pip install -U contextkeeper`), or export the session with "
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
    tenant: str,
    created_at: float,
    last_active: float,
    model: str | None,
    window: int | None,
    metadata: str,
    archived_at: float | None,
    message_count: int,
    fmt: int,
) -> SessionInfo:
    """Build a `SessionInfo` from stored fields, checking the format and the metadata JSON."""
    check_format(session_id, fmt)
    meta = _loads(metadata, session_id=session_id, what="session metadata")
    if not isinstance(meta, dict):
        raise SchemaError(
            f"Session {session_id!r}: the stored metadata is {type(meta).__name__}, not an object; the row is "
            "corrupted; restore the session from an export or delete it.",
            session_id=session_id,
        )
    return SessionInfo(
        session_id=session_id,
        tenant=tenant,
        created_at=float(created_at),
        last_active=float(last_active),
        model=model,
        window=None if window is None else int(window),
        metadata=meta,
        archived_at=None if archived_at is None else float(archived_at),
        message_count=int(message_count),
    )


# --- the Protocols ----------------------------------------------------------------------------


@runtime_checkable
class SessionStore(Protocol):
    """Where sessions live: transcript, versioned state, snapshots, audit log and metadata.

    Every method taking a ``session_id`` raises `SessionNotFound` when the session does not exist
    (create it with `create_session`), `UsageError` for an invalid id, and `StoreUnavailable` when
    the backing server cannot be reached.
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
        """Create the session if it is missing; return it (the existing one, unchanged, if it was there)."""
        ...

    def get_session(self, session_id: str) -> SessionInfo:
        """The session's metadata."""
        ...

    def touch(self, session_id: str) -> None:
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
        """One page of sessions ordered by id, and the cursor of the next page (None after the last)."""
        ...

    def archive(self, session_id: str) -> None:
        """Archive the session: kept and readable, but hidden from listing and never expired."""
        ...

    def delete_session(self, session_id: str) -> None:
        """Delete the session and everything stored under it."""
        ...

    def expire_idle(self, max_idle_seconds: float) -> list[str]:
        """Delete every non-archived session idle for longer than ``max_idle_seconds``; return their ids."""
        ...

    def append_messages(self, session_id: str, messages: Sequence[Message]) -> int:
        """Append to the transcript in one transaction; return how many were new.

        A message whose ``message_id`` is already stored is skipped (appends are idempotent). The
        batch is all-or-nothing and keeps its order.
        """
        ...

    def load_messages(self, session_id: str, *, start: int = 0, limit: int | None = None) -> list[Message]:
        """Transcript messages from position ``start`` (0-based), at most ``limit`` of them."""
        ...

    def count_messages(self, session_id: str) -> int:
        """Number of messages in the transcript."""
        ...

    def get_message(self, session_id: str, message_id: str) -> Message:
        """One transcript message by id; raises `MessageNotFound` when absent."""
        ...

    def load_state(self, session_id: str, *, slot: str = DEFAULT_SLOT) -> tuple[dict[str, Any] | None, int]:
        """The JSON state saved in ``slot`` and its version (``(None, 0)`` before the first save)."""
        ...

    def save_state(
        self, session_id: str, state: Mapping[str, Any], *, expected_version: int, slot: str = DEFAULT_SLOT
    ) -> int:
        """Compare-and-set: save ``state`` if the stored version is ``expected_version``; return the new version.

        Raises:
            VersionConflict: another writer saved first; reload with `load_state` and retry.
        """
        ...

    def put_snapshot(
        self, session_id: str, snapshot_id: str, data: bytes, *, metadata: Mapping[str, Any] | None = None
    ) -> None:
        """Store a blob under the session; writing the same id again replaces it."""
        ...

    def get_snapshot(self, session_id: str, snapshot_id: str) -> bytes:
        """The blob stored under ``snapshot_id``; raises `SnapshotError` when missing."""
        ...

    def list_snapshots(self, session_id: str) -> list[str]:
        """Snapshot ids of the session, sorted."""
        ...

    def append_audit(self, session_id: str, event: Mapping[str, Any]) -> None:
        """Append one JSON event to the session's audit log."""
        ...

    def read_audit(self, session_id: str, *, since: int = 0, limit: int | None = None) -> list[dict[str, Any]]:
        """Audit events from position ``since`` (0-based), oldest first."""
        ...

    def export_session(self, session_id: str) -> Iterator[str]:
        """The whole session as JSONL lines (each ending in a newline), for `import_session`."""
        ...

    def import_session(self, lines: Iterable[str | bytes], *, session_id: str | None = None) -> SessionInfo:
        """Recreate a session from `export_session` lines, under ``session_id`` or the exported id.

        Raises:
            SessionExists: the target session already exists.
            SchemaError: the lines are not a contextkeeper export.
        """
        ...

    def lock(self, session_id: str, *, timeout: float = 10.0) -> AbstractContextManager[None]:
        """Hold the session's lock (for compaction) while the block runs; `LockTimeout` after ``timeout`` s."""
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

    async def get_session(self, session_id: str) -> SessionInfo: ...

    async def touch(self, session_id: str) -> None: ...

    async def list_sessions(
        self,
        *,
        tenant: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        include_archived: bool = False,
    ) -> tuple[list[SessionInfo], str | None]: ...

    async def archive(self, session_id: str) -> None: ...

    async def delete_session(self, session_id: str) -> None: ...

    async def expire_idle(self, max_idle_seconds: float) -> list[str]: ...

    async def append_messages(self, session_id: str, messages: Sequence[Message]) -> int: ...

    async def load_messages(self, session_id: str, *, start: int = 0, limit: int | None = None) -> list[Message]: ...

    async def count_messages(self, session_id: str) -> int: ...

    async def get_message(self, session_id: str, message_id: str) -> Message: ...

    async def load_state(self, session_id: str, *, slot: str = DEFAULT_SLOT) -> tuple[dict[str, Any] | None, int]: ...

    async def save_state(
        self, session_id: str, state: Mapping[str, Any], *, expected_version: int, slot: str = DEFAULT_SLOT
    ) -> int: ...

    async def put_snapshot(
        self, session_id: str, snapshot_id: str, data: bytes, *, metadata: Mapping[str, Any] | None = None
    ) -> None: ...

    async def get_snapshot(self, session_id: str, snapshot_id: str) -> bytes: ...

    async def list_snapshots(self, session_id: str) -> list[str]: ...

    async def append_audit(self, session_id: str, event: Mapping[str, Any]) -> None: ...

    async def read_audit(
        self, session_id: str, *, since: int = 0, limit: int | None = None
    ) -> list[dict[str, Any]]: ...

    def export_session(self, session_id: str) -> AsyncIterator[str]: ...

    async def import_session(
        self, lines: Iterable[str | bytes] | AsyncIterable[str | bytes], *, session_id: str | None = None
    ) -> SessionInfo: ...

    def lock(self, session_id: str, *, timeout: float = 10.0) -> AbstractAsyncContextManager[None]: ...

    async def aclose(self) -> None: ...


class StoreOps(Protocol):
    """The sans-IO operations a backend implements (internal; see the module docstring).

    Operations raise `SessionNotFound` (via `not_found`) for a missing session and check its
    storage format with `check_format`. Ids arrive validated and payloads arrive as JSON text.
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

    def get_session(self, session_id: str) -> Op[SessionInfo | None]: ...

    def touch(self, session_id: str, *, now: float) -> Op[None]: ...

    def list_sessions(
        self, *, tenant: str | None, limit: int, after: str | None, include_archived: bool
    ) -> Op[list[SessionInfo]]: ...

    def archive(self, session_id: str, *, now: float) -> Op[None]: ...

    def delete_session(self, session_id: str) -> Op[None]: ...

    def expire_idle(self, *, cutoff: float) -> Op[list[str]]: ...

    def append_messages(self, session_id: str, items: Sequence[tuple[str, str]], *, now: float) -> Op[int]: ...

    def load_messages(self, session_id: str, *, start: int, limit: int | None) -> Op[list[tuple[int, str]]]: ...

    def count_messages(self, session_id: str) -> Op[int]: ...

    def get_message(self, session_id: str, message_id: str) -> Op[tuple[int, str] | None]: ...

    def load_state(self, session_id: str, slot: str) -> Op[tuple[str | None, int]]: ...

    def save_state(
        self, session_id: str, slot: str, body: str, *, expected: int, now: float, token: str
    ) -> Op[tuple[bool, int]]: ...

    def restore_state(self, session_id: str, slot: str, body: str, *, version: int, now: float) -> Op[None]: ...

    def list_states(self, session_id: str) -> Op[list[tuple[str, str, int]]]: ...

    def put_snapshot(
        self, session_id: str, snapshot_id: str, data: bytes, metadata: str, *, now: float
    ) -> Op[None]: ...

    def get_snapshot(self, session_id: str, snapshot_id: str) -> Op[tuple[bytes, str] | None]: ...

    def list_snapshots(self, session_id: str) -> Op[list[str]]: ...

    def append_audit(self, session_id: str, event: str, *, now: float) -> Op[None]: ...

    def read_audit(self, session_id: str, *, since: int, limit: int | None) -> Op[list[str]]: ...

    def try_lock(self, session_id: str, token: str, *, lease: float, now: float) -> Op[bool]: ...

    def unlock(self, session_id: str, token: str) -> Op[None]: ...


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


class _StoreCommon:
    """Validation, serialization and the export/import format, shared by both twins."""

    _ops: StoreOps

    def __init__(self, *, clock: Callable[[], float] = time.time, lock_lease: float = 60.0) -> None:
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
        except (ValidationError, ValueError):
            pass
        # Find the culprit so the error can name it.
        messages: list[Message] = []
        for seq, body in rows:
            try:
                messages.append(_MessageAdapter.validate_json(body))
            except (ValidationError, ValueError) as exc:
                raise SchemaError(
                    f"Session {session_id!r}: the stored message at position {seq} is corrupted or in an unknown "
                    f"format ({str(exc).splitlines()[0]}); if a newer contextkeeper wrote it, upgrade; otherwise "
                    "restore the session from an export with `import_session`, or delete it.",
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

    @staticmethod
    def _lock_timeout(session_id: str, timeout: float) -> LockTimeout:
        return LockTimeout(
            f"Session {session_id!r}: the lock was not acquired within {timeout} s; another worker is compacting "
            "it. Retry later or raise `timeout`.",
            session_id=session_id,
            timeout=timeout,
        )

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
    def _export_snapshot(snapshot_id: str, data: bytes, metadata: str) -> str:
        return _export_line(
            {
                "type": "snapshot",
                "snapshot_id": snapshot_id,
                "metadata": json.loads(metadata),
                "data_b64": base64.b64encode(data).decode("ascii"),
            }
        )

    @staticmethod
    def _export_audit(seq: int, event: str) -> str:
        return f'{{"type":"audit","seq":{seq},"event":{event}}}\n'

    def _import_flow(self, lines: Iterable[str | bytes], session_id: str | None) -> Op[SessionInfo]:
        """Yield the operations that recreate an exported session; a failure removes the partial import."""
        iterator = iter(lines)
        header = self._parse_line(next(iterator, None), 1, session_id or "?")
        if header.get("type") != "session" or header.get("format") != EXPORT_FORMAT:
            raise SchemaError(
                f"line 1 is not a contextkeeper session export header (type={header.get('type')!r}, "
                f"format={header.get('format')!r}); pass lines produced by `export_session`.",
                session_id=session_id,
            )
        version = header.get("version")
        if not isinstance(version, int) or version > EXPORT_VERSION:
            raise SchemaError(
                f"export version {version!r} is newer than this contextkeeper reads ({EXPORT_VERSION}); upgrade "
                "contextkeeper to import it.",
                session_id=session_id,
            )
        info = header.get("session")
        if not isinstance(info, dict):
            raise SchemaError("the export header has no `session` object; the file is truncated or edited.")
        target = check_id(session_id if session_id is not None else info.get("session_id"))
        existing = yield self._ops.get_session(target)
        if existing is not None:
            raise SessionExists(
                f"Session {target!r} already exists; delete it first or import under another `session_id`.",
                session_id=target,
            )
        args = self._create_args(
            target, info.get("tenant", "default"), info.get("model"), info.get("window"), info.get("metadata")
        )
        args["created_at"] = float(info.get("created_at", args["created_at"]))
        args["last_active"] = float(info.get("last_active", args["last_active"]))
        yield self._ops.create_session(target, **args)
        try:
            batch: list[Message] = []
            for number, raw in enumerate(iterator, start=2):
                record = self._parse_line(raw, number, target)
                if not record:
                    continue
                kind = record.get("type")
                if kind == "message":
                    batch.append(self._import_message(record, number, target))
                    if len(batch) >= _IMPORT_BATCH:
                        yield self._ops.append_messages(target, self._encode_messages(batch), now=self._clock())
                        batch = []
                    continue
                if batch:
                    yield self._ops.append_messages(target, self._encode_messages(batch), now=self._clock())
                    batch = []
                if kind == "state":
                    slot = self._check_slot(record.get("slot", DEFAULT_SLOT))
                    body = self._encode_state(record.get("state"))  # type: ignore[arg-type]
                    state_version = record.get("version")
                    if not isinstance(state_version, int) or state_version < 1:
                        raise SchemaError(f"line {number}: state version {state_version!r} is not an int >= 1.")
                    yield self._ops.restore_state(target, slot, body, version=state_version, now=self._clock())
                elif kind == "snapshot":
                    snapshot_id = _check_snapshot_id(record.get("snapshot_id"))
                    try:
                        data = base64.b64decode(record["data_b64"], validate=True)
                    except (KeyError, TypeError, ValueError) as exc:
                        raise SchemaError(f"line {number}: snapshot data is not base64 ({exc}).") from None
                    meta = _dumps(record.get("metadata") or {}, what="snapshot metadata")
                    yield self._ops.put_snapshot(target, snapshot_id, data, meta, now=self._clock())
                elif kind == "audit":
                    yield self._ops.append_audit(
                        target, _dumps(record.get("event"), what="audit event"), now=self._clock()
                    )
                else:
                    raise SchemaError(f"line {number}: unknown record type {kind!r}.", session_id=target)
            if batch:
                yield self._ops.append_messages(target, self._encode_messages(batch), now=self._clock())
            if info.get("archived_at") is not None:
                yield self._ops.archive(target, now=float(info["archived_at"]))
            result = yield self._ops.get_session(target)
        except GeneratorExit:
            raise
        except BaseException:
            yield self._ops.delete_session(target)
            raise
        assert isinstance(result, SessionInfo)
        return result

    @staticmethod
    def _parse_line(raw: str | bytes | None, number: int, session_id: str) -> dict[str, Any]:
        if raw is None:
            raise SchemaError("the export is empty; pass the lines `export_session` produced.", session_id=session_id)
        text = raw.decode() if isinstance(raw, bytes) else raw
        if not text.strip():
            return {}
        try:
            record = json.loads(text)
        except ValueError as exc:
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
            return Message.from_dict(record["message"])
        except (KeyError, TypeError, ValidationError) as exc:
            raise SchemaError(
                f"line {number}: the message cannot be decoded ({str(exc).splitlines()[0]}).", session_id=session_id
            ) from None


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
        return self._run(self._ops.create_session(session_id, **args), write=True)

    def get_session(self, session_id: str) -> SessionInfo:
        info = self._run(self._ops.get_session(check_id(session_id)), write=False)
        if info is None:
            raise not_found(session_id)
        return info

    def touch(self, session_id: str) -> None:
        self._run(self._ops.touch(check_id(session_id), now=self._clock()), write=True)

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

    def archive(self, session_id: str) -> None:
        self._run(self._ops.archive(check_id(session_id), now=self._clock()), write=True)

    def delete_session(self, session_id: str) -> None:
        self._run(self._ops.delete_session(check_id(session_id)), write=True)

    def expire_idle(self, max_idle_seconds: float) -> list[str]:
        if not max_idle_seconds >= 0:
            raise UsageError(f"`max_idle_seconds` must be >= 0, got {max_idle_seconds!r}.")
        return self._run(self._ops.expire_idle(cutoff=self._clock() - max_idle_seconds), write=True)

    # transcript
    def append_messages(self, session_id: str, messages: Sequence[Message]) -> int:
        check_id(session_id)
        items = self._encode_messages(messages)
        return self._run(self._ops.append_messages(session_id, items, now=self._clock()), write=True)

    def load_messages(self, session_id: str, *, start: int = 0, limit: int | None = None) -> list[Message]:
        check_id(session_id)
        self._check_range("start", start)
        self._check_range("limit", limit, allow_none=True)
        rows = self._run(self._ops.load_messages(session_id, start=start, limit=limit), write=False)
        return self._decode_messages(session_id, rows)

    def count_messages(self, session_id: str) -> int:
        return self._run(self._ops.count_messages(check_id(session_id)), write=False)

    def get_message(self, session_id: str, message_id: str) -> Message:
        check_id(session_id)
        row = self._run(self._ops.get_message(session_id, check_id(message_id, what="message_id")), write=False)
        if row is None:
            raise MessageNotFound(
                f"Session {session_id!r} has no message {message_id!r}.", session_id=session_id, message_id=message_id
            )
        return self._decode_messages(session_id, [row])[0]

    # state
    def load_state(self, session_id: str, *, slot: str = DEFAULT_SLOT) -> tuple[dict[str, Any] | None, int]:
        check_id(session_id)
        body, version = self._run(self._ops.load_state(session_id, self._check_slot(slot)), write=False)
        return self._decode_state(session_id, slot, body), version

    def save_state(
        self, session_id: str, state: Mapping[str, Any], *, expected_version: int, slot: str = DEFAULT_SLOT
    ) -> int:
        check_id(session_id)
        expected = self._check_expected(expected_version)
        body = self._encode_state(state)
        op = self._ops.save_state(
            session_id, self._check_slot(slot), body, expected=expected, now=self._clock(), token=uuid.uuid4().hex
        )
        ok, version = self._run(op, write=True)
        if not ok:
            raise self._conflict(session_id, slot, expected, version)
        return version

    # snapshots
    def put_snapshot(
        self, session_id: str, snapshot_id: str, data: bytes, *, metadata: Mapping[str, Any] | None = None
    ) -> None:
        check_id(session_id)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise UsageError(f"snapshot data must be bytes, got {type(data).__name__}; encode text with `.encode()`.")
        meta = _dumps(dict(metadata or {}), what="snapshot `metadata`")
        op = self._ops.put_snapshot(session_id, _check_snapshot_id(snapshot_id), bytes(data), meta, now=self._clock())
        self._run(op, write=True)

    def get_snapshot(self, session_id: str, snapshot_id: str) -> bytes:
        check_id(session_id)
        row = self._run(self._ops.get_snapshot(session_id, _check_snapshot_id(snapshot_id)), write=False)
        if row is None:
            raise self._missing_snapshot(session_id, snapshot_id)
        return row[0]

    def list_snapshots(self, session_id: str) -> list[str]:
        return self._run(self._ops.list_snapshots(check_id(session_id)), write=False)

    # audit
    def append_audit(self, session_id: str, event: Mapping[str, Any]) -> None:
        check_id(session_id)
        if not isinstance(event, Mapping):
            raise UsageError(f"an audit event must be a dict, got {type(event).__name__}.")
        body = _dumps(dict(event), what="the audit event")
        self._run(self._ops.append_audit(session_id, body, now=self._clock()), write=True)

    def read_audit(self, session_id: str, *, since: int = 0, limit: int | None = None) -> list[dict[str, Any]]:
        check_id(session_id)
        self._check_range("since", since)
        self._check_range("limit", limit, allow_none=True)
        rows = self._run(self._ops.read_audit(session_id, since=since, limit=limit), write=False)
        return [_loads(row, session_id=session_id, what="audit event") for row in rows]

    # export / import
    def export_session(self, session_id: str) -> Iterator[str]:
        info = self.get_session(session_id)
        yield self._export_header(info)
        start = 0
        while True:
            rows = self._run(self._ops.load_messages(session_id, start=start, limit=_PAGE), write=False)
            yield from self._export_messages(session_id, rows)
            start += len(rows)
            if len(rows) < _PAGE:
                break
        for slot, body, version in self._run(self._ops.list_states(session_id), write=False):
            self._decode_state(session_id, slot, body)
            yield self._export_state(slot, body, version)
        for snapshot_id in self._run(self._ops.list_snapshots(session_id), write=False):
            record = self._run(self._ops.get_snapshot(session_id, snapshot_id), write=False)
            if record is not None:
                yield self._export_snapshot(snapshot_id, *record)
        since = 0
        while True:
            events = self._run(self._ops.read_audit(session_id, since=since, limit=_PAGE), write=False)
            for offset, event in enumerate(events):
                _loads(event, session_id=session_id, what="audit event")
                yield self._export_audit(since + offset, event)
            since += len(events)
            if len(events) < _PAGE:
                break

    def import_session(self, lines: Iterable[str | bytes], *, session_id: str | None = None) -> SessionInfo:
        flow = self._import_flow(lines, session_id)
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
    def lock(self, session_id: str, *, timeout: float = 10.0) -> Iterator[None]:
        check_id(session_id)
        token = uuid.uuid4().hex
        deadline = time.monotonic() + timeout
        delay = 0.002
        while not self._run(
            self._ops.try_lock(session_id, token, lease=self._lock_lease, now=self._clock()), write=True
        ):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._lock_timeout(session_id, timeout)
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.05)
        try:
            yield
        finally:
            self._run(self._ops.unlock(session_id, token), write=True)


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
        return await self._run(self._ops.create_session(session_id, **args), write=True)

    async def get_session(self, session_id: str) -> SessionInfo:
        info = await self._run(self._ops.get_session(check_id(session_id)), write=False)
        if info is None:
            raise not_found(session_id)
        return info

    async def touch(self, session_id: str) -> None:
        await self._run(self._ops.touch(check_id(session_id), now=self._clock()), write=True)

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

    async def archive(self, session_id: str) -> None:
        await self._run(self._ops.archive(check_id(session_id), now=self._clock()), write=True)

    async def delete_session(self, session_id: str) -> None:
        await self._run(self._ops.delete_session(check_id(session_id)), write=True)

    async def expire_idle(self, max_idle_seconds: float) -> list[str]:
        if not max_idle_seconds >= 0:
            raise UsageError(f"`max_idle_seconds` must be >= 0, got {max_idle_seconds!r}.")
        return await self._run(self._ops.expire_idle(cutoff=self._clock() - max_idle_seconds), write=True)

    async def append_messages(self, session_id: str, messages: Sequence[Message]) -> int:
        check_id(session_id)
        items = self._encode_messages(messages)
        return await self._run(self._ops.append_messages(session_id, items, now=self._clock()), write=True)

    async def load_messages(self, session_id: str, *, start: int = 0, limit: int | None = None) -> list[Message]:
        check_id(session_id)
        self._check_range("start", start)
        self._check_range("limit", limit, allow_none=True)
        rows = await self._run(self._ops.load_messages(session_id, start=start, limit=limit), write=False)
        return self._decode_messages(session_id, rows)

    async def count_messages(self, session_id: str) -> int:
        return await self._run(self._ops.count_messages(check_id(session_id)), write=False)

    async def get_message(self, session_id: str, message_id: str) -> Message:
        check_id(session_id)
        op = self._ops.get_message(session_id, check_id(message_id, what="message_id"))
        row = await self._run(op, write=False)
        if row is None:
            raise MessageNotFound(
                f"Session {session_id!r} has no message {message_id!r}.", session_id=session_id, message_id=message_id
            )
        return self._decode_messages(session_id, [row])[0]

    async def load_state(self, session_id: str, *, slot: str = DEFAULT_SLOT) -> tuple[dict[str, Any] | None, int]:
        check_id(session_id)
        body, version = await self._run(self._ops.load_state(session_id, self._check_slot(slot)), write=False)
        return self._decode_state(session_id, slot, body), version

    async def save_state(
        self, session_id: str, state: Mapping[str, Any], *, expected_version: int, slot: str = DEFAULT_SLOT
    ) -> int:
        check_id(session_id)
        expected = self._check_expected(expected_version)
        body = self._encode_state(state)
        op = self._ops.save_state(
            session_id, self._check_slot(slot), body, expected=expected, now=self._clock(), token=uuid.uuid4().hex
        )
        ok, version = await self._run(op, write=True)
        if not ok:
            raise self._conflict(session_id, slot, expected, version)
        return version

    async def put_snapshot(
        self, session_id: str, snapshot_id: str, data: bytes, *, metadata: Mapping[str, Any] | None = None
    ) -> None:
        check_id(session_id)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise UsageError(f"snapshot data must be bytes, got {type(data).__name__}; encode text with `.encode()`.")
        meta = _dumps(dict(metadata or {}), what="snapshot `metadata`")
        op = self._ops.put_snapshot(session_id, _check_snapshot_id(snapshot_id), bytes(data), meta, now=self._clock())
        await self._run(op, write=True)

    async def get_snapshot(self, session_id: str, snapshot_id: str) -> bytes:
        check_id(session_id)
        row = await self._run(self._ops.get_snapshot(session_id, _check_snapshot_id(snapshot_id)), write=False)
        if row is None:
            raise self._missing_snapshot(session_id, snapshot_id)
        return row[0]

    async def list_snapshots(self, session_id: str) -> list[str]:
        return await self._run(self._ops.list_snapshots(check_id(session_id)), write=False)

    async def append_audit(self, session_id: str, event: Mapping[str, Any]) -> None:
        check_id(session_id)
        if not isinstance(event, Mapping):
            raise UsageError(f"an audit event must be a dict, got {type(event).__name__}.")
        body = _dumps(dict(event), what="the audit event")
        await self._run(self._ops.append_audit(session_id, body, now=self._clock()), write=True)

    async def read_audit(self, session_id: str, *, since: int = 0, limit: int | None = None) -> list[dict[str, Any]]:
        check_id(session_id)
        self._check_range("since", since)
        self._check_range("limit", limit, allow_none=True)
        rows = await self._run(self._ops.read_audit(session_id, since=since, limit=limit), write=False)
        return [_loads(row, session_id=session_id, what="audit event") for row in rows]

    async def export_session(self, session_id: str) -> AsyncIterator[str]:
        info = await self.get_session(session_id)
        yield self._export_header(info)
        start = 0
        while True:
            rows = await self._run(self._ops.load_messages(session_id, start=start, limit=_PAGE), write=False)
            for line in self._export_messages(session_id, rows):
                yield line
            start += len(rows)
            if len(rows) < _PAGE:
                break
        for slot, body, version in await self._run(self._ops.list_states(session_id), write=False):
            self._decode_state(session_id, slot, body)
            yield self._export_state(slot, body, version)
        for snapshot_id in await self._run(self._ops.list_snapshots(session_id), write=False):
            record = await self._run(self._ops.get_snapshot(session_id, snapshot_id), write=False)
            if record is not None:
                yield self._export_snapshot(snapshot_id, *record)
        since = 0
        while True:
            events = await self._run(self._ops.read_audit(session_id, since=since, limit=_PAGE), write=False)
            for offset, event in enumerate(events):
                _loads(event, session_id=session_id, what="audit event")
                yield self._export_audit(since + offset, event)
            since += len(events)
            if len(events) < _PAGE:
                break

    async def import_session(
        self, lines: Iterable[str | bytes] | AsyncIterable[str | bytes], *, session_id: str | None = None
    ) -> SessionInfo:
        # An async source is read fully first: the import flow is a plain generator over lines.
        source: Iterable[str | bytes] = [line async for line in lines] if isinstance(lines, AsyncIterable) else lines
        flow = self._import_flow(source, session_id)
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
    async def lock(self, session_id: str, *, timeout: float = 10.0) -> AsyncIterator[None]:
        check_id(session_id)
        token = uuid.uuid4().hex
        deadline = time.monotonic() + timeout
        delay = 0.002
        while not await self._run(
            self._ops.try_lock(session_id, token, lease=self._lock_lease, now=self._clock()), write=True
        ):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._lock_timeout(session_id, timeout)
            await anyio.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.05)
        try:
            yield
        finally:
            # A cancelled holder must still release, or the lock stays taken until its lease ends.
            with anyio.CancelScope(shield=True):
                await self._run(self._ops.unlock(session_id, token), write=True)
