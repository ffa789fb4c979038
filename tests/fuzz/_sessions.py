"""Sessions with a stored history, and the checks every fuzz test runs after its hostile input.

A fuzzed session lives in a real store (in memory or SQLite), already holds a short history (a
system prompt, a user request, a tool call and its result, replies), and has a small window so
that large inputs force compaction. After the hostile input, `check_after` proves the three
properties: the next view is valid and within budget, the history is still in the session and in
the store, and a new process can resume the session and compact (and save) it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from contextwarden import Session
from contextwarden.exceptions import BudgetExceeded, OverflowUnresolved
from contextwarden.messages import Message, ToolCall
from contextwarden.stores import MemoryStore, SqliteStore

from ._harness import Failed, probe

__all__ = ["RESERVED", "WINDOW", "check_after", "history", "new_session", "open_stores"]

WINDOW = 3000
RESERVED = 400


def history() -> list[Message]:
    """A short, valid history with fresh ids (its one tool call, ``call_pre``, is answered)."""
    call = ToolCall(call_id="call_pre", name="read_file", arguments='{"path": "src/app.py"}')
    return [
        Message.system("You are a careful coding agent."),
        Message.user("Fix the failing test in src/app.py."),
        Message.assistant("Reading the file.", tool_calls=[call]),
        Message.tool_result("call_pre", "def main():\n    return 1\n" * 20, name="read_file"),
        Message.assistant("The function returns 1; the test expects 2."),
        Message.user("Go ahead."),
    ]


@contextmanager
def open_stores(directory: Path) -> Iterator[dict[str, Any]]:
    """An in-memory store and a SQLite store (a file in ``directory``)."""
    sqlite = SqliteStore.connect(directory / f"fuzz-{uuid.uuid4().hex[:8]}.db")
    try:
        yield {"memory": MemoryStore(), "sqlite": sqlite}
    finally:
        sqlite.close()


def new_session(store: Any, *, format: str = "openai", **kwargs: Any) -> tuple[Session, list[str]]:
    """A session in ``store`` holding `history`; returns it and the ids of what it holds."""
    session = Session(
        "fz_" + uuid.uuid4().hex[:12], store=store, window=WINDOW, reserved_output=RESERVED, format=format, **kwargs
    )
    session.add(history())
    session.prepare(format="internal")
    return session, [m.message_id for m in session.transcript]


def check_after(entry: str, session: Session, before: list[str], *, format: str = "internal") -> None:
    """Properties 2 and 3 after a hostile input went into ``session`` (accepted or refused)."""
    store = session.store
    prepared = probe.check(entry, session.prepare, format=format)
    if not prepared.ok and isinstance(prepared.error, BudgetExceeded):
        # The newest message alone is over the budget, and it is protected while it is the current
        # turn (the README documents this). The session must not stay stuck: a next turn compacts.
        last = session.transcript[-1]
        turn = [Message.user("next")] if last.role == "assistant" else [Message.assistant("ok"), Message.user("next")]
        if probe.check(entry, session.add, turn).ok:
            prepared = probe.check(entry, session.prepare, format=format)
    if not prepared.ok:
        raise Failed(f"{entry}: the next prepare() failed after the input: {prepared.error!r}")
    probe.view_ok(entry, prepared.value.view, prepared.value.status)
    now = [m.message_id for m in session.transcript]
    probe.kept(entry, before, now, where="the session's transcript")
    stored = [m.message_id for m in store.load_messages(session.session_id)]
    probe.kept(entry, now, stored, where="the store")
    # A new process resumes the session and compacts it; the compaction's state must save.
    resumed = probe.check(
        entry,
        Session,
        session.session_id,
        store=store,
        window=WINDOW,
        reserved_output=RESERVED,
        format=session.format,
    )
    if not resumed.ok:
        raise Failed(f"{entry}: the session cannot be resumed after the input: {resumed.error!r}")
    again: Session = resumed.value
    probe.kept(entry, now, [m.message_id for m in again.transcript], where="the resumed session")
    compacted = probe.check(entry, again.on_context_overflow, format="internal")
    if not compacted.ok and not isinstance(compacted.error, OverflowUnresolved):
        raise Failed(f"{entry}: the resumed session cannot compact and save: {compacted.error!r}")
    if compacted.ok:
        probe.view_ok(entry, compacted.value.view, compacted.value.status)
