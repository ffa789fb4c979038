"""`fuzz_tenants`: every store call made as another tenant fails as for a missing session and changes nothing."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from hypothesis import assume, given, strategies as st

from contextwarden import Session
from contextwarden.exceptions import SessionNotFound, UsageError
from contextwarden.messages import Message

from ._harness import Failed, fuzz_settings, probe
from ._sessions import RESERVED, WINDOW, history
from ._strategies import short_text

names = st.one_of(st.sampled_from(["acme", "evil", "default", "acme:tenant", "Acme", "acme ", "t1"]), short_text)
session_ids = st.one_of(st.just("shared"), st.builds(lambda: "ses_" + uuid.uuid4().hex[:10]), short_text)


def _calls(store: Any, sid: str, tenant: str) -> dict[str, Callable[[], Any]]:
    """Every store call that reads or writes the session, under ``tenant``."""
    return {
        "get_session": lambda: store.get_session(sid, tenant=tenant),
        "load_messages": lambda: store.load_messages(sid, tenant=tenant),
        "count_messages": lambda: store.count_messages(sid, tenant=tenant),
        "append_messages": lambda: store.append_messages(sid, [Message.user("injected")], tenant=tenant),
        "load_state": lambda: store.load_state(sid, tenant=tenant),
        "save_state": lambda: store.save_state(sid, {"x": 1}, expected_version=0, tenant=tenant),
        "list_snapshots": lambda: store.list_snapshots(sid, tenant=tenant),
        "read_audit": lambda: store.read_audit(sid, tenant=tenant),
        "export_session": lambda: list(store.export_session(sid, tenant=tenant)),
        "touch": lambda: store.touch(sid, tenant=tenant),
        "archive": lambda: store.archive(sid, tenant=tenant),
        "delete_session": lambda: store.delete_session(sid, tenant=tenant),
        "Session(tenant=B)": lambda: Session(sid, store=store, window=WINDOW, reserved_output=RESERVED, tenant=tenant),
    }


def fuzz_tenants(store: Any, examples: int) -> None:
    """Create sessions under one tenant in ``store`` and try every call on them under another."""
    entry = "tenant isolation"

    @fuzz_settings(examples)
    @given(sid=session_ids, owner=names, other=names)
    def run(sid: str, owner: str, other: str) -> None:
        assume(owner != other)
        created = probe.call(entry, Session, sid, store=store, window=WINDOW, tenant=owner)
        if not created.ok:
            return  # an id or tenant name the store refuses, with a typed error
        session: Session = created.value
        sid = session.session_id  # an empty id gets a fresh one
        session.add(history())
        before = [m.message_id for m in store.load_messages(sid)]
        assume(before)  # a session id reused across examples belongs to an earlier owner
        for name, call in _calls(store, sid, other).items():
            outcome = probe.check(entry, call)
            probe.isolated(
                entry,
                outcome.ok,
                f"tenant {other!r} reached tenant {owner!r}'s session {sid!r} through {name}",
            )
            # a tenant name no store accepts is refused as such (UsageError); any valid one is "not found"
            if not isinstance(outcome.error, SessionNotFound | UsageError):
                raise Failed(f"{entry}: {name} under another tenant raised {outcome.error!r}, not SessionNotFound")
        listing = probe.check(entry, store.list_sessions, tenant=other)
        listed = [info.session_id for info in listing.value[0]] if listing.ok else []
        probe.isolated(entry, sid in listed, f"tenant {other!r} lists {sid!r}")
        after = [m.message_id for m in store.load_messages(sid, tenant=owner)]
        probe.kept(entry, before, after, where="the owner's session")
        if len(after) != len(before):
            probe.isolated(entry, True, f"{len(after) - len(before)} message(s) appended under tenant {other!r}")
        store.delete_session(sid, tenant=owner)

    run()
