"""Every public store method as one sans-IO flow, shared by the sync and the async stores.

A flow checks its arguments, yields the transactions it needs (`Txn`), decides on their results
and returns the method's value; `BaseStore` and `BaseAsyncStore` only drive flows (`run_flow`,
`arun_flow`). So each rule (an id check, a tenant check, a conflict, an export's pages) is
written once, and both twins behave the same by construction.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..exceptions import MessageNotFound, UsageError
from ..messages import Message
from .codec import check_slot, decode_audit, decode_messages, decode_state, encode_messages, encode_state
from .export import export_stream, import_flow, read_export
from .locks import DEFAULT_LOCK_LEASE, acquire_flow, renew_flow
from .ops import Flow, StoreOps, Stream, Txn
from .protocols import SessionInfo, StateWrite
from .values import (
    check_expected,
    check_id,
    check_range,
    check_snapshot_id,
    check_tenant,
    create_args,
    dumps_value,
    missing_snapshot,
    not_found,
    state_conflict,
    stored_int,
    tenant_taken,
)

__all__ = ["StoreFlows"]


class StoreFlows:
    """The flows of the store methods; a backend provides ``_ops`` (its `StoreOps`).

    Args:
        clock: Source of timestamps (tests inject a fake one).
        lock_lease: Seconds a lock outlives its holder's last renewal.
    """

    _ops: StoreOps

    def __init__(self, *, clock: Callable[[], float] = time.time, lock_lease: float = DEFAULT_LOCK_LEASE) -> None:
        if not (lock_lease > 0 and math.isfinite(lock_lease)):
            raise UsageError(f"`lock_lease` must be a positive number of seconds, got {lock_lease!r}.")
        self._clock = clock
        self._lock_lease = lock_lease

    # lifecycle
    def _setup_flow(self) -> Flow[int]:
        version: int = yield Txn(self._ops.setup(), write=True)
        return version

    def _create_session_flow(
        self,
        session_id: str,
        tenant: str,
        model: str | None,
        window: int | None,
        metadata: Mapping[str, Any] | None,
    ) -> Flow[SessionInfo]:
        args = create_args(session_id, tenant, model, window, metadata, now=self._clock())
        info: SessionInfo = yield Txn(self._ops.create_session(session_id, **args), write=True)
        if info.tenant != tenant:
            raise tenant_taken(session_id, tenant)
        return info

    def _get_session_flow(self, session_id: str, tenant: str | None) -> Flow[SessionInfo]:
        tenant = check_tenant(tenant)
        info: SessionInfo | None = yield Txn(self._ops.get_session(check_id(session_id), tenant=tenant), write=False)
        if info is None:
            raise not_found(session_id, tenant)
        return info

    def _touch_flow(self, session_id: str, tenant: str | None) -> Flow[None]:
        yield Txn(self._ops.touch(check_id(session_id), now=self._clock(), tenant=check_tenant(tenant)), write=True)

    def _list_sessions_flow(
        self, tenant: str | None, limit: int, cursor: str | None, include_archived: bool
    ) -> Flow[tuple[list[SessionInfo], str | None]]:
        if tenant is not None:
            check_id(tenant, what="tenant")
        if cursor is not None:
            check_id(cursor, what="cursor")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise UsageError(f"`limit` must be an int >= 1, got {limit!r}.")
        op = self._ops.list_sessions(tenant=tenant, limit=limit + 1, after=cursor, include_archived=include_archived)
        rows: list[SessionInfo] = yield Txn(op, write=False)
        page = rows[:limit]
        return page, (page[-1].session_id if len(rows) > limit else None)

    def _archive_flow(self, session_id: str, tenant: str | None) -> Flow[None]:
        yield Txn(self._ops.archive(check_id(session_id), now=self._clock(), tenant=check_tenant(tenant)), write=True)

    def _delete_session_flow(self, session_id: str, tenant: str | None) -> Flow[None]:
        yield Txn(self._ops.delete_session(check_id(session_id), tenant=check_tenant(tenant)), write=True)

    def _expire_idle_flow(self, max_idle_seconds: float) -> Flow[list[str]]:
        if not max_idle_seconds >= 0:
            raise UsageError(f"`max_idle_seconds` must be >= 0, got {max_idle_seconds!r}.")
        expired: list[str] = yield Txn(self._ops.expire_idle(cutoff=self._clock() - max_idle_seconds), write=True)
        return expired

    # transcript
    def _append_messages_flow(
        self,
        session_id: str,
        messages: Sequence[Message],
        tenant: str | None,
        expected_count: int | None,
        state: StateWrite | None = None,
    ) -> Flow[int]:
        check_id(session_id)
        tenant = check_tenant(tenant)
        check_range("expected_count", expected_count, allow_none=True)
        items = encode_messages(messages)
        now = self._clock()
        if state is None:
            op = self._ops.append_messages(session_id, items, now=now, tenant=tenant, expected=expected_count)
        else:
            op = self._ops.append_with_state(
                session_id,
                items,
                check_slot(state.slot),
                encode_state(state.state),
                version=check_expected(state.version),
                token=uuid.uuid4().hex,
                now=now,
                tenant=tenant,
                expected=expected_count,
            )
        added: int = yield Txn(op, write=True)
        return added

    def _load_messages_flow(
        self, session_id: str, start: int, limit: int | None, tenant: str | None
    ) -> Flow[list[Message]]:
        check_id(session_id)
        check_range("start", start)
        check_range("limit", limit, allow_none=True)
        op = self._ops.load_messages(session_id, start=start, limit=limit, tenant=check_tenant(tenant))
        return decode_messages(session_id, (yield Txn(op, write=False)))

    def _count_messages_flow(self, session_id: str, tenant: str | None) -> Flow[int]:
        count: int = yield Txn(self._ops.count_messages(check_id(session_id), tenant=check_tenant(tenant)), write=False)
        return count

    def _get_message_flow(self, session_id: str, message_id: str, tenant: str | None) -> Flow[Message]:
        check_id(session_id)
        op = self._ops.get_message(session_id, check_id(message_id, what="message_id"), tenant=check_tenant(tenant))
        row = yield Txn(op, write=False)
        if row is None:
            raise MessageNotFound(
                f"Session {session_id!r} has no message {message_id!r}.", session_id=session_id, message_id=message_id
            )
        return decode_messages(session_id, [row])[0]

    # state
    def _load_state_flow(
        self, session_id: str, slot: str, tenant: str | None
    ) -> Flow[tuple[dict[str, Any] | None, int]]:
        check_id(session_id)
        op = self._ops.load_state(session_id, check_slot(slot), tenant=check_tenant(tenant))
        body, version = yield Txn(op, write=False)
        stored = stored_int(version, session_id=session_id, what=f"version of state {slot!r}", minimum=0)
        return decode_state(session_id, slot, body), stored

    def _save_state_flow(
        self, session_id: str, state: Mapping[str, Any], expected_version: int, slot: str, tenant: str | None
    ) -> Flow[int]:
        check_id(session_id)
        expected = check_expected(expected_version)
        body = encode_state(state)
        op = self._ops.save_state(
            session_id,
            check_slot(slot),
            body,
            expected=expected,
            now=self._clock(),
            token=uuid.uuid4().hex,
            tenant=check_tenant(tenant),
        )
        ok, version = yield Txn(op, write=True)
        if not ok:
            raise state_conflict(session_id, slot, expected, version)
        saved: int = version
        return saved

    # snapshots
    def _put_snapshot_flow(
        self, session_id: str, snapshot_id: str, data: bytes, metadata: Mapping[str, Any] | None, tenant: str | None
    ) -> Flow[None]:
        check_id(session_id)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise UsageError(f"snapshot data must be bytes, got {type(data).__name__}; encode text with `.encode()`.")
        meta = dumps_value(dict(metadata or {}), what="snapshot `metadata`")
        op = self._ops.put_snapshot(
            session_id,
            check_snapshot_id(snapshot_id),
            bytes(data),
            meta,
            now=self._clock(),
            tenant=check_tenant(tenant),
        )
        yield Txn(op, write=True)

    def _get_snapshot_flow(self, session_id: str, snapshot_id: str, tenant: str | None) -> Flow[bytes]:
        check_id(session_id)
        op = self._ops.get_snapshot(session_id, check_snapshot_id(snapshot_id), tenant=check_tenant(tenant))
        row = yield Txn(op, write=False)
        if row is None:
            raise missing_snapshot(session_id, snapshot_id)
        data: bytes = row[0]
        return data

    def _list_snapshots_flow(self, session_id: str, tenant: str | None) -> Flow[list[str]]:
        op = self._ops.list_snapshots(check_id(session_id), tenant=check_tenant(tenant))
        ids: list[str] = yield Txn(op, write=False)
        return ids

    # audit
    def _append_audit_flow(self, session_id: str, event: Mapping[str, Any], tenant: str | None) -> Flow[None]:
        check_id(session_id)
        if not isinstance(event, Mapping):
            raise UsageError(f"an audit event must be a dict, got {type(event).__name__}.")
        body = dumps_value(dict(event), what="the audit event")
        yield Txn(self._ops.append_audit(session_id, body, now=self._clock(), tenant=check_tenant(tenant)), write=True)

    def _read_audit_flow(
        self, session_id: str, since: int, limit: int | None, tenant: str | None
    ) -> Flow[list[dict[str, Any]]]:
        check_id(session_id)
        check_range("since", since)
        check_range("limit", limit, allow_none=True)
        op = self._ops.read_audit(session_id, since=since, limit=limit, tenant=check_tenant(tenant))
        return decode_audit(session_id, (yield Txn(op, write=False)))

    # export / import
    def _export_stream(self, session_id: str, tenant: str | None) -> Stream:
        return export_stream(self._ops, session_id, tenant)

    def _import_flow(
        self, lines: Iterable[str | bytes], session_id: str | None, tenant: str | None
    ) -> Flow[SessionInfo]:
        return import_flow(self._ops, read_export(lines, session_id, tenant, now=self._clock()), self._clock)

    # locks
    def _acquire_flow(self, session_id: str, owner: str, timeout: float, tenant: str | None) -> Flow[None]:
        check_id(session_id)
        return acquire_flow(
            self._ops, session_id, owner, timeout=timeout, lease=self._lock_lease, tenant=check_tenant(tenant)
        )

    def _renew_flow(self, session_id: str, owner: str) -> Flow[bool]:
        return renew_flow(self._ops, session_id, owner, lease=self._lock_lease)

    def _unlock_flow(self, session_id: str, owner: str) -> Flow[None]:
        yield Txn(self._ops.unlock(session_id, owner), write=True)
