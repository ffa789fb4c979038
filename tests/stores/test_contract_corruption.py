"""Corrupted stored data, on every backend (sync and async): `SchemaError` naming the session and the
field, never a raw JSONDecodeError/TypeError and never text silently read with U+FFFD in it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextwarden.exceptions import SchemaError
from contextwarden.messages import Message

from ._raw import NOT_STORED, POSTGRES_TYPED, Field, corrupt
from .conftest import Backend

SID = "victim/1"
GOOD_BODY = json.dumps(Message.user("caf\u00e9", message_id="m0").to_dict(), ensure_ascii=False)
# The same message with one byte of its text replaced by an invalid one: still valid JSON.
INVALID_UTF8_BODY = GOOD_BODY.encode().replace("caf\u00e9".encode(), b"caf\xe9")

CASES: list[tuple[str, Field, bytes | str | int, str, tuple[str, ...]]] = [
    # id, field, stored value, the call, what the error must name
    ("message-invalid-utf8", "message", INVALID_UTF8_BODY, "load_messages", ("position 0", "UTF-8")),
    ("message-not-json", "message", '{"role": "user", "parts": [', "load_messages", ("position 0",)),
    ("message-wrong-shape", "message", '{"role": "user", "parts": 5}', "load_messages", ("position 0",)),
    ("message-by-id", "message", '{"role": "user", "parts": 5}', "get_message", ("position 0",)),
    ("state-invalid-utf8", "state", b'{"summary": "caf\xe9"}', "load_state", ("state 'view'", "UTF-8")),
    ("state-not-json", "state", "{nope", "load_state", ("state 'view'",)),
    ("state-not-an-object", "state", "[1, 2]", "load_state", ("state 'view'",)),
    ("state-version", "state-version", "seven", "load_state", ("version of state 'view'",)),
    ("window", "window", "wide", "get_session", ("`window`",)),
    ("audit-invalid-utf8", "audit", b'{"note": "caf\xe9"}', "read_audit", ("audit event", "UTF-8")),
    ("audit-not-an-object", "audit", "[1]", "read_audit", ("audit event 0",)),
    ("export-of-a-corrupted-state", "state", "{nope", "export_session", ("state 'view'",)),
    ("message-count-negative", "message-count", -5, "load_messages", ("`message_count`", "-5")),
    ("message-count-negative-count", "message-count", -5, "count_messages", ("`message_count`", "-5")),
    ("message-count-negative-info", "message-count", -5, "get_session", ("`message_count`", "-5")),
    ("message-count-negative-append", "message-count", -5, "append_messages", ("`message_count`", "-5")),
    ("message-position-negative", "message-position", -5, "get_message", ("-5",)),
    ("state-version-negative", "state-version", "-5", "load_state", ("version of state 'view'", "-5")),
]


def _fill(store: Any) -> None:
    store.create_session(SID, tenant="acme", window=1000)
    store.append_messages(SID, [Message.user("caf\u00e9", message_id="m0"), Message.user("ok", message_id="m1")])
    store.save_state(SID, {"summary": "ok"}, expected_version=0)
    store.append_audit(SID, {"note": "ok"})


def _call(store: Any, name: str) -> Any:
    if name == "get_message":
        return store.get_message(SID, "m0")
    if name == "export_session":
        return list(store.export_session(SID))
    if name == "append_messages":
        return store.append_messages(SID, [Message.user("late", message_id="m9")])
    return getattr(store, name)(SID)


@pytest.mark.parametrize(("field", "value", "call", "named"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_corrupted_data_raises_schema_error_naming_session_and_field(
    backend: Backend, field: Field, value: bytes | str | int, call: str, named: tuple[str, ...]
) -> None:
    if backend.name == "postgres" and (isinstance(value, bytes) or field in POSTGRES_TYPED):
        pytest.skip("Postgres itself refuses this value: typed columns, UTF-8 checked text")
    if backend.name in NOT_STORED.get(field, ()):
        pytest.skip(f"{backend.name} does not store {field} apart")
    store = backend.make()
    _fill(store)
    corrupt(backend, store, SID, field, value)
    with pytest.raises(SchemaError) as info:
        _call(store, call)
    assert info.value.session_id == SID
    text = str(info.value)
    assert repr(SID) in text
    for part in named:
        assert part in text, (part, text)
    assert "\ufffd" not in text


def test_a_valid_non_ascii_row_reads_back_unchanged(backend: Backend) -> None:
    store = backend.make()
    _fill(store)
    assert store.load_messages(SID)[0].text == "caf\u00e9"


def test_an_add_to_a_session_whose_count_is_corrupted_writes_nothing(backend: Backend) -> None:
    """The refused add leaves no message behind: once the count is repaired, the message adds as new."""
    if backend.name in NOT_STORED["message-count"]:
        pytest.skip(f"{backend.name} does not store the message count apart")
    store = backend.make()
    _fill(store)
    corrupt(backend, store, SID, "message-count", -5)
    with pytest.raises(SchemaError, match="message_count"):
        store.append_messages(SID, [Message.user("late", message_id="m9")])
    corrupt(backend, store, SID, "message-count", 2)
    assert store.append_messages(SID, [Message.user("late", message_id="m9")]) == 1
    assert [m.message_id for m in store.load_messages(SID)] == ["m0", "m1", "m9"]
