"""Two writers on one stored session: compactions race under the store's lock and CAS; nothing is lost."""

from __future__ import annotations

import threading
from pathlib import Path

from contextwarden import Message, open_store
from contextwarden.session import Session


def _text(i: int) -> str:
    return f"observation {i}: " + " ".join(f"item-{i}-{k}" for k in range(120))


def test_two_sessions_compacting_one_stored_session_lose_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cw.db'}"
    store_a, store_b = open_store(url), open_store(url)
    a = Session("shared", window=3000, reserved_output=0, counter="tiktoken:cl100k_base", store=store_a)
    a.add([Message.system("You are a test agent."), Message.user("go")])
    b = Session("shared", window=3000, reserved_output=0, counter="tiktoken:cl100k_base", store=store_b)
    added: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def writer(session: Session, tag: str) -> None:
        try:
            for i in range(25):
                m = Message.user(f"{tag} {_text(i)}")
                session.add(m)
                with lock:
                    added.append(m.message_id)
                session.prepare()
        except BaseException as exc:  # the test reports it below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(a, "A")), threading.Thread(target=writer, args=(b, "B"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    stored = [m.message_id for m in store_a.load_messages("shared")]
    assert len(stored) == len(set(stored))  # nothing stored twice
    assert set(added) <= set(stored)  # nothing lost
    state, version = store_a.load_state("shared")
    assert state is not None and version >= 2  # both writers compacted, each saved a newer version
    # a fresh session resumes from the winner's state and sees every message
    store_c = open_store(url)
    c = Session("shared", window=3000, reserved_output=0, counter="tiktoken:cl100k_base", store=store_c)
    assert {m.message_id for m in c.transcript} == set(stored)
    assert c.prepare().status.used <= c.budget.effective
    for store in (store_a, store_b, store_c):
        store.close()
