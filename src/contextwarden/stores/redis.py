"""Redis session store (redis-py; extra ``[redis]``).

Every key of a session carries the hash tag ``{<prefix>:<session>}``, so a session lives in one
Redis Cluster slot and each operation is one Lua script over that slot: atomic (a batch of
messages appears whole or not at all) and one round trip. Session ids are percent-encoded in
keys, so ids with ``/``, quotes, braces or colons cannot collide or break the tag.

Keys of session ``S`` (``T = {prefix:S}``): ``T:meta`` (hash), ``T:ids`` (message id -> position),
``T:msgs`` (list of message JSON), ``T:state`` / ``T:statever`` (state slots and their versions),
``T:snaps`` / ``T:snapmeta``, ``T:audit`` (list), ``T:lock``. Listing uses two sorted sets outside
the session slot, ``prefix:sessions`` and ``prefix:tenant=<tenant>``; they are updated after the
session's own keys and cleaned lazily, so a listing never shows a session that is gone. No key
has a colon after ``prefix:`` (tenants and session ids are percent-encoded), so the keys of two
prefixes never collide, even when one prefix extends the other (``cw`` and ``cw:tenant``).
Namespaces written by schema version 1 kept tenant listings under ``prefix:tenant:<tenant>``;
the first use by this release copies them to the new keys (one pass over the session index).

With ``ttl`` set, every write pushes the expiry of all the session's keys ``ttl`` seconds ahead:
Redis itself then removes idle sessions. Without it, `expire_idle` walks the session index
(cost grows with the number of sessions; run it from a periodic job, not per request).

Redis Cluster: pass a ``redis.cluster.RedisCluster`` (or ``redis.asyncio.cluster.RedisCluster``)
client, or open ``redis+cluster://host:port,host2:port2/?prefix=cw`` (``rediss+cluster://`` for
TLS; every listed node is a seed, one reachable seed is enough). No script ever touches two
slots: a session's scripts touch only its own tagged keys, and the indexes are separate keys
changed by plain single-key commands, so sessions and indexes spread over all masters. Listing
and expiry send one pipeline per page, which the cluster client splits by node. A master that
loses its data (restarted without persistence, failed over without a replica) may take an index
with it while other masters keep their sessions: `RedisStore.reindex` rebuilds the indexes.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Self
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import (
    ClusterDownError,
    ClusterError,
    ConnectionError as RedisConnectionError,
    NoScriptError,
    RedisClusterException,
    RedisError,
    SlotNotCoveredError,
    TimeoutError as RedisTimeoutError,
    TryAgainError,
)
from redis.retry import Retry

from ..exceptions import ConfigError, SchemaError, StoreError, StoreUnavailable
from .base import BaseAsyncStore, BaseStore
from .locks import DEFAULT_LOCK_LEASE
from .ops import Op, T, adrive, drive
from .protocols import SessionInfo, session_info
from .values import FORMAT_VERSION, check_format, corrupted, not_found, stored_int, transcript_moved

__all__ = ["AsyncRedisStore", "RedisStore"]

SCHEMA_VERSION = 2
"""Layout version kept in ``prefix:schema``; 2 moved the tenant indexes to ``prefix:tenant=<tenant>``."""
_SUFFIXES = (":meta", ":ids", ":msgs", ":state", ":statever", ":snaps", ":snapmeta", ":audit", ":lock")
_SCAN_PAGE = 500


@dataclass(frozen=True, slots=True)
class _Script:
    source: str
    sha: str


def _script(body: str) -> _Script:
    source = _PRELUDE + body
    return _Script(source=source, sha=hashlib.sha1(source.encode()).hexdigest())


# KEYS: the nine session keys in _SUFFIXES order. ARGV[1] now, ARGV[2] ttl in ms (0: none),
# ARGV[3] newest readable format, ARGV[4] the tenant the caller names ('' for any), then the
# operation's own arguments. Replies start with a status: 0 ok, -1 no such session (or one of
# another tenant: the caller cannot tell the two apart), -2 a format field that is not a number,
# > 0 the session's (too new) format.
_PRELUDE = """
local function owned()
  if ARGV[4] == '' then return true end
  return redis.call('HGET', KEYS[1], 'tenant') == ARGV[4]
end
local function guard()
  local fmt = redis.call('HGET', KEYS[1], 'format')
  if not fmt or not owned() then return -1 end
  fmt = tonumber(fmt)
  if not fmt then return -2 end
  if fmt > tonumber(ARGV[3]) then return fmt end
  return 0
end
local function refresh()
  local last = tonumber(redis.call('HGET', KEYS[1], 'last_active') or '0') or 0
  if tonumber(ARGV[1]) > last then redis.call('HSET', KEYS[1], 'last_active', ARGV[1]) end
  local ttl = tonumber(ARGV[2])
  if ttl > 0 then
    for i = 1, 8 do redis.call('PEXPIRE', KEYS[i], ttl) end
  end
end
local function stop_of(count, start, limit)
  local stop = count - 1
  if limit >= 0 and start + limit - 1 < stop then stop = start + limit - 1 end
  return stop
end
"""

_CREATE = _script("""
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'tenant', ARGV[5], 'created_at', ARGV[6], 'last_active', ARGV[7],
    'model', ARGV[8], 'window', ARGV[9], 'metadata', ARGV[10], 'format', ARGV[11])
  refresh()
end
return {0, redis.call('HGETALL', KEYS[1]), redis.call('LLEN', KEYS[3])}
""")
_GET = _script("""
if redis.call('EXISTS', KEYS[1]) == 0 or not owned() then return {-1} end
return {0, redis.call('HGETALL', KEYS[1]), redis.call('LLEN', KEYS[3])}
""")
_TOUCH = _script("""
local g = guard() if g ~= 0 then return {g} end
refresh()
return {0}
""")
_ARCHIVE = _script("""
local g = guard() if g ~= 0 then return {g} end
redis.call('HSETNX', KEYS[1], 'archived_at', ARGV[1])
return {0}
""")
_DELETE = _script("""
if redis.call('EXISTS', KEYS[1]) == 0 or not owned() then return {-1} end
local tenant = redis.call('HGET', KEYS[1], 'tenant')
for i = 1, #KEYS do redis.call('DEL', KEYS[i]) end
return {0, tenant}
""")
_DELETE_IDLE = _script("""
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
if redis.call('HEXISTS', KEYS[1], 'archived_at') == 1 then return {0, 0} end
local last = tonumber(redis.call('HGET', KEYS[1], 'last_active') or '')
if not last or last >= tonumber(ARGV[5]) then return {0, 0} end
local tenant = redis.call('HGET', KEYS[1], 'tenant')
for i = 1, #KEYS do redis.call('DEL', KEYS[i]) end
return {0, 1, tenant}
""")
# ARGV[5]: the transcript length the caller expects (-1: any); at another length nothing is written
# and the reply is {0, -1, length}.
_APPEND = _script("""
local g = guard() if g ~= 0 then return {g} end
local n = redis.call('LLEN', KEYS[3])
local expected = tonumber(ARGV[5])
if expected >= 0 and n ~= expected then return {0, -1, n} end
local added = 0
for i = 6, #ARGV, 2 do
  if redis.call('HSETNX', KEYS[2], ARGV[i], n) == 1 then
    redis.call('RPUSH', KEYS[3], ARGV[i + 1])
    n = n + 1
    added = added + 1
  end
end
refresh()
return {0, added}
""")
_LOAD = _script("""
local g = guard() if g ~= 0 then return {g} end
local start = tonumber(ARGV[5])
local stop = stop_of(redis.call('LLEN', KEYS[3]), start, tonumber(ARGV[6]))
if stop < start then return {0, {}} end
return {0, redis.call('LRANGE', KEYS[3], start, stop)}
""")
_COUNT = _script("""
local g = guard() if g ~= 0 then return {g} end
return {0, redis.call('LLEN', KEYS[3])}
""")
_GET_MESSAGE = _script("""
local g = guard() if g ~= 0 then return {g} end
local seq = redis.call('HGET', KEYS[2], ARGV[5])
if not seq then return {0} end
return {0, seq, redis.call('LINDEX', KEYS[3], seq)}
""")
_LOAD_STATE = _script("""
local g = guard() if g ~= 0 then return {g} end
local body = redis.call('HGET', KEYS[4], ARGV[5]) or false
return {0, redis.call('HGET', KEYS[5], 'v:' .. ARGV[5]) or '0', body}
""")
# The writer's token makes a retried save (after a dropped connection) recognize its own success.
_SAVE_STATE = _script("""
local g = guard() if g ~= 0 then return {g} end
local slot = ARGV[5]
local stored = redis.call('HGET', KEYS[5], 'v:' .. slot) or '0'
local current = tonumber(stored)
if not current then return {0, 0, stored} end
local expected = tonumber(ARGV[7])
if current ~= expected then
  if current == expected + 1 and redis.call('HGET', KEYS[5], 't:' .. slot) == ARGV[8] then return {0, 1, current} end
  return {0, 0, current}
end
redis.call('HSET', KEYS[4], slot, ARGV[6])
redis.call('HSET', KEYS[5], 'v:' .. slot, current + 1, 't:' .. slot, ARGV[8])
refresh()
return {0, 1, current + 1}
""")
_RESTORE_STATE = _script("""
local g = guard() if g ~= 0 then return {g} end
redis.call('HSET', KEYS[4], ARGV[5], ARGV[6])
redis.call('HSET', KEYS[5], 'v:' .. ARGV[5], ARGV[7])
refresh()
return {0}
""")
_LIST_STATES = _script("""
local g = guard() if g ~= 0 then return {g} end
return {0, redis.call('HGETALL', KEYS[4]), redis.call('HGETALL', KEYS[5])}
""")
_PUT_SNAPSHOT = _script("""
local g = guard() if g ~= 0 then return {g} end
redis.call('HSET', KEYS[6], ARGV[5], ARGV[6])
redis.call('HSET', KEYS[7], ARGV[5], ARGV[7])
refresh()
return {0}
""")
_GET_SNAPSHOT = _script("""
local g = guard() if g ~= 0 then return {g} end
local data = redis.call('HGET', KEYS[6], ARGV[5])
if not data then return {0} end
return {0, data, redis.call('HGET', KEYS[7], ARGV[5]) or '{}'}
""")
_LIST_SNAPSHOTS = _script("""
local g = guard() if g ~= 0 then return {g} end
return {0, redis.call('HKEYS', KEYS[6])}
""")
_AUDIT = _script("""
local g = guard() if g ~= 0 then return {g} end
redis.call('RPUSH', KEYS[8], ARGV[5])
refresh()
return {0}
""")
_READ_AUDIT = _script("""
local g = guard() if g ~= 0 then return {g} end
local start = tonumber(ARGV[5])
local stop = stop_of(redis.call('LLEN', KEYS[8]), start, tonumber(ARGV[6]))
if stop < start then return {0, {}} end
return {0, redis.call('LRANGE', KEYS[8], start, stop)}
""")
_TRY_LOCK = _script("""
local g = guard() if g ~= 0 then return {g} end
if redis.call('SET', KEYS[9], ARGV[5], 'NX', 'PX', ARGV[6]) then return {0, 1} end
return {0, 0}
""")
_RENEW_LOCK = _script("""
if redis.call('GET', KEYS[9]) ~= ARGV[5] then return {0, 0} end
redis.call('PEXPIRE', KEYS[9], ARGV[6])
return {0, 1}
""")
_LOCK_HOLDER = _script("""
local owner = redis.call('GET', KEYS[9])
if not owner then return {0} end
return {0, owner, redis.call('PTTL', KEYS[9])}
""")
_UNLOCK = _script("""
if redis.call('GET', KEYS[9]) == ARGV[5] then redis.call('DEL', KEYS[9]) end
return {0}
""")


@dataclass(frozen=True, slots=True)
class _Cmd:
    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class _Eval:
    script: _Script
    keys: tuple[str, ...]
    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class _Pipe:
    """Commands sent in one round trip (not a transaction: they may touch several slots)."""

    commands: tuple[_Cmd | _Eval, ...]


def _text(value: bytes | str) -> str:
    # Lossless: an invalid byte (a corrupted value) becomes a lone surrogate, which the store's
    # decoding reports as a SchemaError naming the session and the field (never a silent U+FFFD).
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def _member(value: bytes | str) -> str:
    # Index members are only ever session ids we wrote; a damaged one is dropped by the listing.
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _pairs(flat: Sequence[bytes]) -> dict[str, bytes]:
    return {_text(flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}


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
        return tuple(tag + suffix for suffix in _SUFFIXES)

    def meta_pattern(self) -> str:
        """A SCAN pattern matching the metadata key of every session of the namespace (and a few others)."""
        escaped = "".join("\\" + c if c in "*?[]\\" else c for c in self.prefix)
        return "{" + escaped + ":*}:meta"

    def session_of_meta_key(self, key: bytes | str) -> str | None:
        """The session id whose metadata key this is (None for a key that is not one of this prefix)."""
        text = _member(key)
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

    def _eval(self, script: _Script, session_id: str, *args: Any, now: float = 0.0, tenant: str | None = None) -> _Eval:
        fixed = (repr(now), self._ttl_ms, FORMAT_VERSION, tenant or "")
        return _Eval(script, self.keys(session_id), (*fixed, *args))

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
            tenant=_text(field("tenant")),
            created_at=_text(field("created_at")),
            last_active=_text(field("last_active")),
            model=decoded("model"),
            window=decoded("window"),
            metadata=_text(field("metadata")),
            archived_at=None if archived is None else _text(archived),
            message_count=count,
            fmt=_text(field("format")),
        )

    # schema
    def setup(self) -> Op[int]:
        yield _Cmd(("SET", self.schema_key, SCHEMA_VERSION, "NX"))
        stored = yield _Cmd(("GET", self.schema_key))
        try:
            version = int(stored)
        except (TypeError, ValueError):
            version = -1
        if version > SCHEMA_VERSION or version < 1:
            raise SchemaError(
                f"Redis key {self.schema_key!r} says contextwarden schema version {_member(stored or b'?')!r}, but "
                f"this release knows versions up to {SCHEMA_VERSION}; upgrade contextwarden (`pip install -U "
                "contextwarden`) or use another `prefix`."
            )
        if version < SCHEMA_VERSION:
            yield from self._migrate_tenant_indexes()
            yield _Cmd(("SET", self.schema_key, SCHEMA_VERSION))
        return SCHEMA_VERSION

    def _migrate_tenant_indexes(self) -> Op[None]:
        """Schema 1 to 2: list each session of the main index under its tenant's new index key.

        The old ``prefix:tenant:<tenant>`` keys are left alone: one of them may be the main index
        of a longer prefix (``prefix:tenant``), which is why the layout changed.
        """
        after: str | None = None
        while True:
            page = yield from self._index_page(self.index, after, _SCAN_PAGE)
            if not page:
                return
            replies = yield _Pipe(tuple(self._eval(_GET, session_id) for session_id in page))
            adds: list[_Cmd | _Eval] = []
            for session_id, reply in zip(page, replies, strict=True):
                if int(reply[0]) == 0:
                    tenant = _pairs(reply[1]).get("tenant")
                    if tenant is not None:
                        adds.append(_Cmd(("ZADD", self.tenant_index(_member(tenant)), 0, session_id)))
            if adds:
                yield _Pipe(tuple(adds))
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
            _CREATE,
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
        info = self._info(session_id, _pairs(meta), count)
        if info.tenant == tenant:  # another tenant's session is not listed under this one
            yield _Pipe(
                (
                    _Cmd(("ZADD", self.index, 0, session_id)),
                    _Cmd(("ZADD", self.tenant_index(info.tenant), 0, session_id)),
                )
            )
        return info

    def get_session(self, session_id: str, *, tenant: str | None = None) -> Op[SessionInfo | None]:
        reply = yield self._eval(_GET, session_id, tenant=tenant)
        if int(reply[0]) == -1:
            return None
        return self._info(session_id, _pairs(reply[1]), reply[2])

    def touch(self, session_id: str, *, now: float, tenant: str | None = None) -> Op[None]:
        self._ok(session_id, (yield self._eval(_TOUCH, session_id, now=now, tenant=tenant)), tenant)

    def _index_page(self, index: str, after: str | None, count: int) -> Op[list[str]]:
        low = "-" if after is None else "(" + after
        members = yield _Cmd(("ZRANGEBYLEX", index, low, "+", "LIMIT", 0, count))
        return [_member(member) for member in members]

    def list_sessions(
        self, *, tenant: str | None, limit: int, after: str | None, include_archived: bool
    ) -> Op[list[SessionInfo]]:
        index = self.index if tenant is None else self.tenant_index(tenant)
        found: list[SessionInfo] = []
        while len(found) < limit:
            page = yield from self._index_page(index, after, min(_SCAN_PAGE, 2 * (limit - len(found)) + 1))
            if not page:
                break
            # With a tenant, the script itself checks each session belongs to it.
            replies = yield _Pipe(tuple(self._eval(_GET, session_id, tenant=tenant) for session_id in page))
            gone: list[str] = []
            for session_id, reply in zip(page, replies, strict=True):
                if int(reply[0]) == -1:
                    gone.append(session_id)
                    continue
                info = self._info(session_id, _pairs(reply[1]), reply[2])
                if include_archived or not info.archived:
                    found.append(info)
                    if len(found) >= limit:
                        break
            if gone:
                # Sessions removed by their TTL (or a crash before the index update) leave index entries behind.
                yield _Cmd(("ZREM", index, *gone))
            after = page[-1]
        return found

    def archive(self, session_id: str, *, now: float, tenant: str | None = None) -> Op[None]:
        self._ok(session_id, (yield self._eval(_ARCHIVE, session_id, now=now, tenant=tenant)), tenant)

    def delete_session(self, session_id: str, *, tenant: str | None = None) -> Op[None]:
        (owner,) = self._ok(session_id, (yield self._eval(_DELETE, session_id, tenant=tenant)), tenant)
        yield _Pipe(
            (
                _Cmd(("ZREM", self.index, session_id)),
                _Cmd(("ZREM", self.tenant_index(_member(owner)), session_id)),
            )
        )

    def expire_idle(self, *, cutoff: float) -> Op[list[str]]:
        expired: list[str] = []
        after: str | None = None
        while True:
            page = yield from self._index_page(self.index, after, _SCAN_PAGE)
            if not page:
                break
            replies = yield _Pipe(tuple(self._eval(_DELETE_IDLE, sid, repr(cutoff)) for sid in page))
            removals: list[_Cmd | _Eval] = []
            for session_id, reply in zip(page, replies, strict=True):
                if int(reply[0]) == -1:
                    removals.append(_Cmd(("ZREM", self.index, session_id)))
                elif int(reply[1]) == 1:
                    expired.append(session_id)
                    removals.append(_Cmd(("ZREM", self.index, session_id)))
                    removals.append(_Cmd(("ZREM", self.tenant_index(_member(reply[2])), session_id)))
            if removals:
                yield _Pipe(tuple(removals))
            after = page[-1]
        return sorted(expired)

    def reindex(self, session_ids: Sequence[str]) -> Op[int]:
        """Put the sessions (found by a key scan) back into the listing indexes; return how many exist."""
        replies = yield _Pipe(tuple(self._eval(_GET, session_id) for session_id in session_ids))
        adds: list[_Cmd | _Eval] = []
        for session_id, reply in zip(session_ids, replies, strict=True):
            if int(reply[0]) == -1:
                continue  # deleted since the scan saw it
            adds.append(_Cmd(("ZADD", self.index, 0, session_id)))
            tenant = _pairs(reply[1]).get("tenant")
            if tenant is not None:
                adds.append(_Cmd(("ZADD", self.tenant_index(_member(tenant)), 0, session_id)))
        if adds:
            yield _Pipe(tuple(adds))
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
        reply = yield self._eval(_APPEND, session_id, wanted, *flat, now=now, tenant=tenant)
        added, *count = self._ok(session_id, reply, tenant)
        if int(added) < 0:
            assert expected is not None
            raise transcript_moved(session_id, expected, int(count[0]))
        return int(added)

    def load_messages(
        self, session_id: str, *, start: int, limit: int | None, tenant: str | None = None
    ) -> Op[list[tuple[int, str]]]:
        reply = yield self._eval(_LOAD, session_id, start, -1 if limit is None else limit, tenant=tenant)
        (bodies,) = self._ok(session_id, reply, tenant)
        return [(start + offset, _text(body)) for offset, body in enumerate(bodies)]

    def count_messages(self, session_id: str, *, tenant: str | None = None) -> Op[int]:
        (count,) = self._ok(session_id, (yield self._eval(_COUNT, session_id, tenant=tenant)), tenant)
        return int(count)

    def get_message(self, session_id: str, message_id: str, *, tenant: str | None = None) -> Op[tuple[int, str] | None]:
        found = self._ok(session_id, (yield self._eval(_GET_MESSAGE, session_id, message_id, tenant=tenant)), tenant)
        if not found or found[0] is None:
            return None
        seq = stored_int(found[0], session_id=session_id, what="message position", minimum=0)
        return None if found[1] is None else (seq, _text(found[1]))

    # state
    def load_state(self, session_id: str, slot: str, *, tenant: str | None = None) -> Op[tuple[str | None, int]]:
        reply = yield self._eval(_LOAD_STATE, session_id, slot, tenant=tenant)
        version, body = self._ok(session_id, reply, tenant)
        what = f"version of state {slot!r}"
        return (None if body is None else _text(body)), stored_int(version, session_id=session_id, what=what, minimum=0)

    def save_state(
        self, session_id: str, slot: str, body: str, *, expected: int, now: float, token: str, tenant: str | None = None
    ) -> Op[tuple[bool, int]]:
        reply = yield self._eval(_SAVE_STATE, session_id, slot, body, expected, token, now=now, tenant=tenant)
        ok, version = self._ok(session_id, reply, tenant)
        version = stored_int(version, session_id=session_id, what=f"version of state {slot!r}", minimum=0)
        return bool(int(ok)), version

    def restore_state(self, session_id: str, slot: str, body: str, *, version: int, now: float) -> Op[None]:
        self._ok(session_id, (yield self._eval(_RESTORE_STATE, session_id, slot, body, version, now=now)))

    def list_states(self, session_id: str, *, tenant: str | None = None) -> Op[list[tuple[str, str, int]]]:
        bodies, versions = self._ok(session_id, (yield self._eval(_LIST_STATES, session_id, tenant=tenant)), tenant)
        by_slot = _pairs(bodies)
        version_of = _pairs(versions)
        return [
            (
                slot,
                _text(by_slot[slot]),
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
        reply = yield self._eval(_PUT_SNAPSHOT, session_id, snapshot_id, data, metadata, now=now, tenant=tenant)
        self._ok(session_id, reply, tenant)

    def get_snapshot(
        self, session_id: str, snapshot_id: str, *, tenant: str | None = None
    ) -> Op[tuple[bytes, str] | None]:
        reply = yield self._eval(_GET_SNAPSHOT, session_id, snapshot_id, tenant=tenant)
        found = self._ok(session_id, reply, tenant)
        if not found:
            return None
        return bytes(found[0]), _text(found[1])

    def list_snapshots(self, session_id: str, *, tenant: str | None = None) -> Op[list[str]]:
        (names,) = self._ok(session_id, (yield self._eval(_LIST_SNAPSHOTS, session_id, tenant=tenant)), tenant)
        return sorted(_text(name) for name in names)

    # audit
    def append_audit(self, session_id: str, event: str, *, now: float, tenant: str | None = None) -> Op[None]:
        self._ok(session_id, (yield self._eval(_AUDIT, session_id, event, now=now, tenant=tenant)), tenant)

    def read_audit(self, session_id: str, *, since: int, limit: int | None, tenant: str | None = None) -> Op[list[str]]:
        reply = yield self._eval(_READ_AUDIT, session_id, since, -1 if limit is None else limit, tenant=tenant)
        (events,) = self._ok(session_id, reply, tenant)
        return [_text(event) for event in events]

    # locks: SET NX PX with the owner; the lease runs on the server's clock and the holder renews it.
    def try_lock(self, session_id: str, owner: str, *, lease: float, now: float, tenant: str | None = None) -> Op[bool]:
        reply = yield self._eval(_TRY_LOCK, session_id, owner, max(1, int(lease * 1000)), tenant=tenant)
        (taken,) = self._ok(session_id, reply, tenant)
        return bool(int(taken))

    def renew_lock(self, session_id: str, owner: str, *, lease: float, now: float) -> Op[bool]:
        (renewed,) = self._ok(session_id, (yield self._eval(_RENEW_LOCK, session_id, owner, max(1, int(lease * 1000)))))
        return bool(int(renewed))

    def lock_holder(self, session_id: str, *, now: float) -> Op[tuple[str, float] | None]:
        found = self._ok(session_id, (yield self._eval(_LOCK_HOLDER, session_id)))
        if not found:
            return None
        owner, left_ms = found
        return _member(owner), max(0.0, int(left_ms) / 1000) if int(left_ms) >= 0 else 0.0

    def unlock(self, session_id: str, owner: str) -> Op[None]:
        yield self._eval(_UNLOCK, session_id, owner)


# --- drivers ------------------------------------------------------------------------------------

_CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
_DEFAULT_PORT = 6379
# A cluster client reports an unreachable or reconfiguring cluster with these messages.
_CLUSTER_UNAVAILABLE = ("cannot be connected", "not covered", "could not agree")


def _check_prefix(prefix: str) -> str:
    if not isinstance(prefix, str) or not prefix or any(c in prefix for c in "{}") or len(prefix) > 100:
        raise ConfigError(
            f"Redis key `prefix` {prefix!r} must be 1 to 100 characters without braces (they would break the "
            "cluster hash tag); use e.g. 'cw' or 'myapp-cw'.",
            key="prefix",
        )
    return prefix


def _connection_kwargs(client: Any) -> dict[str, Any]:
    """The connection settings of a standalone client (its pool's) or a cluster client (its nodes')."""
    for source in (getattr(client, "connection_pool", None), getattr(client, "nodes_manager", None), client):
        kwargs = getattr(source, "connection_kwargs", None)
        if isinstance(kwargs, dict):
            return kwargs
    return {}


def _check_client(client: Any) -> None:
    if _connection_kwargs(client).get("decode_responses"):
        raise ConfigError(
            "the Redis client decodes responses to str, which would corrupt binary snapshots; create it with "
            "`decode_responses=False` (the default).",
            key="decode_responses",
        )


@dataclass(frozen=True, slots=True)
class _Target:
    """A store URL taken apart."""

    url: str
    """The URL for redis-py: ``redis://`` or ``rediss://``, one host, our options removed."""
    options: dict[str, Any]
    """Our own options from the query (prefix, ttl)."""
    cluster: bool
    seeds: tuple[tuple[str, int], ...] = ()
    """Further cluster nodes listed after the first one."""

    @property
    def where(self) -> str:
        """The server(s), for error messages."""
        netloc = urlsplit(self.url).netloc.rpartition("@")[2]
        return "cluster " + ",".join([netloc, *(_join_host(host, port) for host, port in self.seeds)])


def _join_host(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _host_port(text: str, url: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` of one cluster node (port 6379 when left out)."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif ":" in text:
        host, _, port = text.rpartition(":")
    else:
        host, port = text, ""
    try:
        number = int(port) if port else _DEFAULT_PORT
    except ValueError:
        number = -1
    if not host or not 0 < number < 65_536:
        raise ConfigError(
            f"Redis Cluster node {text!r} in {url!r} is not `host:port`; list the nodes as "
            "`redis+cluster://host1:6379,host2:6379/`.",
            key="store_url",
        )
    return host, number


def _parse_url(url: str) -> _Target:
    """Take our options (prefix, ttl) out of the query and resolve ``redis+cluster://`` node lists."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ConfigError(f"Redis URL {url!r} is malformed ({exc}).", key="store_url") from None
    ours: dict[str, Any] = {}
    rest: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "prefix":
            ours["prefix"] = value
        elif key == "ttl":
            ours["ttl"] = float(value)
        else:
            rest.append((key, value))
    parts = parts._replace(query=urlencode(rest, quote_via=quote))
    scheme = parts.scheme.lower()
    if scheme not in _CLUSTER_SCHEMES:
        return _Target(url=urlunsplit(parts), options=ours, cluster=False)
    if parts.path not in ("", "/", "/0"):
        raise ConfigError(
            f"Redis Cluster URL {url!r} names database {parts.path.lstrip('/')!r}, but a cluster has only database "
            "0; end the URL with `/` or `/0`.",
            key="store_url",
        )
    userinfo, at, hosts = parts.netloc.rpartition("@")
    nodes = [_host_port(host, url) for host in hosts.split(",")]
    # redis-py reads credentials and TLS options from a one-host URL; the other nodes join as seeds.
    first = parts._replace(scheme=_CLUSTER_SCHEMES[scheme], netloc=userinfo + at + _join_host(*nodes[0]), path="/0")
    return _Target(url=urlunsplit(first), options=ours, cluster=True, seeds=tuple(nodes[1:]))


def _owned_client_options(options: dict[str, Any], *, asynchronous: bool) -> dict[str, Any]:
    # Fail fast when the server is gone: a handful of short retries, then StoreUnavailable. The
    # asyncio clients need the asyncio Retry (the sync one would not retry awaited calls).
    backoff = ExponentialWithJitterBackoff(base=0.01, cap=0.2)
    defaults: dict[str, Any] = {
        "socket_connect_timeout": 5.0,
        "socket_timeout": 10.0,
        "retry": AsyncRetry(backoff, 3) if asynchronous else Retry(backoff, 3),
    }
    return {**defaults, **options}


def _translate(exc: Exception, where: str) -> StoreError:
    if isinstance(exc, RedisConnectionError | RedisTimeoutError):
        return StoreUnavailable(
            f"Redis at {where} is unreachable ({type(exc).__name__}: {exc}); the operation was not confirmed. "
            "Check the server and retry; appends are idempotent by message id."
        )
    text = str(exc)
    if isinstance(exc, ClusterDownError | ClusterError | TryAgainError | SlotNotCoveredError):
        return StoreUnavailable(
            f"Redis at {where} is not ready ({type(exc).__name__}: {text}); the cluster is failing over or "
            "resharding, retry shortly."
        )
    if isinstance(exc, RedisClusterException):
        if "not enabled" in text:
            return StoreError(
                f"Redis at {where} is not a cluster node ({text}); use a `redis://` URL (or a `redis.Redis` "
                "client) for a standalone server."
            )
        if isinstance(exc.__cause__, RedisConnectionError | RedisTimeoutError | OSError) or any(
            marker in text for marker in _CLUSTER_UNAVAILABLE
        ):
            return StoreUnavailable(
                f"Redis at {where} is unreachable or incomplete ({text}); the operation was not confirmed. "
                "Check the cluster nodes and retry; appends are idempotent by message id."
            )
    if text.startswith(("LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN")):
        return StoreUnavailable(f"Redis at {where} is not ready ({text}); retry shortly.")
    return StoreError(f"Redis at {where} failed: {type(exc).__name__}: {text}")


# The sync ClusterNode is untyped; through this alias strict mypy accepts calling it.
_sync_node: Callable[[str, int], Any] = redis.cluster.ClusterNode

# RedisClusterException (no cluster reachable, slots not covered) is not a RedisError.
_DRIVER_ERRORS = (RedisError, RedisClusterException)


def _describe(client: Any) -> str:
    manager = getattr(client, "nodes_manager", None)
    if manager is not None:
        return "cluster " + (",".join(sorted(getattr(manager, "startup_nodes", {}))) or "?")
    kwargs = _connection_kwargs(client)
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"


def _pipeline_parts(pipe: Any, commands: Sequence[_Cmd | _Eval]) -> None:
    for part in commands:
        if isinstance(part, _Cmd):
            pipe.execute_command(*part.args)
        else:
            pipe.execute_command("EVALSHA", part.script.sha, len(part.keys), *part.keys, *part.args)


def _refused_scripts(commands: Sequence[_Cmd | _Eval], replies: Sequence[Any]) -> list[int]:
    """Positions of the scripts a node did not know (to send again in full); raise any other error.

    A node that lost its script cache (a restart, a failover) refuses only its own share of a
    pipeline; on a cluster the other nodes ran theirs, so only the refused commands are resent.
    """
    refused: list[int] = []
    for position, (part, reply) in enumerate(zip(commands, replies, strict=True)):
        if isinstance(reply, NoScriptError) and isinstance(part, _Eval):
            refused.append(position)
        elif isinstance(reply, Exception):
            raise reply
    return refused


def _eval_args(command: _Eval, *, full: bool) -> tuple[Any, ...]:
    head = ("EVAL", command.script.source) if full else ("EVALSHA", command.script.sha)
    return (*head, len(command.keys), *command.keys, *command.args)


def _close_sync_client(client: Any) -> None:
    manager = getattr(client, "nodes_manager", None)
    if manager is None:
        client.close()
        return
    # A cluster client made from a URL gives each node a Redis client over a pool it passed in,
    # and closing such a client leaves the pool's sockets open: disconnect the pools ourselves.
    nodes = [*getattr(manager, "nodes_cache", {}).values(), *getattr(manager, "startup_nodes", {}).values()]
    client.close()
    for node in nodes:
        node_client = getattr(node, "redis_connection", None)
        if node_client is not None:
            node_client.connection_pool.disconnect()


class RedisStore(BaseStore):
    """`SessionStore` on Redis or Redis Cluster.

    Args:
        client: A ``redis.Redis`` or ``redis.cluster.RedisCluster`` made with ``decode_responses=False``
            (the default); the store does not close it.
        prefix: Namespace of every key (braces not allowed).
        ttl: Seconds of inactivity after which Redis removes a session by itself; None keeps sessions.
        clock: Source of timestamps (tests inject a fake one).
        lock_lease: Seconds a lock outlives its holder's last heartbeat (a live holder renews it).
    """

    def __init__(
        self,
        client: redis.Redis | redis.cluster.RedisCluster,
        *,
        prefix: str = "cw",
        ttl: float | None = None,
        clock: Callable[[], float] = time.time,
        lock_lease: float = DEFAULT_LOCK_LEASE,
    ) -> None:
        super().__init__(clock=clock, lock_lease=lock_lease)
        _check_client(client)
        # redis-py's command methods are untyped; the store only uses execute_command and pipelines.
        self._client: Any = client
        self._ops: RedisOps = RedisOps(prefix=_check_prefix(prefix), ttl=ttl)
        self._owns = False
        self._ready = False
        self._where = _describe(client)

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        prefix: str = "cw",
        ttl: float | None = None,
        clock: Callable[[], float] = time.time,
        lock_lease: float = DEFAULT_LOCK_LEASE,
        **client_options: Any,
    ) -> Self:
        """A store owning a new client for ``url`` (``?prefix=`` and ``?ttl=`` in the query are ours).

        ``redis://`` and ``rediss://`` connect on first use. ``redis+cluster://`` (and
        ``rediss+cluster://``) make a cluster client, which reads the slot map from the first
        reachable node right away.

        Raises:
            StoreUnavailable: a cluster URL whose nodes cannot be reached.
            ConfigError: a malformed URL (a cluster URL naming a database other than 0).
        """
        target = _parse_url(url)
        options = _owned_client_options(client_options, asynchronous=False)
        client: redis.Redis | redis.cluster.RedisCluster
        if target.cluster:
            seeds = [_sync_node(host, port) for host, port in target.seeds]
            try:
                client = redis.cluster.RedisCluster.from_url(target.url, startup_nodes=seeds or None, **options)
            except _DRIVER_ERRORS as exc:
                raise _translate(exc, target.where) from exc
        else:
            client = redis.Redis.from_url(target.url, **options)
        store = cls(
            client,
            prefix=target.options.get("prefix", prefix),
            ttl=target.options.get("ttl", ttl),
            clock=clock,
            lock_lease=lock_lease,
        )
        store._owns = True
        return store

    @classmethod
    @contextmanager
    def from_url(cls, url: str, **kwargs: Any) -> Iterator[Self]:
        """Open the store for ``url`` and close its client when the block ends."""
        store = cls.connect(url, **kwargs)
        try:
            yield store
        finally:
            store.close()

    def close(self) -> None:
        if self._owns:
            _close_sync_client(self._client)

    def _call(self, command: _Cmd | _Eval) -> Any:
        if isinstance(command, _Cmd):
            return self._client.execute_command(*command.args)
        try:
            return self._client.execute_command(*_eval_args(command, full=False))
        except NoScriptError:
            return self._client.execute_command(*_eval_args(command, full=True))

    def _execute(self, command: _Cmd | _Eval | _Pipe) -> Any:
        if not isinstance(command, _Pipe):
            return self._call(command)
        with self._client.pipeline(transaction=False) as pipe:
            _pipeline_parts(pipe, command.commands)
            replies = list(pipe.execute(raise_on_error=False))
        for position in _refused_scripts(command.commands, replies):
            part = command.commands[position]
            assert isinstance(part, _Eval)
            replies[position] = self._client.execute_command(*_eval_args(part, full=True))
        return replies

    def _run(self, op: Op[T], *, write: bool) -> T:
        try:
            if not self._ready:
                drive(self._ops.setup(), self._execute)
                self._ready = True
            return drive(op, self._execute)
        except _DRIVER_ERRORS as exc:
            raise _translate(exc, self._where) from exc

    def reindex(self) -> int:
        """Rebuild the listing indexes from the sessions' own keys; return the number of sessions.

        Needed only after Redis lost the index keys but not all sessions: on a cluster, a master
        that restarted without persistence (or failed over without a replica) takes the indexes it
        held with it, and the sessions on the other masters would no longer be listed or expired.
        It SCANs every master (cost grows with the whole key space): run it from an operator's
        job, not per request.
        """
        found = 0
        batch: list[str] = []
        try:
            for key in self._client.scan_iter(match=self._ops.meta_pattern(), count=1000):
                session_id = self._ops.session_of_meta_key(key)
                if session_id is not None:
                    batch.append(session_id)
                if len(batch) >= _SCAN_PAGE:
                    found += self._run(self._ops.reindex(batch), write=True)
                    batch = []
        except _DRIVER_ERRORS as exc:
            raise _translate(exc, self._where) from exc
        if batch:
            found += self._run(self._ops.reindex(batch), write=True)
        return found


class AsyncRedisStore(BaseAsyncStore):
    """The async twin of `RedisStore`, on ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster``.

    Args:
        client: An asyncio Redis or Redis Cluster client made with ``decode_responses=False``; the
            store does not close it.
        prefix: Namespace of every key (braces not allowed).
        ttl: Seconds of inactivity after which Redis removes a session by itself; None keeps sessions.
        clock: Source of timestamps.
        lock_lease: Seconds a lock outlives its holder's last heartbeat (a live holder renews it).
    """

    def __init__(
        self,
        client: redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster,
        *,
        prefix: str = "cw",
        ttl: float | None = None,
        clock: Callable[[], float] = time.time,
        lock_lease: float = DEFAULT_LOCK_LEASE,
    ) -> None:
        super().__init__(clock=clock, lock_lease=lock_lease)
        _check_client(client)
        # redis-py's command methods are untyped; the store only uses execute_command and pipelines.
        self._client: Any = client
        self._ops: RedisOps = RedisOps(prefix=_check_prefix(prefix), ttl=ttl)
        self._owns = False
        self._ready = False
        self._where = _describe(client)

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        prefix: str = "cw",
        ttl: float | None = None,
        clock: Callable[[], float] = time.time,
        lock_lease: float = DEFAULT_LOCK_LEASE,
        **client_options: Any,
    ) -> Self:
        """A store owning a new client for ``url`` (a ``redis+cluster://`` URL too); it connects on first use."""
        target = _parse_url(url)
        options = _owned_client_options(client_options, asynchronous=True)
        client: redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster
        if target.cluster:
            seeds = [redis.asyncio.cluster.ClusterNode(host, port) for host, port in target.seeds]
            client = redis.asyncio.cluster.RedisCluster.from_url(target.url, startup_nodes=seeds or None, **options)
        else:
            client = redis.asyncio.Redis.from_url(target.url, **options)
        store = cls(
            client,
            prefix=target.options.get("prefix", prefix),
            ttl=target.options.get("ttl", ttl),
            clock=clock,
            lock_lease=lock_lease,
        )
        store._owns = True
        return store

    @classmethod
    @asynccontextmanager
    async def from_url(cls, url: str, **kwargs: Any) -> AsyncIterator[Self]:
        """Open the store for ``url`` and close its client when the block ends."""
        store = cls.connect(url, **kwargs)
        try:
            yield store
        finally:
            await store.aclose()

    async def aclose(self) -> None:
        if self._owns:
            await self._client.aclose()

    async def _call(self, command: _Cmd | _Eval) -> Any:
        if isinstance(command, _Cmd):
            return await self._client.execute_command(*command.args)
        try:
            return await self._client.execute_command(*_eval_args(command, full=False))
        except NoScriptError:
            return await self._client.execute_command(*_eval_args(command, full=True))

    async def _execute(self, command: _Cmd | _Eval | _Pipe) -> Any:
        if not isinstance(command, _Pipe):
            return await self._call(command)
        async with self._client.pipeline(transaction=False) as pipe:
            _pipeline_parts(pipe, command.commands)
            replies = list(await pipe.execute(raise_on_error=False))
        for position in _refused_scripts(command.commands, replies):
            part = command.commands[position]
            assert isinstance(part, _Eval)
            replies[position] = await self._client.execute_command(*_eval_args(part, full=True))
        return replies

    async def _run(self, op: Op[T], *, write: bool) -> T:
        execute: Callable[[Any], Awaitable[Any]] = self._execute
        try:
            if not self._ready:
                await adrive(self._ops.setup(), execute)
                self._ready = True
            return await adrive(op, execute)
        except _DRIVER_ERRORS as exc:
            raise _translate(exc, self._where) from exc

    async def reindex(self) -> int:
        """Rebuild the listing indexes from the sessions' own keys (see `RedisStore.reindex`)."""
        found = 0
        batch: list[str] = []
        try:
            async for key in self._client.scan_iter(match=self._ops.meta_pattern(), count=1000):
                session_id = self._ops.session_of_meta_key(key)
                if session_id is not None:
                    batch.append(session_id)
                if len(batch) >= _SCAN_PAGE:
                    found += await self._run(self._ops.reindex(batch), write=True)
                    batch = []
        except _DRIVER_ERRORS as exc:
            raise _translate(exc, self._where) from exc
        if batch:
            found += await self._run(self._ops.reindex(batch), write=True)
        return found
