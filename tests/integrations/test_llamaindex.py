"""LlamaIndex with contextwarden: a chat memory for agents and chat engines, end to end on a real local server."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from hypothesis import given, settings, strategies as st
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, ImageBlock, TextBlock, ThinkingBlock, ToolCallBlock
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.tools import FunctionTool

from contextwarden import Message, UsageError
from contextwarden.integrations.llamaindex import ContextWardenMemory, from_messages, to_messages
from contextwarden.stores import open_async_store, open_store
from contextwarden.testing import ScriptedOpenAIServer
from contextwarden.testing.llamaindex_model import openai_mock_llm
from contextwarden.testing.tool_agent import read_file as source_of, task
from contextwarden.toolpairs import is_valid

from ._checks import assert_long_session_fits
from .conftest import TURNS, WINDOW

# LlamaIndex's workflows inspect an agent's members: pydantic's deprecated instance attributes warn
pytestmark = pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning")


def read_file(path: str) -> str:
    """Read a source file of the repository."""
    return source_of(path)


def _agent(server: ScriptedOpenAIServer) -> FunctionAgent:
    return FunctionAgent(
        tools=[FunctionTool.from_defaults(read_file)],
        llm=openai_mock_llm(server.base_url),
        system_prompt="You are a coding agent.",
    )


@pytest.mark.anyio
async def test_a_200_turn_function_agent_with_the_memory_stays_under_the_window(server: ScriptedOpenAIServer) -> None:
    agent = _agent(server)
    memory = ContextWardenMemory.from_defaults(window=WINDOW, reserved_output=2_000)
    for turn in range(TURNS):
        response = await agent.run(task(turn), memory=memory)
    assert str(response).startswith("It defines")
    assert len(memory.get_all()) == 4 * TURNS
    assert len(memory.get()) < 4 * TURNS
    assert memory.session.status().compactions
    assert_long_session_fits(server, memory.session.transcript, requests=2 * TURNS)
    assert server.requests[-1]["messages"][0] == {"role": "system", "content": "You are a coding agent."}


@pytest.mark.anyio
async def test_an_asynchronous_memory_in_an_async_store_resumes_by_session_id(
    server: ScriptedOpenAIServer, tmp_path: Any
) -> None:
    agent = _agent(server)
    async with open_async_store(f"sqlite:///{tmp_path / 'cw.db'}") as store:
        memory = ContextWardenMemory(session_id="li-1", store=store, asynchronous=True, window=WINDOW)
        for turn in range(3):
            await agent.run(task(turn), memory=memory)
        again = ContextWardenMemory(session_id="li-1", store=store, asynchronous=True, window=WINDOW)
        assert await again.aget_all() == await memory.aget_all()
        assert len(await again.aget()) == 12
        with pytest.raises(UsageError, match="call `aget` instead of `get`"):
            again.get()
        await again.areset()
        assert await again.aget_all() == []


def test_put_get_set_and_reset_follow_llamaindex_memories(tmp_path: Any) -> None:
    with open_store(f"sqlite:///{tmp_path / 'cw.db'}") as store:
        memory = ContextWardenMemory(session_id="li-2", store=store, window=WINDOW)
        reference = ChatMemoryBuffer.from_defaults(token_limit=WINDOW)
        history = [ChatMessage(role="user", content="hello"), ChatMessage(role="assistant", content="hi")]
        for m in history:
            memory.put(m)
            reference.put(m)
        assert memory.get() == reference.get() == history
        memory.set(history[:1])
        assert memory.get_all() == history[:1]
        memory.reset()
        assert memory.get_all() == []


# --- conversion ---------------------------------------------------------------------------------------
_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)


@st.composite
def li_round(draw: st.DrawFn, n: int) -> list[ChatMessage]:
    out = [ChatMessage(role=draw(st.sampled_from(["user", "system", "developer"])), content=draw(_TEXT))]
    if draw(st.booleans()):
        out[0].blocks.append(ImageBlock(url="https://example.com/a.png"))
    calls = [f"c{n}_{k}" for k in range(draw(st.integers(0, 3)))]
    blocks: list[Any] = [TextBlock(text=draw(_TEXT))]
    if draw(st.booleans()):
        blocks.insert(0, ThinkingBlock(content=draw(_TEXT)))
    kwargs: dict[str, Any] = {}
    if draw(st.booleans()):  # OpenAI-style calls, as llama-index-llms-openai records them
        kwargs["tool_calls"] = [
            {"id": c, "type": "function", "function": {"name": "read_file", "arguments": json.dumps({"path": c})}}
            for c in calls
        ]
    else:
        blocks += [ToolCallBlock(tool_call_id=c, tool_name="read_file", tool_kwargs={"path": c}) for c in calls]
    out.append(ChatMessage(role="assistant", blocks=blocks, additional_kwargs=kwargs))
    out += [
        ChatMessage(role="tool", content=draw(_TEXT), additional_kwargs={"tool_call_id": c, "name": "read_file"})
        for c in calls
    ]
    return out


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 4).flatmap(lambda k: st.tuples(*[li_round(n) for n in range(k)])))
def test_llamaindex_messages_convert_both_ways_without_loss(rounds: tuple[list[ChatMessage], ...]) -> None:
    history = [m for r in rounds for m in r]
    messages = to_messages(history)
    assert from_messages(messages) == history
    assert is_valid(messages)
    assert len({m.message_id for m in messages}) == len(messages)


def test_a_compacted_tool_result_keeps_its_call_id() -> None:
    (message,) = to_messages([ChatMessage(role="tool", content="x" * 300, additional_kwargs={"tool_call_id": "c1"})])
    (back,) = from_messages([message.with_text("[cleared]")])
    assert (back.role, back.content, back.additional_kwargs) == ("tool", "[cleared]", {"tool_call_id": "c1"})
    (block,) = from_messages([Message.user("from elsewhere")])
    assert (block.role, block.content) == ("user", "from elsewhere")


def test_a_tool_message_without_its_call_id_is_refused_with_the_fix() -> None:
    with pytest.raises(UsageError, match=r"item 0: a tool message without `additional_kwargs\['tool_call_id'\]`"):
        to_messages([ChatMessage(role="tool", content="out")])
