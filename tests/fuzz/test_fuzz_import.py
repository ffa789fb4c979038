"""`import_session` with hostile export documents.

The documents start as a real export (messages, a saved compaction state, snapshots, audit
events) and are then edited: lines replaced by hostile JSON texts, records mutated at random
paths, lines dropped, duplicated, swapped or cut short, invalid UTF-8. The import either
recreates a session that opens and compacts (its next view valid and within budget), or raises a
`ContextWardenError` and writes nothing; other sessions in the store are never touched.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import example, given, strategies as st

from contextwarden import Session
from contextwarden.exceptions import SessionNotFound
from contextwarden.messages import Message
from contextwarden.stores import MemoryStore

from ._harness import Failed, fuzz_settings, probe
from ._sessions import RESERVED, WINDOW, check_after, new_session, open_stores
from ._strategies import OPEN_DEFECTS, hostile_any, hostile_json_text, lenient_dumps, mutated


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with open_stores(tmp_path_factory.mktemp("fuzz-import")) as opened:
        yield opened


@pytest.fixture(scope="module")
def export() -> list[str]:
    """A real export: history, a compaction (state and snapshots), audit events."""
    store = MemoryStore()
    session, _ = new_session(store)
    session.add([Message.user("a long request " * 300)])
    session.on_context_overflow(format="internal")
    lines = list(store.export_session(session.session_id))
    kinds = {json.loads(line)["type"] for line in lines}
    assert {"session", "message", "state"} <= kinds, kinds
    return lines


@st.composite
def edited(draw: Any, lines: list[str]) -> list[str | bytes]:
    """``lines`` with up to three hostile edits."""
    out: list[str | bytes] = list(lines)
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(out) - 1)) if out else 0
        op = draw(st.sampled_from(["mutate", "mutate", "replace", "drop", "duplicate", "swap", "cut", "bytes"]))
        if not out:
            out.append(draw(hostile_json_text))
        elif op == "mutate" and isinstance(out[i], str):
            try:
                record = json.loads(out[i])
            except (ValueError, RecursionError):
                continue
            if not isinstance(record, dict):  # an earlier edit replaced the line with another JSON value
                continue
            if record.get("type") == "state" and "import-state-shape" in OPEN_DEFECTS:
                continue  # while such states are accepted and never open (test_found_defects)
            out[i] = lenient_dumps(draw(mutated(st.just(record))))
        elif op == "replace":
            out[i] = draw(st.one_of(hostile_json_text, hostile_any.map(lenient_dumps)))
        elif op == "drop":
            del out[i]
        elif op == "duplicate":
            out.insert(i, out[i])
        elif op == "swap":
            j = draw(st.integers(0, len(out) - 1))
            out[i], out[j] = out[j], out[i]
        elif op == "cut":
            text = out[i]
            out[i] = text[: draw(st.integers(0, max(0, len(text) - 1)))]
        else:
            raw = out[i] if isinstance(out[i], bytes) else out[i].encode("utf-8", "surrogatepass")
            at = draw(st.integers(0, len(raw)))
            out[i] = raw[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\xbd", b"\x00"])) + raw[at:]
    return out


def _state_edited(lines: list[str], edit: Callable[[dict[str, Any]], None]) -> list[str | bytes]:
    """``lines`` with ``edit`` applied to the view state's document."""
    out: list[str | bytes] = []
    for line in lines:
        record = json.loads(line)
        if record.get("type") == "state" and record.get("slot") == "view":
            edit(record["state"])
            line = json.dumps(record)
        out.append(line)
    return out


def _found(lines: list[str]) -> list[list[str | bytes]]:
    """Inputs a run with random seeds found, each run first on every run."""
    return [
        _state_edited(lines, lambda state: state.pop("format")),  # accepted, then "format None is not known"
        _state_edited(lines, lambda state: state.update(format=None)),
    ]


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_import_hostile_exports(backend: str, stores: dict[str, Any], export: list[str]) -> None:
    store = stores[backend]
    entry = "import_session"

    @fuzz_settings(80)
    @given(lines=edited(export))
    @example(lines=_found(export)[0])
    @example(lines=_found(export)[1])
    def run(lines: list[str | bytes]) -> None:
        other, before = new_session(store)  # a session already in the store
        target = "imp_" + uuid.uuid4().hex[:12]
        outcome = probe.call(entry, store.import_session, lines, session_id=target)
        probe.kept(
            entry, before, [m.message_id for m in store.load_messages(other.session_id)], where="another session"
        )
        if not outcome.ok:  # refused: nothing written
            leftover = probe.check(entry, store.get_session, target)
            if leftover.ok or not isinstance(leftover.error, SessionNotFound):
                raise Failed(f"{entry}: a refused import left session {target!r} behind ({outcome.error!r})")
            return
        opened = probe.check(entry, Session, target, store=store, window=WINDOW, reserved_output=RESERVED)
        if not opened.ok:
            raise Failed(f"{entry}: the import was accepted, but the session cannot be opened: {opened.error!r}")
        session: Session = opened.value
        check_after(entry, session, [m.message_id for m in session.transcript])

    run()
