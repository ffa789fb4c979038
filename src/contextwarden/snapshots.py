"""Snapshots: the full original of everything compaction shortened, kept per session.

A snapshot is a JSON document (a cleared tool output with its call, an evicted round, an
offloaded oversized message) stored under its session and addressed by an id that this module
generates. Ids never come from user input and are checked on every read, so a reference cannot
reach outside its session. `read_context` is the read-back tool an agent calls to rehydrate what
compaction removed: paginated, by snapshot id or by a span of transcript message ids.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import ValidationError

from .exceptions import SchemaError, SnapshotError
from .messages import Message, MessagesAdapter

__all__ = [
    "READ_CONTEXT_TOOL",
    "FileSnapshotStore",
    "LazySnapshotStore",
    "MemorySnapshotStore",
    "SnapshotPage",
    "SnapshotStore",
    "make_snapshot_id",
    "read_context",
    "safe_session_dir",
]

_SNAPSHOT_ID_RE = re.compile(r"snap_[0-9a-f]{24}")


class SnapshotStore(Protocol):
    """Where snapshot documents live; session stores implement the same three methods."""

    def put_snapshot(self, session_id: str, snapshot_id: str, data: bytes) -> None:
        """Store ``data`` under the session; writing the same id twice keeps one copy."""
        ...

    def get_snapshot(self, session_id: str, snapshot_id: str) -> bytes:
        """The stored bytes; raises SnapshotError when missing."""
        ...

    def list_snapshots(self, session_id: str) -> list[str]:
        """Snapshot ids of the session."""
        ...


@runtime_checkable
class LazySnapshotStore(SnapshotStore, Protocol):
    """A snapshot store that can make a document when it is first read (it holds the messages)."""

    def put_snapshot_lazy(self, session_id: str, snapshot_id: str, make: Callable[[], bytes]) -> None:
        """Like `put_snapshot`, with ``make()`` giving the bytes on first read."""
        ...


def make_snapshot_id(session_id: str, key: str) -> str:
    """A deterministic id for ``key`` (e.g. a message id) within a session; safe in paths and URLs."""
    digest = hashlib.blake2b(f"{session_id}\x00{key}".encode("utf-8", "surrogatepass"), digest_size=12)
    return "snap_" + digest.hexdigest()


def check_snapshot_id(snapshot_id: str) -> str:
    """Return ``snapshot_id`` if it has the generated shape; raise SnapshotError otherwise."""
    if not isinstance(snapshot_id, str) or not _SNAPSHOT_ID_RE.fullmatch(snapshot_id):
        raise SnapshotError(
            f"invalid snapshot id {snapshot_id!r:.80}; ids look like 'snap_' + 24 hex digits, "
            "as written in the stand-in text."
        )
    return snapshot_id


def safe_session_dir(session_id: str) -> str:
    """A directory name for a session id: readable when harmless, hashed otherwise.

    Hashed names start with ``s_``; ids that start so are hashed too, so no two ids share a directory.
    """
    if re.fullmatch(r"[A-Za-z0-9_\-]{1,64}", session_id) and not session_id.startswith("s_"):
        return session_id
    return "s_" + hashlib.blake2b(session_id.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


class MemorySnapshotStore:
    """Snapshots in a dict; for tests and short-lived sessions."""

    def __init__(self) -> None:
        self._data: dict[tuple[str, str], bytes | Callable[[], bytes]] = {}
        self._lock = threading.Lock()

    def put_snapshot(self, session_id: str, snapshot_id: str, data: bytes) -> None:
        check_snapshot_id(snapshot_id)
        with self._lock:
            self._data.setdefault((session_id, snapshot_id), data)

    def put_snapshot_lazy(self, session_id: str, snapshot_id: str, make: Callable[[], bytes]) -> None:
        """Like `put_snapshot`, with the document made on first read.

        In memory the messages are already held by the session: encoding every snapshot when it is
        written would cost each compaction time for documents that are rarely read.
        """
        check_snapshot_id(snapshot_id)
        with self._lock:
            self._data.setdefault((session_id, snapshot_id), make)

    def get_snapshot(self, session_id: str, snapshot_id: str) -> bytes:
        check_snapshot_id(snapshot_id)
        key = (session_id, snapshot_id)
        try:
            data = self._data[key]
        except KeyError:
            raise SnapshotError(f"no snapshot {snapshot_id!r} in session {session_id!r}") from None
        if callable(data):
            with self._lock:  # made once, whoever reads first
                data = self._data[key]
                if callable(data):
                    data = self._data[key] = data()
        return data

    def list_snapshots(self, session_id: str) -> list[str]:
        return sorted(sid for (s, sid) in self._data if s == session_id)


class FileSnapshotStore:
    """Snapshots as files under ``root/<session dir>/<snapshot id>.json`` (the embedded default).

    Paths are built only from generated ids and a sanitized session directory name, and are
    resolved and checked to stay under ``root``.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()

    def _path(self, session_id: str, snapshot_id: str) -> Path:
        check_snapshot_id(snapshot_id)
        path = (self.root / safe_session_dir(session_id) / f"{snapshot_id}.json").resolve()
        if self.root not in path.parents:
            raise SnapshotError(f"snapshot path for {snapshot_id!r} escapes the snapshot root {str(self.root)!r}")
        return path

    def put_snapshot(self, session_id: str, snapshot_id: str, data: bytes) -> None:
        path = self._path(session_id, snapshot_id)
        if path.exists():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}.{threading.get_ident()}")
        tmp.write_bytes(data)
        os.replace(tmp, path)  # atomic: a reader never sees half a snapshot

    def get_snapshot(self, session_id: str, snapshot_id: str) -> bytes:
        path = self._path(session_id, snapshot_id)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise SnapshotError(f"no snapshot {snapshot_id!r} in session {session_id!r}") from None

    def list_snapshots(self, session_id: str) -> list[str]:
        folder = self.root / safe_session_dir(session_id)
        if not folder.is_dir():
            return []
        return sorted(p.stem for p in folder.glob("snap_*.json"))


def encode_snapshot(kind: str, messages: Sequence[Message]) -> bytes:
    """The JSON document stored for a snapshot: ``{"kind": ..., "messages": [...]}``."""
    # pydantic's serializer writes the message JSON in Rust; only the envelope is built here
    return b'{"kind":' + json.dumps(kind).encode() + b',"messages":' + MessagesAdapter.dump_json(list(messages)) + b"}"


READ_CONTEXT_TOOL: Mapping[str, Any] = {
    "type": "function",
    "function": {
        "name": "read_context",
        "description": (
            "Read back the full text of something context compaction shortened or removed. "
            "Pass the snapshot id shown in a cleared output or in the progress ledger "
            "(e.g. snap_…), or a span of message ids from a summary header. Paginated."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "ref": {"type": "string", "description": "A snapshot id (snap_…) or 'msg_a..msg_b' span."},
                "page": {"type": "integer", "minimum": 1, "default": 1},
            },
            "required": ["ref"],
            "additionalProperties": False,
        },
    },
}
"""OpenAI tool schema for the read-back tool; pass it with the agent's other tools."""


@dataclass(frozen=True, kw_only=True)
class SnapshotPage:
    """One page of read-back text."""

    ref: str
    page: int
    pages: int
    text: str

    def render(self) -> str:
        """The page as the tool result text the agent sees."""
        more = f" (next: page {self.page + 1})" if self.page < self.pages else ""
        return f"[{self.ref} page {self.page}/{self.pages}{more}]\n{self.text}"


def _render_messages(messages: Sequence[Message]) -> str:
    lines: list[str] = []
    for m in messages:
        head = f"--- {m.role} {m.message_id}"
        if m.tool_call_id:
            head += f" (result of {m.tool_call_id}{', ' + m.name if m.name else ''})"
        lines.append(head)
        if m.text:
            lines.append(m.text)
        for call in m.tool_calls:
            lines.append(f"call {call.call_id}: {call.name}({call.arguments})")
    return "\n".join(lines)


def _snapshot_messages(raw: bytes, *, session_id: str, snapshot_id: str) -> list[Message]:
    """The messages of a stored snapshot document.

    Raises:
        SchemaError: the document is corrupted (not UTF-8 JSON, or not the snapshot format); the
            message names the session, the snapshot and the field.
    """

    def corrupted(problem: str) -> SchemaError:
        return SchemaError(
            f"Session {session_id!r}: snapshot {snapshot_id!r} is corrupted ({problem}); the transcript still holds "
            "the originals: delete the snapshot from the store (it is rebuilt from the transcript when read) or "
            "restore the session from an export.",
            session_id=session_id,
        )

    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise corrupted(f"its document is not UTF-8 JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise corrupted(f"its document is a {type(doc).__name__}, not an object")
    items = doc.get("messages", [])
    if not isinstance(items, list):
        raise corrupted(f"`messages` is a {type(items).__name__}, not a list")
    messages: list[Message] = []
    for index, item in enumerate(items):
        try:
            messages.append(Message.from_dict(item))
        except (ValidationError, TypeError, ValueError) as exc:
            raise corrupted(f"`messages[{index}]` is not a message: {str(exc).splitlines()[0]}") from None
    return messages


def read_context(
    ref: str,
    *,
    session_id: str,
    snapshots: SnapshotStore,
    transcript: Callable[[], Sequence[Message]] | None = None,
    page: int = 1,
    page_chars: int = 8000,
) -> SnapshotPage:
    """Handle a `read_context` tool call: one page of a snapshot or of a transcript span.

    Raises:
        SnapshotError: a malformed or unknown reference, or a page out of range.
        SchemaError: the snapshot's stored document is corrupted.
    """
    if not isinstance(page, int) or page < 1:
        raise SnapshotError(f"page must be a positive integer, got {page!r}")
    if ".." in ref:
        if transcript is None:
            raise SnapshotError(f"span reference {ref!r} needs the session transcript")
        first, _, last = ref.partition("..")
        msgs = list(transcript())
        ids = [m.message_id for m in msgs]
        if first not in ids or last not in ids:
            raise SnapshotError(f"span {ref!r} names message ids that are not in session {session_id!r}")
        a, b = ids.index(first), ids.index(last)
        text = _render_messages(msgs[min(a, b) : max(a, b) + 1])
    else:
        snapshot_id = check_snapshot_id(ref)
        raw = snapshots.get_snapshot(session_id, snapshot_id)
        text = _render_messages(_snapshot_messages(raw, session_id=session_id, snapshot_id=snapshot_id))
    pages = max(1, -(-len(text) // page_chars))
    if page > pages:
        raise SnapshotError(f"{ref!r} has {pages} page(s); page {page} does not exist")
    return SnapshotPage(ref=ref, page=page, pages=pages, text=text[(page - 1) * page_chars : page * page_chars])
