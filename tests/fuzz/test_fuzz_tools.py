"""The arguments of contextwarden's own tools, ``read_context`` and ``write_note``, as a model sends them.

`Session.handle_tool_call` must answer every argument text or dict with a text the model can
read (never raise), and what the call stored (a note) must not stop the session from being saved.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, strategies as st

from contextwarden.messages import Message

from ._harness import Failed, fuzz_settings, probe
from ._sessions import check_after, new_session, open_stores
from ._strategies import hostile_any, hostile_json_text, hostile_number, hostile_text, lenient_dumps


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with open_stores(tmp_path_factory.mktemp("fuzz-tools")) as opened:
        yield opened


def _refs(session: Any) -> list[str]:
    """References that exist in the session: steps, spans, snapshots."""
    ids = [m.message_id for m in session.transcript]
    snaps = session.snapshots.list_snapshots(session.session_id)
    return ["#0", "#1", "#99", f"{ids[0]}..{ids[-1]}", ids[2], *snaps[:2], "snap_missing", f"{ids[-1]}..{ids[0]}"]


def _arguments(data: st.DataObject, fields: dict[str, st.SearchStrategy[Any]]) -> Any:
    """Arguments as a JSON text, a dict, or anything else."""
    chosen = {k: data.draw(v) for k, v in fields.items() if data.draw(st.booleans())}
    return data.draw(
        st.one_of(
            st.just(chosen),
            st.just(chosen).map(lenient_dumps),
            st.just(chosen).map(lambda d: lenient_dumps(d, ensure_ascii=True)),
            hostile_json_text,
            hostile_any,
        )
    )


def _big_enough(session: Any) -> None:
    """Make the session's next prepare compact (so notes and state are rendered and saved)."""
    session.add([Message.user("please continue " * 400)])


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_read_context_arguments(backend: str, stores: dict[str, Any]) -> None:
    entry = "handle_tool_call (read_context)"

    @fuzz_settings(60)
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        session, before = new_session(stores[backend])
        _big_enough(session)
        session.prepare(format="internal")
        before = [m.message_id for m in session.transcript]
        ref = st.one_of(st.sampled_from(_refs(session)), hostile_text, hostile_any)
        args = _arguments(data, {"ref": ref, "page": st.one_of(hostile_number, hostile_text, st.sampled_from([1, 2]))})
        answer = probe.call(entry, session.handle_tool_call, "read_context", args)
        if answer.ok and not isinstance(answer.value, str):
            raise Failed(f"{entry}: answered {type(answer.value).__name__}, not a text for the model")
        if not answer.ok:
            raise Failed(f"{entry}: raised {answer.error!r}; the model gets no answer")
        check_after(entry, session, before)

    run()


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_write_note_arguments(backend: str, stores: dict[str, Any]) -> None:
    entry = "handle_tool_call (write_note)"

    @fuzz_settings(60)
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        session, before = new_session(stores[backend])
        for _ in range(data.draw(st.integers(1, 3))):
            args = _arguments(
                data,
                {
                    "kind": st.one_of(st.sampled_from(["decision", "subtask", "lesson", "open"]), hostile_any),
                    "text": st.one_of(hostile_text, hostile_any),
                    "resolve_id": st.one_of(st.sampled_from([1, 2, "1"]), hostile_number, hostile_any),
                },
            )
            answer = probe.call(entry, session.handle_tool_call, "write_note", args)
            if not answer.ok or not isinstance(answer.value, str):
                raise Failed(f"{entry}: answered {answer!r}, not a text for the model")
        _big_enough(session)
        check_after(entry, session, before + [session.transcript[-1].message_id])

    run()
