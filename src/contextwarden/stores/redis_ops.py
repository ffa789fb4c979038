"""The Redis store's operations (`RedisOps`): sans-IO generators that yield commands and scripts.

See `stores.redis` for the key layout.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from ..exceptions import SchemaError
from . import redis_lua as lua
from .ops import Op
from .protocols import SessionInfo, session_info
from .redis_lua import Script
from .values import FORMAT_VERSION, check_format, corrupted, not_found, stored_int, transcript_moved

__all__ = [
    "SCAN_PAGE",
    "SCHEMA_VERSION",
    "SUFFIXES",
    "Cmd",
    "Eval",
    "Pipe",
    "RedisOps",
    "decode_member",
    "decode_text",
    "hash_pairs",
]

SCHEMA_VERSION = 2
"""Layout version kept in ``prefix:schema``; 2 moved the tenant indexes to ``prefix:tenant=<tenant>``."""
SUFFIXES = (":meta", ":ids", ":msgs", ":state", ":statever", ":snaps", ":snapmeta", ":audit", ":lock")
"""The keys of one session, after its hash tag."""
SCAN_PAGE = 500
"""Index entries read per round trip."""


@dataclass(frozen=True, slots=True)
class Cmd:
    """One Redis command."""

    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Eval:
    """One script run (EVALSHA, or EVAL when the server does not have it yet)."""

    script: Script
    keys: tuple[str, ...]
    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Pipe:
    """Commands sent in one round trip (not a transaction: they may touch several slots)."""

    commands: tuple[Cmd | Eval, ...]


def decode_text(value: bytes | str) -> str:
    """A stored value as text, losslessly."""
    # Lossless: an invalid byte (a corrupted value) becomes a lone surrogate, which the store's
    # decoding reports as a SchemaError naming the session and the field (never a silent U+FFFD).
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def decode_member(value: bytes | str) -> str:
    """An index member (a session id) as text."""
    # Index members are only ever session ids we wrote; a damaged one is dropped by the listing.
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def hash_pairs(flat: Sequence[bytes]) -> dict[str, bytes]:
    """A flat HGETALL reply as a dict."""
    return {decode_text(flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}


class RedisOps:
    """The store operations as Lua scripts over one session's hash-tagged keys.

    Key layout: whatever follows ``prefix:`` in a key outside the session slots (``sessions``,
    ``schema``, ``tenant=<tenant>``) has no colon, and percent-encoded session ids have none
    either, so a key names its prefix unambiguously (everything before its last colon, or
    before the last colon inside the braces): two prefixes, say ``P`` and ``P:tenant``, can
    never share a key.
    """

    def __init__(self, *, prefix: str, ttl: float | None) -> None:
        self.prefix = prefix
        self._ttl_ms = 0 if ttl is None else max(1, int(ttl * 1000))
        self.index = f"{prefix}:sessions"
        self.schema_key = f"{prefix}:schema"

    # keys and replies
    def keys(self, session_id: str) -> tuple[str, ...]:
        """The session's keys, all in the hash-tag slot ``{prefix:session}``."""
        tag = "{" + self.prefix + ":" + quote(session_id, safe="") + "}"
        return tuple(tag + suffix for suffix in SUFFIXES)

    def meta_pattern(self) -> str:
        """A SCAN pattern matching the metadata key of every session of the namespace (and a few others)."""
        escaped = "".join("\\" + c if c in "*?[]\\" else c for c in self.prefix)
        return "{" + escaped + ":*}:meta"

    def session_of_meta_key(self, key: bytes | str) -> str | None:
        """The session id whose metadata key this is (None for a key that is not one of this prefix)."""
        text = decode_member(key)
        head, tail = "{" + self.prefix + ":", "}:meta"
        if not (text.startswith(head) and text.endswith(tail)) or len(text) <= len(head) + len(tail):
            return None
        encoded = text[len(head) : -len(tail)]
        if ":" in encoded:  # a session of a longer prefix (``prefix:x``), not one of ours
            return None
        return unquote(encoded)

    def tenant_index(self, tenant: str) -> str:
        """The sorted set listing one tenant's sessions (no colon after the prefix: see the class)."""
        return f"{self.prefix}:tenant={quote(tenant, safe='')}"

    def legacy_tenant_index(self, tenant: str) -> str:
        """Where schema version 1 kept a tenant's listing; it could be another prefix's key."""
        return f"{self.prefix}:tenant:{quote(tenant, safe='')}"

    def _eval(self, script: Script, session_id: str, *args: Any, now: float = 0.0, tenant: str | None = None) -> Eval:
        fixed = (repr(now), self._ttl_ms, FORMAT_VERSION, tenant or "")
        return Eval(script, self.keys(session_id), (*fixed, *args))

    @staticmethod
    def _ok(session_id: str, reply: list[Any], tenant: str | None = None) -> list[Any]:
        status = int(reply[0])
        if status == -1:
            raise not_found(session_id, tenant)
        if status == -2:
            raise corrupted(session_id, "session `format`", "not a number")
        if status > 0:
            check_format(session_id, status)
        return reply[1:]

    @staticmethod
    def _info(session_id: str, meta: dict[str, bytes], count: int) -> SessionInfo:
        def field(name: str) -> bytes:
            try:
                return meta[name]
            except KeyError:
                raise corrupted(session_id, "Redis metadata hash", f"it has no `{name}` field") from None

        def decoded(name: str) -> Any:
            try:
                return json.loads(field(name))
            except ValueError as exc:
                raise corrupted(session_id, f"session `{name}`", f"not JSON: {exc}") from None

        archived = meta.get("archived_at")
        return session_info(
            session_id,
            tenant=decode_text(field("tenant")),
            created_at=decode_text(field("created_at")),
            last_active=decode_text(field("last_active")),
            model=decoded("model"),
            window=decoded("window"),
            metadata=decode_text(field("metadata")),
            archived_at=None if archived is None else decode_text(archived),
            message_count=count,
            fmt=decode_text(field("format")),
        )

    # schema
    def setup(self) -> Op[int]:
        yield Cmd(("SET", self.schema_key, SCHEMA_VERSION, "NX"))
        stored = yield Cmd(("GET", self.schema_key))
        try:
            version = int(stored)
        except (TypeError, ValueError):
            version = -1
        if version > SCHEMA_VERSION or version < 1:
            raise SchemaError(
                f"Redis key {self.schema_key!r} says contextwarden schema version "
                f"{decode_member(stored or b'?')!r}, but this release knows versions up to {SCHEMA_VERSION}; upgrade "
                "contextwarden (`pip install -U "
                "contextwarden`) or use another `prefix`."
            )
        if version < SCHEMA_VERSION:
            yield from self._migrate_tenant_indexes()
            yield Cmd(("SET", self.schema_key, SCHEMA_VERSION))
        return SCHEMA_VERSION

    def _migrate_tenant_indexes(self) -> Op[None]:
        """Schema 1 to 2: list each session of the main index under its tenant's new index key.

        The old ``prefix:tenant:<tenant>`` keys are left alone: one of them may be the main index
        of a longer prefix (``prefix:tenant``), which is why the layout changed.
        """
        after: str | None = None
        while True:
            page = yield from self._index_page(self.index, after, SCAN_PAGE)
            if not page:
                return
            replies = yield Pipe(tuple(self._eval(lua.GET, session_id) for session_id in page))
            adds: list[Cmd | Eval] = []
            for session_id, reply in zip(page, replies, strict=True):
                if int(reply[0]) == 0:
                    tenant = hash_pairs(reply[1]).get("tenant")
                    if tenant is not None:
                        adds.append(Cmd(("ZADD", self.tenant_index(decode_member(tenant)), 0, session_id)))
            if adds:
                yield Pipe(tuple(adds))
            after = page[-1]

    # lifecycle
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
    ) -> Op[SessionInfo]:
        reply = yield self._eval(
            lua.CREATE,
            session_id,
            tenant,
            repr(created_at),
            repr(last_active),
            json.dumps(model),
            json.dumps(window),
            metadata,
            FORMAT_VERSION,
            now=last_active,
        )
        meta, count = self._ok(session_id, reply)
        info = self._info(session_id, hash_pairs(meta), count)
        if info.tenant == tenant:  # another tenant's session is not listed under this one
            yield Pipe(
                (
                    Cmd(("ZADD", self.index, 0, session_id)),
                    Cmd(("ZADD", self.tenant_index(info.tenant), 0, session_id)),
                )
            )
        return info

    def get_session(self, session_id: str, *, tenant: str | None = None) -> Op[SessionInfo | None]:
        reply = yield self._eval(lua.GET, session_id, tenant=tenant)
        if int(reply[0]) == -1:
            return None
        return self._info(session_id, hash_pairs(reply[1]), reply[2])

    def touch(self, session_id: str, *, now: float, tenant: str | None = None) -> Op[None]:
        self._ok(session_id, (yield self._eval(lua.TOUCH, session_id, now=now, tenant=tenant)), tenant)

    def _index_page(self, index: str, after: str | None, count: int) -> Op[list[str]]:
        low = "-" if after is None else "(" + after
        members = yield Cmd(("ZRANGEBYLEX", index, low, "+", "LIMIT", 0, count))
        return [decode_member(member) for member in members]

    def list_sessions(
        self, *, tenant: str | None, limit: int, after: str | None, include_archived: bool
    ) -> Op[list[SessionInfo]]:
        index = self.index if tenant is None else self.tenant_index(tenant)
        found: list[SessionInfo] = []
        while len(found) < limit:
            page = yield from self._index_page(index, after, min(SCAN_PAGE, 2 * (limit - len(found)) + 1))
            if not page:
                break
            # With a tenant, the script itself checks each session belongs to it.
            replies = yield Pipe(tuple(self._eval(lua.GET, session_id, tenant=tenant) for session_id in page))
            gone: list[str] = []
            for session_id, reply in zip(page, replies, strict=True):
                if int(reply[0]) == -1:
                    gone.append(session_id)
                    continue
                info = self._info(session_id, hash_pairs(reply[1]), reply[2])
                if include_archived or not info.archived:
                    found.append(info)
                    if len(found) >= limit:
                        break
            if gone:
                # Sessions removed by their TTL (or a crash before the index update) leave index entries behind.
                yield Cmd(("ZREM", index, *gone))
            after = page[-1]
        return found

    def archive(self, session_id: str, *, now: float, tenant: str | None = None) -> Op[None]:
        self._ok(session_id, (yield self._eval(lua.ARCHIVE, session_id, now=now, tenant=tenant)), tenant)

    def delete_session(self, session_id: str, *, tenant: str | None = None) -> Op[None]:
        (owner,) = self._ok(session_id, (yield self._eval(lua.DELETE, session_id, tenant=tenant)), tenant)
        yield Pipe(
            (
                Cmd(("ZREM", self.index, session_id)),
                Cmd(("ZREM", self.tenant_index(decode_member(owner)), session_id)),
            )
        )

    def expire_idle(self, *, cutoff: float) -> Op[list[str]]:
        expired: list[str] = []
        after: str | None = None
        while True:
            page = yield from self._index_page(self.index, after, SCAN_PAGE)
            if not page:
                break
            replies = yield Pipe(tuple(self._eval(lua.DELETE_IDLE, sid, repr(cutoff)) for sid in page))
            removals: list[Cmd | Eval] = []
            for session_id, reply in zip(page, replies, strict=True):
                if int(reply[0]) == -1:
                    removals.append(Cmd(("ZREM", self.index, session_id)))
                elif int(reply[1]) == 1:
                    expired.append(session_id)
                    removals.append(Cmd(("ZREM", self.index, session_id)))
                    removals.append(Cmd(("ZREM", self.tenant_index(decode_member(reply[2])), session_id)))
            if removals:
                yield Pipe(tuple(removals))
            after = page[-1]
        return sorted(expired)

    def reindex(self, session_ids: Sequence[str]) -> Op[int]:
        """Put the sessions (found by a key scan) back into the listing indexes; return how many exist."""
        replies = yield Pipe(tuple(self._eval(lua.GET, session_id) for session_id in session_ids))
        adds: list[Cmd | Eval] = []
        for session_id, reply in zip(session_ids, replies, strict=True):
            if int(reply[0]) == -1:
                continue  # deleted since the scan saw it
            adds.append(Cmd(("ZADD", self.index, 0, session_id)))
            tenant = hash_pairs(reply[1]).get("tenant")
            if tenant is not None:
                adds.append(Cmd(("ZADD", self.tenant_index(decode_member(tenant)), 0, session_id)))
        if adds:
            yield Pipe(tuple(adds))
        return sum(1 for reply in replies if int(reply[0]) != -1)

    # transcript
    def append_messages(
        self,
        session_id: str,
        items: Sequence[tuple[str, str]],
        *,
        now: float,
        tenant: str | None = None,
        expected: int | None = None,
    ) -> Op[int]:
        flat = [part for item in items for part in item]
        wanted = -1 if expected is None else expected
        reply = yield self._eval(lua.APPEND, session_id, wanted, *flat, now=now, tenant=tenant)
        added, *count = self._ok(session_id, reply, tenant)
        if int(added) < 0:
            assert expected is not None
            raise transcript_moved(session_id, expected, int(count[0]))
        return int(added)

    def append_with_state(
        self,
        session_id: str,
        items: Sequence[tuple[str, str]],
        slot: str,
        body: str,
        *,
        version: int,
        token: str,
        now: float,
        tenant: str | None = None,
        expected: int | None = None,
    ) -> Op[int]:
        # one script: a turn's messages and its figures are one round trip
        flat = [part for item in items for part in item]
        wanted = -1 if expected is None else expected
        args = (wanted, len(flat), *flat, slot, body, token)
        reply = yield self._eval(lua.APPEND_WITH_STATE, session_id, *args, now=now, tenant=tenant)
        added, *count = self._ok(session_id, reply, tenant)
        if int(added) < 0:
            assert expected is not None
            raise transcript_moved(session_id, expected, int(count[0]))
        return int(added)

    def load_messages(
        self, session_id: str, *, start: int, limit: int | None, tenant: str | None = None
    ) -> Op[list[tuple[int, str]]]:
        reply = yield self._eval(lua.LOAD, session_id, start, -1 if limit is None else limit, tenant=tenant)
        (bodies,) = self._ok(session_id, reply, tenant)
        return [(start + offset, decode_text(body)) for offset, body in enumerate(bodies)]

    def count_messages(self, session_id: str, *, tenant: str | None = None) -> Op[int]:
        (count,) = self._ok(session_id, (yield self._eval(lua.COUNT, session_id, tenant=tenant)), tenant)
        return int(count)

    def get_message(self, session_id: str, message_id: str, *, tenant: str | None = None) -> Op[tuple[int, str] | None]:
        found = self._ok(session_id, (yield self._eval(lua.GET_MESSAGE, session_id, message_id, tenant=tenant)), tenant)
        if not found or found[0] is None:
            return None
        seq = stored_int(found[0], session_id=session_id, what="message position", minimum=0)
        return None if found[1] is None else (seq, decode_text(found[1]))

    # state
    def load_state(self, session_id: str, slot: str, *, tenant: str | None = None) -> Op[tuple[str | None, int]]:
        reply = yield self._eval(lua.LOAD_STATE, session_id, slot, tenant=tenant)
        version, body = self._ok(session_id, reply, tenant)
        what = f"version of state {slot!r}"
        return (None if body is None else decode_text(body)), stored_int(
            version, session_id=session_id, what=what, minimum=0
        )

    def save_state(
        self, session_id: str, slot: str, body: str, *, expected: int, now: float, token: str, tenant: str | None = None
    ) -> Op[tuple[bool, int]]:
        reply = yield self._eval(lua.SAVE_STATE, session_id, slot, body, expected, token, now=now, tenant=tenant)
        ok, version = self._ok(session_id, reply, tenant)
        version = stored_int(version, session_id=session_id, what=f"version of state {slot!r}", minimum=0)
        return bool(int(ok)), version

    def restore_state(self, session_id: str, slot: str, body: str, *, version: int, now: float) -> Op[None]:
        self._ok(session_id, (yield self._eval(lua.RESTORE_STATE, session_id, slot, body, version, now=now)))

    def list_states(self, session_id: str, *, tenant: str | None = None) -> Op[list[tuple[str, str, int]]]:
        bodies, versions = self._ok(session_id, (yield self._eval(lua.LIST_STATES, session_id, tenant=tenant)), tenant)
        by_slot = hash_pairs(bodies)
        version_of = hash_pairs(versions)
        return [
            (
                slot,
                decode_text(by_slot[slot]),
                stored_int(
                    version_of.get("v:" + slot, b"0"),
                    session_id=session_id,
                    what=f"version of state {slot!r}",
                    minimum=0,
                ),
            )
            for slot in sorted(by_slot)
        ]

    # snapshots
    def put_snapshot(
        self, session_id: str, snapshot_id: str, data: bytes, metadata: str, *, now: float, tenant: str | None = None
    ) -> Op[None]:
        reply = yield self._eval(lua.PUT_SNAPSHOT, session_id, snapshot_id, data, metadata, now=now, tenant=tenant)
        self._ok(session_id, reply, tenant)

    def get_snapshot(
        self, session_id: str, snapshot_id: str, *, tenant: str | None = None
    ) -> Op[tuple[bytes, str] | None]:
        reply = yield self._eval(lua.GET_SNAPSHOT, session_id, snapshot_id, tenant=tenant)
        found = self._ok(session_id, reply, tenant)
        if not found:
            return None
        return bytes(found[0]), decode_text(found[1])

    def list_snapshots(self, session_id: str, *, tenant: str | None = None) -> Op[list[str]]:
        (names,) = self._ok(session_id, (yield self._eval(lua.LIST_SNAPSHOTS, session_id, tenant=tenant)), tenant)
        return sorted(decode_text(name) for name in names)

    # audit
    def append_audit(self, session_id: str, event: str, *, now: float, tenant: str | None = None) -> Op[None]:
        self._ok(session_id, (yield self._eval(lua.AUDIT, session_id, event, now=now, tenant=tenant)), tenant)

    def read_audit(self, session_id: str, *, since: int, limit: int | None, tenant: str | None = None) -> Op[list[str]]:
        reply = yield self._eval(lua.READ_AUDIT, session_id, since, -1 if limit is None else limit, tenant=tenant)
        (events,) = self._ok(session_id, reply, tenant)
        return [decode_text(event) for event in events]

    # locks: SET NX PX with the owner; the lease runs on the server's clock and the holder renews it.
    def try_lock(self, session_id: str, owner: str, *, lease: float, now: float, tenant: str | None = None) -> Op[bool]:
        reply = yield self._eval(lua.TRY_LOCK, session_id, owner, max(1, int(lease * 1000)), tenant=tenant)
        (taken,) = self._ok(session_id, reply, tenant)
        return bool(int(taken))

    def renew_lock(self, session_id: str, owner: str, *, lease: float, now: float) -> Op[bool]:
        (renewed,) = self._ok(
            session_id, (yield self._eval(lua.RENEW_LOCK, session_id, owner, max(1, int(lease * 1000))))
        )
        return bool(int(renewed))

    def lock_holder(self, session_id: str, *, now: float) -> Op[tuple[str, float] | None]:
        found = self._ok(session_id, (yield self._eval(lua.LOCK_HOLDER, session_id)))
        if not found:
            return None
        owner, left_ms = found
        return decode_member(owner), max(0.0, int(left_ms) / 1000) if int(left_ms) >= 0 else 0.0

    def unlock(self, session_id: str, owner: str) -> Op[None]:
        yield self._eval(lua.UNLOCK, session_id, owner)
