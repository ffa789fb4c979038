"""A session resumed from its store shows exactly the view the stopped process had, and goes on alike.

A reference session runs without ever stopping; a second one, over its own SQLite file, is
stopped and reopened (a new store connection and a new `Session`, as after a process restart)
at random points. Both get the same messages and prepare at the same points: their views must
be equal message for message, every time. View state of the wrong shape is a `SchemaError`
naming the session and the field.
"""

from __future__ import annotations

import copy
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from contextwarden.compaction.config import CompactionConfig
from contextwarden.exceptions import SchemaError
from contextwarden.messages import Message, ToolCall
from contextwarden.session import Session
from contextwarden.stores.sqlite import SqliteStore

from ._helpers import COUNTER, is_context_block, make_text, tool_round

SID = "ses_resume"


def options(window: int, **config: Any) -> dict[str, Any]:
    return {
        "window": window,
        "reserved_output": 0,
        "counter": COUNTER,
        "config": CompactionConfig(**config),
    }


def opening() -> list[Message]:
    return [Message.system("You are a test agent."), Message.user("Reconcile the nightly batch ORD-1234.")]


class Pair:
    """A session that never stops and one that is stopped and reopened; same input for both."""

    def __init__(self, directory: Path, opts: dict[str, Any]) -> None:
        self.directory, self.opts = directory, opts
        self.reference = Session(SID, store=SqliteStore.connect(directory / "reference.db"), **opts)
        self.stores = [SqliteStore.connect(directory / "resumed.db")]
        self.resumed = Session(SID, store=self.stores[-1], **opts)
        self.restarts = 0

    def add(self, messages: list[Message]) -> None:
        self.reference.add(messages)
        self.resumed.add(messages)

    def restart(self) -> None:
        self.stores[-1].close()
        self.stores.append(SqliteStore.connect(self.directory / "resumed.db"))
        self.resumed = Session(SID, store=self.stores[-1], **self.opts)
        self.restarts += 1

    def same_views(self) -> list[Message]:
        a = self.reference.prepare(format="internal")
        b = self.resumed.prepare(format="internal")
        assert len(a.view) == len(b.view), (len(a.view), len(b.view))
        for x, y in zip(a.view, b.view, strict=True):
            assert x == y, f"{x.message_id}:\n{x.text[-400:]}\n---- resumed ----\n{y.message_id}:\n{y.text[-400:]}"
        assert (a.status.used, a.status.layer) == (b.status.used, b.status.layer)
        return a.view

    def close(self) -> None:
        self.reference.store.close()
        self.stores[-1].close()


def test_a_long_session_resumes_with_the_same_context_block(tmp_path: Path) -> None:
    # a small ledger rolls most steps up into "Earlier steps: N done": the line and the key data
    # must read the same after a restart (they were rendered for the compaction's own room)
    pair = Pair(tmp_path, options(6000, ledger_max_entries=12))
    pair.add(opening())
    block = None
    for i in range(60):
        if i % 7 == 3:
            pair.add([Message.user(f"Now check user_{i} and ticket T-{i}."), Message.assistant("On it.")])
        else:
            pair.add(tool_round(f"c{i}", make_text(300 + 97 * (i % 13), seed=i), q=f"q-{i}"))
        view = pair.same_views()
        block = next((m for m in view if is_context_block(m)), block)
        if i % 9 == 8:
            pair.restart()
            pair.same_views()  # the first view after the restart is the last one before it
    assert block is not None and re.search(r"Earlier steps: \d+ done", block.text)
    assert pair.reference.status().compactions
    pair.close()


Step = tuple[str, int]
steps = st.lists(
    st.one_of(
        st.tuples(st.just("round"), st.integers(50, 2500)),
        st.tuples(st.just("rounds"), st.integers(2, 15)),  # an agent working through a list
        st.tuples(st.just("request"), st.integers(0, 99)),
        st.tuples(st.just("abandon"), st.integers(0, 99)),  # a call whose result never comes
        st.tuples(st.just("late"), st.integers(0, 99)),  # a call answered after the next user message
        st.tuples(st.just("prepare"), st.just(0)),  # once more, without new messages
        st.tuples(st.just("restart"), st.just(0)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.sampled_from([2500, 6000]), st.sampled_from([1, 3]))
def test_stopping_and_reopening_at_random_points_never_changes_a_view(
    script: list[Step], window: int, keep: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        pair = Pair(Path(tmp), options(window, keep_recent_rounds=keep, clear_after_rounds=1, ledger_max_entries=8))
        pair.add(opening())
        late: list[Message] = []
        for n, (kind, size) in enumerate(script):
            if kind == "round":
                pair.add(tool_round(f"r{n}", make_text(size, seed=n), q=f"item-{n}"))
            elif kind == "rounds":
                for k in range(size):  # an agent loop: add, then prepare the next call
                    pair.add(tool_round(f"r{n}.{k}", make_text(200 + 173 * k, seed=n * 100 + k), q=f"item-{n}-{k}"))
                    pair.same_views()
            elif kind == "request":
                pair.add([Message.user(f"Look at ORD-{size} and user_{n}."), *late])
                late = []
            elif kind in ("abandon", "late"):
                asked = Message.assistant("", tool_calls=[ToolCall(call_id=f"a{n}", name="f", arguments="{}")])
                pair.add([asked, Message.user(f"Meanwhile: ticket T-{size}.")])
                if kind == "late":
                    late.append(Message.tool_result(f"a{n}", make_text(400, seed=size)))
            elif kind == "restart":
                pair.restart()
            pair.same_views()
        pair.close()


# --- view state of the wrong shape ------------------------------------------------------------------
@pytest.fixture(scope="module")
def saved_state(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real saved view state (evicted rounds, ledger, notes, a context block)."""
    path = tmp_path_factory.mktemp("state") / "state.db"
    s = Session(SID, store=SqliteStore.connect(path), **options(3000, clear_after_rounds=1))
    s.add(opening())
    for i in range(12):
        s.add(tool_round(f"c{i}", make_text(1500, seed=i), q=f"q-{i}"))
        s.prepare()
    s.handle_tool_call("write_note", '{"kind": "decision", "text": "Use the EU region."}')
    state = s.engine.export_state()
    assert state["evicted"] and state["ledger"]["entries"] and state["notes"]["notes"] and state["view"]["context"]
    s.store.close()
    return state


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(state: dict[str, Any]) -> None:
        node: Any = state
        keys = path.split("/")
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node[key]
        last = keys[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return change


BROKEN = [
    ("evicted", "x", "evicted"),
    ("cleared", ["1"], "cleared"),
    ("turn", 1.5, "turn"),
    ("summary", 7, "summary"),
    ("summary_span", ["a"], "summary_span"),
    ("compactions", {"clear": "x"}, "compactions.clear"),
    ("deepen", "deep", "deepen"),
    ("breaker", {"failures": "2"}, "breaker.failures"),
    ("ledger", [], "ledger"),
    ("ledger/entries", {}, "ledger.entries"),
    ("ledger/entries/0", "x", "ledger.entries[0]"),
    ("ledger/entries/0/step", "1", "ledger.entries[0].step"),
    ("ledger/entries/0/status", "maybe", "ledger.entries[0].status"),
    ("ledger/entries/0/facts", 5, "ledger.entries[0].facts"),
    ("ledger/max_entries", 0, "ledger.max_entries"),
    ("ledger/rolled_up", {"done": "x"}, "ledger.rolled_up['done']"),
    ("ledger/scale", float("nan"), "ledger.scale"),
    ("notes", [], "notes"),
    ("notes/notes/0/note_id", "one", "notes.notes[0].note_id"),
    ("view", 3, "view"),
    ("view/context", 5, "view.context"),
    ("view/context", {"role": "robot"}, "view.context"),
    ("view/stand_ins", [1], "view.stand_ins"),
    ("view/gate_floor", None, "view.gate_floor"),
    ("calibration", {"factor": "x"}, "calibration"),
    ("working_set", {"items": [{"kind": "planet"}]}, "working_set"),
]


@pytest.mark.parametrize(("path", "value", "field"), BROKEN, ids=[b[0] + "=" + repr(b[1])[:12] for b in BROKEN])
def test_wrong_shaped_view_state_is_a_schema_error_naming_session_and_field(
    saved_state: dict[str, Any], path: str, value: Any, field: str
) -> None:
    state = copy.deepcopy(saved_state)
    _set(path, value)(state)
    fresh = Session(SID, **options(3000, clear_after_rounds=1))
    fresh.add(opening())
    with pytest.raises(SchemaError) as info:
        fresh.engine.import_state(state)
    assert repr(SID) in str(info.value) and f"`{field}`" in str(info.value), str(info.value)
    assert info.value.session_id == SID


def test_a_stored_state_of_the_wrong_shape_fails_the_open_with_a_schema_error(tmp_path: Path) -> None:
    store = SqliteStore.connect(tmp_path / "s.db")
    s = Session(SID, store=store, **options(3000))
    s.add(opening())
    store.save_state(SID, {"format": 1, "ledger": {"entries": [{"step": 1}]}}, expected_version=0)
    with pytest.raises(SchemaError, match=r"ledger\.entries\[0\]\.status"):
        Session(SID, store=store, **options(3000))
    store.close()
