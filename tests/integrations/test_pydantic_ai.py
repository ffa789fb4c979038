"""pydantic-ai with contextwarden: a history processor (sync and async) and lossless message conversion."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from hypothesis import given, settings, strategies as st
from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryInfo,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from contextwarden import AsyncSession, Message, Session, UsageError
from contextwarden.integrations.pydantic_ai import from_messages, history_processor, to_messages
from contextwarden.testing import ScriptedOpenAIServer
from contextwarden.testing.pydantic_ai_model import openai_function_model
from contextwarden.testing.tool_agent import read_file as source_of, task
from contextwarden.toolpairs import is_valid

from ._checks import assert_long_session_fits
from .conftest import TURNS, WINDOW


def _agent(server: ScriptedOpenAIServer, session: Session | AsyncSession) -> Agent[None, str]:
    agent = Agent(
        openai_function_model(server.base_url),
        instructions="You are a coding agent.",
        capabilities=[ProcessHistory(history_processor(session))],
    )

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a source file of the repository."""
        return source_of(path)

    return agent


@pytest.fixture
def run_sync_loop() -> Iterator[None]:
    """Close the event loop `Agent.run_sync` leaves set on the thread (pydantic-ai never closes it)."""
    yield
    loop = asyncio.get_event_loop_policy().get_event_loop()
    loop.close()
    asyncio.set_event_loop(None)


@pytest.mark.usefixtures("run_sync_loop")
def test_a_200_turn_conversation_through_the_sync_processor_stays_under_the_window(
    server: ScriptedOpenAIServer,
) -> None:
    session = Session(window=WINDOW, reserved_output=2_000)
    agent = _agent(server, session)
    history: list[ModelMessage] = []
    for turn in range(TURNS):
        history = agent.run_sync(task(turn), message_history=history).all_messages()
    # every message once; the last reply reached no model request yet
    assert len(session.transcript) == 4 * TURNS - 1
    assert session.status().compactions
    assert_long_session_fits(server, session.transcript, requests=2 * TURNS)
    assert server.requests[-1]["messages"][0] == {"role": "system", "content": "You are a coding agent."}


@pytest.mark.anyio
async def test_the_async_processor_with_an_async_session_stays_under_the_window(server: ScriptedOpenAIServer) -> None:
    session = AsyncSession(window=WINDOW, reserved_output=2_000)
    agent = _agent(server, session)
    history: list[ModelMessage] = []
    turns = 60  # the 200-turn run is the sync one; this checks the async path past a few compactions
    for turn in range(turns):
        history = (await agent.run(task(turn), message_history=history)).all_messages()
    assert len(session.transcript) == 4 * turns - 1
    assert session.status().compactions
    assert_long_session_fits(server, session.transcript, requests=2 * turns)


@pytest.mark.usefixtures("run_sync_loop")
def test_a_history_stored_and_handed_back_adds_only_what_is_new(server: ScriptedOpenAIServer) -> None:
    session = Session(window=WINDOW, reserved_output=2_000)
    agent = _agent(server, session)
    history = agent.run_sync(task(1)).all_messages()
    again = to_messages(history)  # e.g. loaded from JSON: equal objects, not the same ones
    agent.run_sync(task(2), message_history=from_messages(again, tag_ids=True))
    assert [m.text for m in session.transcript if m.role == "user"] == [task(1), task(2)]
    assert len(session.transcript) == 4 + 3


def test_a_processor_needs_a_contextwarden_session() -> None:
    with pytest.raises(UsageError, match=r"session=list: pass a contextwarden `Session` \(sync processor\)"):
        history_processor([])  # type: ignore[arg-type]


# --- conversion ---------------------------------------------------------------------------------------
_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
_WHEN = st.just(datetime(2026, 12, 3, 5, 0, tzinfo=UTC))


@st.composite
def pai_round(draw: st.DrawFn, n: int) -> list[ModelMessage]:
    """A user request, then replies with tool calls and their returns (or retries), as pydantic-ai records them."""
    when = draw(_WHEN)
    first: list[Any] = [SystemPromptPart(draw(_TEXT), timestamp=when)] if n == 0 and draw(st.booleans()) else []
    out: list[ModelMessage] = [
        ModelRequest([*first, UserPromptPart(draw(_TEXT), timestamp=when)], instructions=draw(st.none() | _TEXT))
    ]
    for step in range(draw(st.integers(0, 2))):
        calls = [
            ToolCallPart(
                "read_file",
                draw(st.sampled_from([{"path": "a.py"}, '{"path": "b.py"}', None])),
                tool_call_id=f"c{n}{step}{k}",
            )
            for k in range(draw(st.integers(1, 3)))
        ]
        extra: list[Any] = [ThinkingPart(draw(_TEXT), signature=draw(st.none() | _TEXT))] if draw(st.booleans()) else []
        out.append(ModelResponse([*extra, TextPart(draw(_TEXT)), *calls], timestamp=when, model_name="m"))
        returns: list[Any] = []
        for call in calls:
            content = draw(st.one_of(_TEXT, st.dictionaries(_TEXT, st.integers(), max_size=2)))
            outcome = draw(st.sampled_from(["success", "failed", "retried"]))
            returns.append(
                ToolReturnPart(call.tool_name, content, tool_call_id=call.tool_call_id, timestamp=when, outcome=outcome)
            )
        if draw(st.booleans()):
            returns.append(RetryFeedbackPart(draw(_TEXT), retry=RetryInfo(cause="no_output"), timestamp=when))
        out.append(ModelRequest(returns))
    out.append(ModelResponse([TextPart(draw(_TEXT))], timestamp=when))
    return out


@st.composite
def pai_history(draw: st.DrawFn) -> list[ModelMessage]:
    return [m for n in range(draw(st.integers(0, 4))) for m in draw(pai_round(n))]


@settings(max_examples=150, deadline=None)
@given(pai_history())
def test_pydantic_ai_messages_convert_both_ways_without_loss(history: list[ModelMessage]) -> None:
    messages = to_messages(history)
    assert from_messages(messages) == history
    assert is_valid(messages)  # every call paired with its return (or retry)
    assert len({m.message_id for m in messages}) == len(messages)
    tagged = from_messages(messages, tag_ids=True)
    assert [m.message_id for m in to_messages(tagged, start=99)] == [m.message_id for m in messages]


def test_a_compacted_tool_return_keeps_its_call_id_and_metadata() -> None:
    history: list[ModelMessage] = [
        ModelRequest([UserPromptPart("read it")]),
        ModelResponse([ToolCallPart("read_file", {"path": "a.py"}, tool_call_id="c1")]),
        ModelRequest([ToolReturnPart("read_file", "x" * 500, tool_call_id="c1", metadata={"source": "disk"})]),
    ]
    messages = to_messages(history)
    cleared = messages[2].with_text("[cleared: read back with read_context]")
    (request,) = from_messages([cleared])
    assert isinstance(request, ModelRequest)
    (part,) = request.parts
    assert isinstance(part, ToolReturnPart)
    assert (part.tool_call_id, part.content, part.metadata) == (
        "c1",
        "[cleared: read back with read_context]",
        {"source": "disk"},
    )
    (elsewhere,) = from_messages([Message.user("from elsewhere")])  # the context block, say: a request of its own
    assert isinstance(elsewhere, ModelRequest)
    assert [(p.part_kind, p.content) for p in elsewhere.parts] == [("user-prompt", "from elsewhere")]


@pytest.mark.usefixtures("run_sync_loop")
def test_a_rewritten_history_of_copies_adds_only_what_is_new(server: ScriptedOpenAIServer) -> None:
    session = Session(window=WINDOW, reserved_output=2_000)
    agent = _agent(server, session)
    history: list[ModelMessage] = []
    for turn in range(40):
        history = agent.run_sync(task(turn), message_history=history).all_messages()
    assert session.status().compactions  # the history now starts with the view: context block, newer rounds
    rewritten = copy.deepcopy(history[1:])  # loaded from elsewhere, without the context block
    before = len(session.transcript)
    agent.run_sync(task(40), message_history=rewritten)
    assert len(session.transcript) == before + 4  # the last reply of turn 39, then turn 40's request, call, result
