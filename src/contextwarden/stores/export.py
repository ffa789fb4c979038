"""The export format: one JSON object per line, written by `export_session`, read by `import_session`.

Line 1 is the header (``{"type": "session", "format": "contextwarden.session", "version": 1,
"session": {...}}``); then ``message``, ``state``, ``snapshot`` and ``audit`` records. An import
is read and checked whole before its first write (`read_export`), refusing with a `SchemaError`
that names the line and the field anything a session could not be opened with; the writes then
run as one flow (`import_flow`) that removes the partial session if one of them fails.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from .. import toolpairs
from ..exceptions import MessageError, SchemaError, SessionExists, UsageError
from ..messages import Message, check_message
from .codec import decode_audit, decode_messages, decode_state, encode_messages, validation_problem
from .ops import Flow, StoreOps, Stream, Txn
from .protocols import SessionInfo
from .values import (
    DEFAULT_SLOT,
    check_id,
    check_tenant,
    create_args,
    dumps_value,
    id_problem,
    loads_stored,
    not_found,
)

__all__ = ["EXPORT_FORMAT", "EXPORT_VERSION", "ImportPlan", "export_stream", "import_flow", "read_export"]

EXPORT_FORMAT = "contextwarden.session"
EXPORT_VERSION = 1
PAGE = 1000
"""Rows an export reads per transaction."""
IMPORT_BATCH = 500
"""Messages an import writes per transaction."""


def export_line(record: Mapping[str, Any]) -> str:
    """``record`` as one line of the export."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


@dataclass(kw_only=True)
class ImportPlan:
    """What an export will write, read and checked in full before the first write."""

    target: str
    create: dict[str, Any]
    messages: list[tuple[str, str]] = field(default_factory=list)
    states: list[tuple[str, str, int]] = field(default_factory=list)
    snapshots: list[tuple[str, bytes, str]] = field(default_factory=list)
    audit: list[str] = field(default_factory=list)
    archived_at: float | None = None


def bad_export(number: int, problem: str, session_id: str | None) -> SchemaError:
    """The error for export line ``number``: nothing was imported."""
    return SchemaError(
        f"line {number} of the export: {problem.rstrip('.')}; nothing was imported.", session_id=session_id
    )


def export_header(info: SessionInfo) -> str:
    """The first line of an export: the format, its version and the session's metadata."""
    return export_line(
        {"type": "session", "format": EXPORT_FORMAT, "version": EXPORT_VERSION, "session": info.to_dict()}
    )


def export_messages(session_id: str, rows: Sequence[tuple[int, str]]) -> Iterator[str]:
    """One line per stored message row."""
    # Decoding validates every row, so an export never carries a corrupted message.
    decode_messages(session_id, rows)
    for seq, body in rows:
        yield f'{{"type":"message","seq":{seq},"message":{body}}}\n'


def export_state(slot: str, body: str, version: int) -> str:
    """The line of one state slot."""
    return f'{{"type":"state","slot":{json.dumps(slot, ensure_ascii=False)},"version":{version},"state":{body}}}\n'


def export_snapshot(session_id: str, snapshot_id: str, data: bytes, metadata: str) -> str:
    """The line of one snapshot (its bytes in base64)."""
    return export_line(
        {
            "type": "snapshot",
            "snapshot_id": snapshot_id,
            "metadata": loads_stored(metadata, session_id=session_id, what=f"metadata of snapshot {snapshot_id!r}"),
            "data_b64": base64.b64encode(data).decode("ascii"),
        }
    )


def export_audit(seq: int, event: str) -> str:
    """The line of one audit event."""
    return f'{{"type":"audit","seq":{seq},"event":{event}}}\n'


def read_export(lines: Iterable[str | bytes], session_id: str | None, tenant: str | None, *, now: float) -> ImportPlan:
    """Read and check a whole export; raises before anything is written (``now``: the new session's times)."""
    if session_id is not None:
        check_id(session_id)
    tenant = check_tenant(tenant)
    iterator = iter(lines)
    header = parse_line(next(iterator, None), 1, session_id)
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
        raise bad_export(1, "the header has no `session` object (the file is truncated or edited)", session_id)
    plan = ImportPlan(target="", create={})
    try:
        plan.target = check_id(session_id if session_id is not None else info.get("session_id"))
        plan.create = create_args(
            plan.target,
            tenant if tenant is not None else info.get("tenant", "default"),
            info.get("model"),
            info.get("window"),
            info.get("metadata"),
            now=now,
        )
    except UsageError as exc:
        raise bad_export(1, f"the `session` header: {exc}", session_id) from None
    for name in ("created_at", "last_active", "archived_at"):
        value = info.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise bad_export(1, f"`session.{name}` is {value!r:.60}, not a Unix time", plan.target)
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
        record = parse_line(raw, number, target)
        if not record:
            continue
        kind = record.get("type")
        if kind == "message":
            message = import_message(record, number, target)
            first = seen_ids.setdefault(message.message_id, number)
            if first != number:
                raise bad_export(number, f"message id {message.message_id!r} was already used on line {first}", target)
            messages.append(message)
            lines_of.append(number)
        elif kind == "state":
            plan.states.append(import_state(record, number, target, seen_slots))
        elif kind == "snapshot":
            plan.snapshots.append(import_snapshot(record, number, target))
        elif kind == "audit":
            event = record.get("event")
            if not isinstance(event, dict):
                raise bad_export(number, f"`event` is {type(event).__name__}, not an object", target)
            plan.audit.append(import_json(event, number, "event", target))
        else:
            raise bad_export(number, f"unknown record type {kind!r}", target)
    check_import_pairs(messages, lines_of, target)
    try:
        plan.messages = encode_messages(messages)
    except MessageError as exc:
        number = lines_of[exc.index] if exc.index is not None else 0
        raise bad_export(number, str(exc), target) from None
    return plan


def check_import_pairs(messages: Sequence[Message], lines_of: Sequence[int], session_id: str) -> None:
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
            what = f"its `tool_call_id` {problem.call_id!r} answers no call made before it (a result without its call)"
        else:
            what = f"it is a second result for call {problem.call_id!r} (`tool_call_id`); one result per call"
        raise bad_export(lines_of[problem.index], f"message {message_id!r}: {what}", session_id)
    waiting: set[str] = set()
    for index, message in enumerate(messages):
        if message.role == "tool":
            waiting.discard(message.tool_call_id or "")
        for call in message.tool_calls:
            if call.call_id in waiting:
                raise bad_export(
                    lines_of[index],
                    f"`tool_calls`: call id {call.call_id!r} is made again while its earlier call still waits "
                    "for its result; give the calls distinct ids",
                    session_id,
                )
            waiting.add(call.call_id)


def import_json(value: object, number: int, name: str, session_id: str) -> str:
    """``value`` of export line ``number`` as JSON text, or the export's `SchemaError`."""
    try:
        return dumps_value(value, what=f"`{name}`")
    except UsageError as exc:
        raise bad_export(number, str(exc), session_id) from None


def import_state(record: Mapping[str, Any], number: int, session_id: str, seen: set[str]) -> tuple[str, str, int]:
    """``(slot, state JSON, version)`` of a state record, checked (a view state must open)."""
    slot = record.get("slot", DEFAULT_SLOT)
    problem = id_problem(slot, "slot")
    if problem is not None:
        raise bad_export(number, problem, session_id)
    if slot in seen:
        raise bad_export(number, f"state slot {slot!r} appears twice", session_id)
    seen.add(slot)
    state = record.get("state")
    if not isinstance(state, dict):
        raise bad_export(number, f"`state` is {type(state).__name__}, not an object", session_id)
    version = record.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise bad_export(number, f"`version` {version!r:.60} is not an int >= 1", session_id)
    if slot == DEFAULT_SLOT:
        # the view state must open: a session that imports and then never loads is worse than a refusal
        from ..compaction.state import check_saved_view

        try:
            check_saved_view(session_id, state)
        except SchemaError as exc:
            raise bad_export(number, f"the view state cannot be opened ({exc})", session_id) from None
    return slot, import_json(state, number, "state", session_id), version


def import_snapshot(record: Mapping[str, Any], number: int, session_id: str) -> tuple[str, bytes, str]:
    """``(snapshot_id, data, metadata JSON)`` of a snapshot record, checked."""
    snapshot_id = record.get("snapshot_id")
    problem = id_problem(snapshot_id, "snapshot_id")
    if problem is not None:
        raise bad_export(number, problem, session_id)
    assert isinstance(snapshot_id, str)
    try:
        data = base64.b64decode(record["data_b64"], validate=True)
    except (KeyError, TypeError, ValueError) as exc:
        raise bad_export(number, f"`data_b64` is not base64 ({exc})", session_id) from None
    metadata = record.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise bad_export(number, f"`metadata` is {type(metadata).__name__}, not an object", session_id)
    return snapshot_id, data, import_json(metadata, number, "metadata", session_id)


def import_flow(ops: StoreOps, plan: ImportPlan, clock: Callable[[], float]) -> Flow[SessionInfo]:
    """Yield the writes of a checked export; a failure removes the partial import."""
    target = plan.target
    existing = yield Txn(ops.get_session(target), write=True)
    if existing is not None:
        raise SessionExists(
            f"Session {target!r} already exists; delete it first or import under another `session_id`.",
            session_id=target,
        )
    yield Txn(ops.create_session(target, **plan.create), write=True)
    try:
        for start in range(0, len(plan.messages), IMPORT_BATCH):
            batch = plan.messages[start : start + IMPORT_BATCH]
            yield Txn(ops.append_messages(target, batch, now=clock()), write=True)
        for slot, body, version in plan.states:
            yield Txn(ops.restore_state(target, slot, body, version=version, now=clock()), write=True)
        for snapshot_id, data, meta in plan.snapshots:
            yield Txn(ops.put_snapshot(target, snapshot_id, data, meta, now=clock()), write=True)
        for event in plan.audit:
            yield Txn(ops.append_audit(target, event, now=clock()), write=True)
        if plan.archived_at is not None:
            yield Txn(ops.archive(target, now=plan.archived_at), write=True)
        result = yield Txn(ops.get_session(target), write=True)
    except GeneratorExit:
        raise
    except BaseException:
        yield Txn(ops.delete_session(target), write=True)
        raise
    assert isinstance(result, SessionInfo)
    return result


def parse_line(raw: str | bytes | None, number: int, session_id: str | None) -> dict[str, Any]:
    """Export line ``number`` as a JSON object (``{}`` for a blank line)."""
    if raw is None:
        raise SchemaError("the export is empty; pass the lines `export_session` produced.", session_id=session_id)
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise bad_export(number, f"not valid UTF-8 ({exc.reason} at byte {exc.start})", session_id) from None
    elif isinstance(raw, str):
        text = raw
    else:
        raise bad_export(number, f"a {type(raw).__name__}, not a line of text", session_id)
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


def import_message(record: Mapping[str, Any], number: int, session_id: str) -> Message:
    """The message of a message record, checked as `Session.add` checks it."""
    try:
        message = Message.from_dict(record["message"])
    except (KeyError, TypeError, ValueError, ValidationError) as exc:
        raise bad_export(number, f"the message cannot be decoded ({validation_problem(exc)})", session_id) from None
    try:
        return check_message(message)
    except MessageError as exc:
        field_name = f"`{exc.field}` of " if exc.field else ""
        raise bad_export(number, f"{field_name}message {message.message_id!r}: {exc}", session_id) from None


def export_stream(ops: StoreOps, session_id: str, tenant: str | None) -> Stream:
    """`export_session` as a flow: reads in pages, yields the export's lines; every record is checked first."""
    tenant = check_tenant(tenant)
    info = yield Txn(ops.get_session(check_id(session_id), tenant=tenant), write=False)
    if info is None:
        raise not_found(session_id, tenant)
    yield export_header(info)
    start = 0
    while True:
        rows = yield Txn(ops.load_messages(session_id, start=start, limit=PAGE, tenant=tenant), write=False)
        yield from export_messages(session_id, rows)
        start += len(rows)
        if len(rows) < PAGE:
            break
    for slot, body, version in (yield Txn(ops.list_states(session_id, tenant=tenant), write=False)):
        decode_state(session_id, slot, body)
        yield export_state(slot, body, version)
    for snapshot_id in (yield Txn(ops.list_snapshots(session_id, tenant=tenant), write=False)):
        record = yield Txn(ops.get_snapshot(session_id, snapshot_id, tenant=tenant), write=False)
        if record is not None:
            yield export_snapshot(session_id, snapshot_id, *record)
    since = 0
    while True:
        events = yield Txn(ops.read_audit(session_id, since=since, limit=PAGE, tenant=tenant), write=False)
        decode_audit(session_id, events)
        for offset, event in enumerate(events):
            yield export_audit(since + offset, event)
        since += len(events)
        if len(events) < PAGE:
            break
