"""OpenAI Agents SDK with contextwarden: a session whose items are the view, and a model-input filter."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("agents")

from agents import (
    Agent,
    RunConfig,
    Runner,
    Session as AgentsSession,
    SQLiteSession,
    function_tool,
    set_tracing_disabled,
)
from agents.models.fake_id import FAKE_RESPONSES_ID
from hypothesis import given, settings, strategies as st

from contextwarden import Session, UsageError
from contextwarden.integrations.agents import (
    ContextWardenInputFilter,
    ContextWardenSession,
    items_to_messages,
    messages_to_items,
)
from contextwarden.stores import open_async_store
from contextwarden.testing import ScriptedOpenAIServer
from contextwarden.testing.agents_model import ChatCompletionsTestModel
from contextwarden.testing.tool_agent import ToolLoopModel, prompt_tokens, read_file as source_of, task
from contextwarden.toolpairs import is_valid

from ._checks import assert_long_session_fits
from .conftest import TURNS, WINDOW

set_tracing_disabled(True)  # no trace export to a remote service from tests


@function_tool
def read_file(path: str) -> str:
    """Read a source file of the repository."""
    return source_of(path)


def _agent(server: ScriptedOpenAIServer) -> Agent[Any]:
    return Agent(
        name="coder",
        instructions="You are a coding agent.",
        tools=[read_file],
        model=ChatCompletionsTestModel(server.base_url),
    )


@pytest.mark.anyio
async def test_a_200_turn_conversation_in_a_contextwarden_session_stays_under_the_window(
    server: ScriptedOpenAIServer,
) -> None:
    agent = _agent(server)
    session = ContextWardenSession("agents-e2e", window=WINDOW, reserved_output=2_000)
    assert isinstance(session, AgentsSession)  # the SDK's runtime-checkable protocol
    for turn in range(TURNS):
        result = await Runner.run(agent, task(turn), session=session)
    assert result.final_output.startswith("It defines")
    keeper = await session.open()
    assert len(keeper.transcript) == 4 * TURNS
    assert keeper.status().compactions
    assert_long_session_fits(server, keeper.transcript, requests=2 * TURNS)
    assert server.requests[-1]["messages"][0] == {"role": "system", "content": "You are a coding agent."}


@pytest.mark.anyio
async def test_the_input_filter_manages_runs_that_keep_their_own_session(server: ScriptedOpenAIServer) -> None:
    agent = _agent(server)
    own = SQLiteSession("own")  # the SDK's session keeps every item; the filter shapes each model input
    keeper = Session("filtered", window=WINDOW, reserved_output=2_000)
    config = RunConfig(call_model_input_filter=ContextWardenInputFilter(keeper))
    turns = TURNS // 2  # the SDK itself copies the growing input of such runs: half the turns keep this test short
    for turn in range(turns):
        await Runner.run(agent, task(turn), session=own, run_config=config)
    assert len(await own.get_items()) == 4 * turns
    # handed the whole history on every call, each item was added once (the last reply went to no model)
    assert len(keeper.transcript) == 4 * turns - 1
    assert_long_session_fits(server, keeper.transcript, requests=2 * turns)


@pytest.mark.anyio
async def test_the_input_filter_keeps_one_run_of_150_tool_calls_under_the_window() -> None:
    calls = 150  # one Runner.run: the SDK reads a session once, so only the filter sees this run grow
    with ScriptedOpenAIServer(
        default=ToolLoopModel(calls_per_request=calls), n_ctx=WINDOW, count_tokens=prompt_tokens
    ) as server:
        keeper = Session("one-long-run", window=WINDOW, reserved_output=2_000)
        config = RunConfig(call_model_input_filter=ContextWardenInputFilter(keeper))
        result = await Runner.run(_agent(server), task(1), run_config=config, max_turns=calls + 5)
        assert result.final_output.startswith("It defines")
        assert len(keeper.transcript) == 1 + 2 * calls  # the request, then each call and its result
        assert keeper.status().compactions
        assert_long_session_fits(server, keeper.transcript, requests=calls + 1)


@pytest.mark.anyio
async def test_items_persist_in_the_store_and_a_new_instance_resumes_them(
    server: ScriptedOpenAIServer, tmp_path: Any
) -> None:
    agent = _agent(server)
    async with open_async_store(f"sqlite:///{tmp_path / 'cw.db'}") as store:
        first = ContextWardenSession("stored", store=store, window=WINDOW, reserved_output=2_000)
        for turn in range(3):
            await Runner.run(agent, task(turn), session=first)
        again = ContextWardenSession("stored", store=store, window=WINDOW, reserved_output=2_000)
        assert await again.get_items() == await first.get_items()
        assert len(await again.get_items()) == 12
        last = await again.pop_item()  # rebuilt in the store without it
        third = ContextWardenSession("stored", store=store, window=WINDOW, reserved_output=2_000)
        assert [*await third.get_items(), last] == await first.get_items()
        await third.clear_session()
        assert await ContextWardenSession("stored", store=store, window=WINDOW).get_items() == []


@pytest.mark.anyio
async def test_pop_item_and_clear_session_follow_the_protocol(server: ScriptedOpenAIServer) -> None:
    session = ContextWardenSession("pop", window=WINDOW, reserved_output=2_000)
    await Runner.run(_agent(server), task(1), session=session)
    items = await session.get_items()
    assert [i.get("type") for i in items] == [None, "function_call", "function_call_output", "message"]
    last = await session.pop_item()
    assert last == items[-1]
    assert await session.get_items() == items[:-1]
    assert await session.get_items(limit=1) == items[1:3]  # a tool output never comes without its call
    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None


def test_a_filter_needs_a_contextwarden_session() -> None:
    with pytest.raises(UsageError, match=r"session=SQLiteSession: pass a contextwarden `Session`"):
        ContextWardenInputFilter(SQLiteSession("x"))  # type: ignore[arg-type]


# --- conversion ---------------------------------------------------------------------------------------
_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20)


@st.composite
def sdk_turn(draw: st.DrawFn, n: int) -> list[dict[str, Any]]:
    """A user input, then what an Agents SDK run records: replies, function calls and their outputs."""
    items: list[dict[str, Any]] = [{"role": "user", "content": draw(_TEXT)}]
    calls = draw(st.integers(0, 3))
    text = draw(st.booleans())
    reply_id = FAKE_RESPONSES_ID if draw(st.booleans()) else f"msg_{n}"
    if text or not calls:
        items.append(
            {
                "id": reply_id,
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": draw(_TEXT), "annotations": [], "logprobs": []}],
                "status": "completed",
            }
        )
    for c in range(calls):
        call: dict[str, Any] = {"type": "function_call", "call_id": f"call_{n}_{c}", "name": "read_file"}
        call["arguments"] = '{"path": "a.py"}'
        if draw(st.booleans()):
            call["id"] = FAKE_RESPONSES_ID if draw(st.booleans()) else f"fc_{n}_{c}"
        items.append(call)
    for c in range(calls):
        items.append({"type": "function_call_output", "call_id": f"call_{n}_{c}", "output": draw(_TEXT)})
    return items


@st.composite
def sdk_history(draw: st.DrawFn) -> list[dict[str, Any]]:
    return [item for n in range(draw(st.integers(0, 5))) for item in draw(sdk_turn(n))]


@settings(max_examples=200)
@given(sdk_history())
def test_sdk_items_convert_both_ways_without_loss(items: list[dict[str, Any]]) -> None:
    messages = items_to_messages(items)
    assert messages_to_items(messages) == items
    assert len({m.message_id for m in messages}) == len(messages)  # placeholder ids never collide
    assert is_valid(messages)  # calls and outputs stay paired
    assert [m.message_id for m in items_to_messages(items)] == [m.message_id for m in messages]  # stable ids


@settings(max_examples=50)
@given(sdk_history())
def test_handing_the_same_history_over_again_adds_nothing(items: list[dict[str, Any]]) -> None:
    session = Session(window=WINDOW)
    session.add(items_to_messages(items))
    assert session.add(items_to_messages(items)) == 0
