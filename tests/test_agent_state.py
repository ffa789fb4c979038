"""AgentState: invariants, transitions, checkpoints that only move forward, and the rendered prompts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from contextwarden.agent_state import AGENT_SLOT, AgentState, CompletedSubtask
from contextwarden.exceptions import AgentStateError, SchemaError, SessionNotFound, VersionConflict
from contextwarden.stores import AsyncMemoryStore, MemoryStore, SqliteStore


def plan() -> AgentState:
    return AgentState(
        goal="Migrate the billing service to Postgres",
        success_criteria=("all 212 tests pass", "no downtime"),
        constraints=("do not touch the public API",),
        remaining=("inventory the queries", "port the schema", "run the tests"),
    ).start_next()


def test_transitions_keep_planned_and_done_apart() -> None:
    state = plan()
    assert state.current == "inventory the queries"
    assert state.remaining == ("port the schema", "run the tests")
    state = state.complete_current("found 14 queries; 2 use MySQL-only syntax", snapshot_id="snap_1")
    assert state.completed == (
        CompletedSubtask(
            planned="inventory the queries",
            done="found 14 queries; 2 use MySQL-only syntax",
            snapshot_id="snap_1",
            window_id=0,
        ),
    )
    assert state.current == "port the schema"
    state = state.complete_current("ported").complete_current("212 passed")
    assert state.current is None and state.remaining == ()
    assert [step.planned for step in state.completed] == ["inventory the queries", "port the schema", "run the tests"]
    with pytest.raises(AgentStateError, match="no current subtask"):
        state.complete_current("more")
    with pytest.raises(AgentStateError, match="done"):
        plan().complete_current("  ")
    assert state.validate() is state


@pytest.mark.parametrize(
    ("state", "problem"),
    [
        (AgentState(goal=""), "missing goal"),
        (AgentState(goal="g", window_id=-1), "invalid window id"),
        (AgentState(goal="g", window_id=True), "invalid window id"),
        (AgentState(goal="g", remaining=("a",)), "remaining subtasks without a current one"),
        (AgentState(goal="g", current="a", remaining=("a",)), "also listed as remaining"),
        (AgentState(goal="g", current="x", decisions=("",)), "`decisions[0]` is empty"),
        (
            AgentState(goal="g", current="b", completed=(CompletedSubtask(planned="a", done=""),)),
            "`completed[0].done` is empty",
        ),
        (
            AgentState(goal="g", current="c", remaining=("a",), completed=(CompletedSubtask(planned="a", done="x"),)),
            "both completed and remaining",
        ),
    ],
)
def test_validation_names_each_problem(state: AgentState, problem: str) -> None:
    assert any(problem in found for found in state.problems())
    with pytest.raises(AgentStateError, match=re.escape(problem)) as info:
        state.validate()
    assert info.value.problems == state.problems()


def test_every_problem_is_reported_at_once() -> None:
    state = AgentState(goal=" ", window_id=-3, remaining=("a",))
    assert len(state.problems()) == 3


def test_dict_round_trip() -> None:
    state = plan().complete_current("done", snapshot_id="s").next_window(summary="earlier: x")
    again = AgentState.from_dict(state.to_dict(), version=4)
    assert again == AgentState(**{**state.__dict__, "version": 4})
    with pytest.raises(AgentStateError, match="kind"):
        AgentState.from_dict({"goal": "g"})
    with pytest.raises(AgentStateError, match="newer"):
        AgentState.from_dict({**state.to_dict(), "format": 99})
    with pytest.raises(AgentStateError, match="malformed"):
        AgentState.from_dict({**state.to_dict(), "completed": [{"planned": "x"}]})


def test_save_and_load_move_forward(tmp_path: Path) -> None:
    with SqliteStore.connect(tmp_path / "cw.db") as store:
        store.create_session("s")
        assert AgentState.load(store, "s") is None
        first = plan().save(store, "s", clock=lambda: 1000.0)
        assert (first.version, first.saved_at) == (1, 1000.0)
        loaded = AgentState.load(store, "s")
        assert loaded == first
        second = loaded.complete_current("listed").save(store, "s")
        assert second.version == 2
        # The stale copy (version 1) cannot overwrite version 2.
        with pytest.raises(VersionConflict, match="another writer saved in between") as info:
            first.complete_current("other result").save(store, "s")
        assert (info.value.expected, info.value.actual) == (1, 2)
        third = second.next_window(summary="window 0 did the inventory").save(store, "s")
        assert (third.window_id, third.version) == (1, 3)
        # An older window's checkpoint never overwrites a newer one, even at the right version.
        older = AgentState(**{**third.__dict__, "window_id": 0})
        with pytest.raises(VersionConflict, match="older checkpoint"):
            older.save(store, "s")
        assert AgentState.load(store, "s") == third
        # The view state is a different slot and does not interfere.
        assert store.load_state("s") == (None, 0)
        assert store.load_state("s", slot=AGENT_SLOT)[1] == 3


def test_invalid_states_are_never_saved() -> None:
    store = MemoryStore()
    store.create_session("s")
    with pytest.raises(AgentStateError):
        AgentState(goal="g", remaining=("a",)).save(store, "s")
    assert store.load_state("s", slot=AGENT_SLOT) == (None, 0)


def test_an_unreadable_stored_state_is_a_schema_error() -> None:
    store = MemoryStore()
    store.create_session("s")
    store.save_state("s", {"kind": "agent-state", "format": 1, "goal": ""}, expected_version=0, slot=AGENT_SLOT)
    with pytest.raises(SchemaError, match="'s'") as info:
        AgentState.load(store, "s")
    assert info.value.session_id == "s"


@pytest.mark.anyio
async def test_async_save_and_load() -> None:
    store = AsyncMemoryStore()
    await store.create_session("s")
    saved = await plan().asave(store, "s")
    assert await AgentState.aload(store, "s") == saved
    with pytest.raises(VersionConflict):
        await plan().asave(store, "s")


def test_bootstrap_prompt_carries_everything_needed_to_resume() -> None:
    state = (
        plan()
        .complete_current("found 14 queries", snapshot_id="snap_9")
        .next_window(summary="Window 0 mapped the queries.")
    )
    state = AgentState(
        **{
            **state.__dict__,
            "decisions": ("use COPY for the data move, because INSERTs took 6 h",),
            "open_issues": ("2 queries use MySQL-only syntax",),
            "learnings": ("tests run with `make test-billing`",),
        }
    )
    prompt = state.bootstrap_prompt()
    for text in (
        "window 1",
        "Migrate the billing service to Postgres",
        "all 212 tests pass",
        "do not touch the public API",
        "planned: inventory the queries",
        "done: found 14 queries [snapshot snap_9]",
        "## Current subtask (in progress)\nport the schema",
        "1. run the tests",
        "use COPY for the data move",
        "2 queries use MySQL-only syntax",
        "make test-billing",
        "Window 0 mapped the queries.",
        "Next: continue the current subtask (port the schema)",
    ):
        assert text in prompt, text
    assert "do not redo completed subtasks" in prompt
    finished = AgentState(goal="g", completed=(CompletedSubtask(planned="a", done="b"),))
    assert "no subtasks remain" in finished.bootstrap_prompt()
    assert "## Decisions" not in finished.bootstrap_prompt()


def test_progress_markdown() -> None:
    state = AgentState(**{**plan().complete_current("found 14", snapshot_id="s1").__dict__, "saved_at": 0.0})
    markdown = state.to_markdown()
    assert markdown.startswith("# Progress: Migrate the billing service to Postgres\n")
    assert "1/3 subtasks done" in markdown
    assert "saved 1970-01-01 00:00:00 UTC" in markdown
    assert "- [x] inventory the queries\n  - done: found 14 (snapshot `s1`)" in markdown
    assert "- [ ] **port the schema** (in progress)" in markdown
    assert "- [ ] run the tests" in markdown
    assert "## Open issues" not in markdown


def test_agent_state_is_tenant_scoped(tmp_path: Path) -> None:
    with SqliteStore.connect(tmp_path / "cw.db") as store:
        store.create_session("s", tenant="acme")
        saved = plan().save(store, "s", tenant="acme")
        assert AgentState.load(store, "s", tenant="acme") == saved
        # another tenant sees no such session: it can neither read nor overwrite the checkpoint
        with pytest.raises(SessionNotFound):
            AgentState.load(store, "s", tenant="evil")
        with pytest.raises(SessionNotFound):
            saved.complete_current("x").save(store, "s", tenant="evil")
        assert AgentState.load(store, "s", tenant="acme") == saved


@pytest.mark.anyio
async def test_async_agent_state_is_tenant_scoped() -> None:
    store = AsyncMemoryStore()
    await store.create_session("s", tenant="acme")
    saved = await plan().asave(store, "s", tenant="acme")
    with pytest.raises(SessionNotFound):
        await AgentState.aload(store, "s", tenant="evil")
    with pytest.raises(SessionNotFound):
        await saved.asave(store, "s", tenant="evil")
    assert await AgentState.aload(store, "s", tenant="acme") == saved
