"""`import_session` checks a whole export before it writes anything, on every backend (sync and async).

A transcript that a `Session` could never open (a tool result without its call, a second result,
a call id made again while its first call waits) is refused, as is every malformed record; the
error names the line and the field, and the store is left exactly as it was.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

import pytest

from contextwarden.exceptions import SchemaError, SessionNotFound, UsageError
from contextwarden.messages import Message, TextPart, ToolCall
from contextwarden.session import Session

from .conftest import Backend

SID = "imp"


def _header(**session: Any) -> str:
    fields = {"session_id": SID, "tenant": "acme", "created_at": 1.0, "last_active": 2.0, "metadata": {}}
    fields.update(session)
    return json.dumps({"type": "session", "format": "contextwarden.session", "version": 1, "session": fields})


def _message_line(message: Message | dict[str, Any], seq: int = 0) -> str:
    body = message.to_dict() if isinstance(message, Message) else message
    return json.dumps({"type": "message", "seq": seq, "message": body})


def _export(messages: Sequence[Message | dict[str, Any]], *extra: str, **header: Any) -> list[str]:
    return [_header(**header), *(_message_line(m, i) for i, m in enumerate(messages)), *extra]


def _call(call_id: str, message_id: str, *, name: str = "read_file", arguments: str = '{"path": "a"}') -> Message:
    return Message(
        role="assistant", parts=(ToolCall(call_id=call_id, name=name, arguments=arguments),), message_id=message_id
    )


def _result(call_id: str, message_id: str) -> Message:
    return Message.tool_result(call_id, "output", name="read_file", message_id=message_id)


def _refused(store: Any, lines: list[str], *named: str, **kwargs: Any) -> SchemaError:
    before = store.list_sessions(include_archived=True)
    with pytest.raises(SchemaError) as info:
        store.import_session(lines, **kwargs)
    text = str(info.value)
    for part in named:
        assert part in text, (part, text)
    assert "nothing was imported" in text or "line 1 " in text or "export" in text
    with pytest.raises(SessionNotFound):
        store.get_session(kwargs.get("session_id", SID))
    assert store.list_sessions(include_archived=True) == before
    return info.value


def test_a_result_without_its_call_is_refused_before_anything_is_written(store: Any) -> None:
    lines = _export([Message.user("go", message_id="u1"), _result("call_9", "r1")])
    _refused(store, lines, "line 3", "tool_call_id", "call_9")


def test_a_second_result_for_one_call_is_refused(store: Any) -> None:
    lines = _export([Message.user("go", message_id="u1"), _call("c1", "a1"), _result("c1", "r1"), _result("c1", "r2")])
    _refused(store, lines, "line 5", "tool_call_id", "second result")


def test_a_call_id_made_again_while_its_call_waits_is_refused(store: Any) -> None:
    lines = _export([Message.user("go", message_id="u1"), _call("c1", "a1"), _call("c1", "a2"), _result("c1", "r1")])
    _refused(store, lines, "line 4", "c1", "still waits")


def test_a_message_id_used_twice_is_refused(store: Any) -> None:
    lines = _export([Message.user("one", message_id="u1"), Message.user("two", message_id="u1")])
    _refused(store, lines, "line 3", "'u1'", "line 2")


@pytest.mark.parametrize(
    ("message", "named"),
    [
        (_call("c1", "a1", arguments="{not json"), ("line 3", "parts[0].arguments", "'a1'")),
        ({"role": "robot", "parts": [{"kind": "text", "text": "x"}], "message_id": "r"}, ("line 3", "`role`")),
        ({"role": "user", "parts": 5, "message_id": "bad"}, ("line 3", "cannot be decoded")),
        ({"role": "tool", "parts": [{"kind": "text", "text": "x"}], "message_id": "t"}, ("line 3", "tool_call_id")),
    ],
    ids=["arguments-not-json", "unknown-role", "wrong-shape", "result-without-call-id"],
)
def test_a_message_session_add_would_refuse_is_refused(
    store: Any, message: Message | dict[str, Any], named: tuple[str, ...]
) -> None:
    _refused(store, _export([Message.user("go", message_id="u1"), message]), *named)


@pytest.mark.parametrize(
    ("record", "named"),
    [
        ({"type": "state", "slot": "view", "version": "2", "state": {}}, ("line 3", "`version`")),
        ({"type": "state", "slot": "view", "version": 1, "state": [1]}, ("line 3", "`state`")),
        ({"type": "state", "slot": "a\nb", "version": 1, "state": {}}, ("line 3", "slot")),
        ({"type": "snapshot", "snapshot_id": "s", "data_b64": "%%%", "metadata": {}}, ("line 3", "data_b64")),
        ({"type": "snapshot", "snapshot_id": "s", "data_b64": "", "metadata": [1]}, ("line 3", "`metadata`")),
        ({"type": "audit", "seq": 0, "event": [1, 2]}, ("line 3", "`event`")),
        ({"type": "something"}, ("line 3", "unknown record type")),
    ],
    ids=["state-version", "state-not-object", "slot", "snapshot-not-base64", "snapshot-metadata", "audit", "type"],
)
def test_a_malformed_record_is_refused(store: Any, record: dict[str, Any], named: tuple[str, ...]) -> None:
    _refused(store, _export([Message.user("go", message_id="u1")], json.dumps(record)), *named)


@pytest.mark.parametrize(
    "state",
    [{}, {"format": None}, {"format": 2}, {"format": "1"}],
    ids=["no-format", "format-null", "format-newer", "format-text"],
)
def test_a_view_state_of_a_format_no_open_reads_is_refused(store: Any, state: dict[str, Any]) -> None:
    """Opening reads only view states of the known format; an import accepts no other, so it always opens."""
    record = {"type": "state", "slot": "view", "version": 1, "state": state}
    _refused(store, _export([Message.user("go", message_id="u1")], json.dumps(record)), "line 3", "`format`")


def test_a_state_slot_given_twice_is_refused(store: Any) -> None:
    state = json.dumps({"type": "state", "slot": "agent", "version": 1, "state": {}})
    _refused(store, _export([Message.user("go", message_id="u1")], state, state), "line 4", "'agent'")


@pytest.mark.parametrize(
    ("header", "named"),
    [
        ({"created_at": "yesterday"}, ("line 1", "created_at")),
        ({"window": -5}, ("line 1", "`window`")),
        ({"tenant": ""}, ("line 1", "`tenant`")),
        ({"metadata": [1]}, ("line 1", "`metadata`")),
        ({"model": 42}, ("line 1", "`model`")),
    ],
    ids=["created_at", "window", "tenant", "metadata", "model"],
)
def test_a_malformed_header_is_refused(store: Any, header: dict[str, Any], named: tuple[str, ...]) -> None:
    _refused(store, _export([Message.user("go", message_id="u1")], **header), *named)


def test_a_line_that_is_not_utf8_is_refused(store: Any) -> None:
    lines: list[Any] = [_header().encode(), b'{"type": "message", "message": {"role": "user", "text": "\xff"}}']
    _refused(store, lines, "line 2", "UTF-8")


def test_an_invalid_target_id_is_a_usage_error(store: Any) -> None:
    with pytest.raises(UsageError, match="session_id"):
        store.import_session(_export([Message.user("go", message_id="u1")]), session_id="a\nb")


def test_abandoned_calls_and_late_results_are_imported_and_the_session_opens(backend: Backend) -> None:
    """States a live transcript can be in (an unanswered call, a result after other messages) stay importable."""
    store = backend.make()
    messages = [
        Message.system("You are a test agent."),
        Message.user("go", message_id="u1"),
        _call("c1", "a1"),  # abandoned: the user spoke next
        Message.user("never mind, do this", message_id="u2"),
        _call("c2", "a2"),
        Message.user("and?", message_id="u3"),
        _result("c2", "r2"),  # late result
        Message(role="assistant", parts=(TextPart(text="done"),), message_id="a3"),
    ]
    snapshot = {
        "type": "snapshot",
        "snapshot_id": "snap_1",
        "data_b64": base64.b64encode(b"x").decode(),
        "metadata": {},
    }
    audit = {"type": "audit", "seq": 0, "event": {"kind": "note"}}
    state = {"type": "state", "slot": "agent", "version": 3, "state": {"goal": "g"}}
    lines = _export(messages, json.dumps(state), json.dumps(snapshot), json.dumps(audit))
    info = store.import_session(lines)
    assert info.message_count == len(messages)
    assert store.load_messages(SID) == messages
    assert store.load_state(SID, slot="agent") == ({"goal": "g"}, 3)
    assert store.read_audit(SID) == [{"kind": "note"}]
    if backend.mode == "sync":  # a Session binds to sync stores
        session = Session(SID, store=store, window=4000, tenant="acme")
        assert session.transcript == messages


def test_import_under_a_given_tenant(store: Any) -> None:
    """A service importing a tenant's upload puts it under that tenant, whatever the file says."""
    info = store.import_session(_export([Message.user("go", message_id="u1")], tenant="acme"), tenant="beta")
    assert info.tenant == "beta"
    assert store.count_messages(SID, tenant="beta") == 1
    with pytest.raises(SessionNotFound):
        store.count_messages(SID, tenant="acme")
