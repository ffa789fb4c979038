"""Every integration against a server serving a quarter of the configured window: recover, count instructions."""

from __future__ import annotations

from typing import Any

import pytest

from contextwarden import Session
from contextwarden.integrations._recovery import as_overflow
from contextwarden.testing import ScriptedOpenAIServer

SERVED = 2_000
CONFIGURED = 4 * SERVED
TURNS = 14
SYSTEM = "You are a terse assistant."


def _note(turn: int) -> str:
    return f"note {turn}: " + "the parser reads tokens and builds a tree of nodes. " * 16


@pytest.fixture
def small() -> Any:
    with ScriptedOpenAIServer(default="OK.", n_ctx=SERVED) as server:
        yield server


def _held_instructions(session: Session) -> bool:
    tools = session.accountant.count_tools(session.tools) if session.tools else 0
    return session.configured_budget.tool_schemas > tools  # the instructions leave the budget like tool schemas


def _check(session: Session, server: ScriptedOpenAIServer) -> None:
    assert session.status().served_window == SERVED  # learned from the refusal
    assert _held_instructions(session)  # the framework's own system prompt is counted
    sent = [r["messages"] for r in server.requests if "messages" in r]
    assert sum(1 for m in sent[-1] if m.get("role") == "system") == 1  # ... and sent once, by the framework


def test_as_overflow_reads_framework_errors_and_their_causes() -> None:
    from contextwarden.exceptions import UpstreamError

    try:
        try:
            raise UpstreamError("maximum context length is 2048 tokens. However, you requested 2136 tokens")
        except UpstreamError as inner:
            raise RuntimeError("the agent failed") from inner
    except RuntimeError as outer:
        found = as_overflow(outer)
    assert found is not None and found.limit == 2048 and found.requested == 2136
    assert as_overflow(RuntimeError("rate limited")) is None
    assert as_overflow(KeyError("x"), KeyError) is not None  # a framework's own overflow type, whatever its text


def test_langchain_retries_through_wrap_model_call(small: ScriptedOpenAIServer) -> None:
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage

    from contextwarden.integrations.langchain import ContextWardenMiddleware
    from contextwarden.testing.langchain_model import OpenAICompatibleChatModel

    session = Session(window=CONFIGURED, counter="heuristic")
    agent = create_agent(
        OpenAICompatibleChatModel(base_url=small.base_url),
        [],
        system_prompt=SYSTEM,
        middleware=[ContextWardenMiddleware(session)],
    )
    history: list[Any] = []
    for turn in range(TURNS):
        history = agent.invoke({"messages": [*history, HumanMessage(_note(turn))]})["messages"]
    assert len(history) == 2 * TURNS
    _check(session, small)


@pytest.mark.anyio
async def test_pydantic_ai_model_wrapper_retries_and_calibrates(small: ScriptedOpenAIServer) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import ProcessHistory

    from contextwarden.integrations.pydantic_ai import ContextWardenModel, history_processor
    from contextwarden.testing.pydantic_ai_model import openai_function_model

    session = Session(window=CONFIGURED, counter="heuristic")
    agent = Agent(
        ContextWardenModel(openai_function_model(small.base_url), session),
        instructions=SYSTEM,
        capabilities=[ProcessHistory(history_processor(session))],
    )
    messages: list[Any] = []
    for turn in range(TURNS):
        messages = (await agent.run(_note(turn), message_history=messages)).all_messages()
    _check(session, small)


@pytest.mark.anyio
async def test_agents_sdk_model_wrapper_retries(small: ScriptedOpenAIServer) -> None:
    from agents import Agent, Runner

    from contextwarden.integrations.agents import ContextWardenModel, ContextWardenSession
    from contextwarden.testing.agents_model import ChatCompletionsTestModel

    history = ContextWardenSession("recovery", window=CONFIGURED, counter="heuristic")
    agent = Agent(
        name="terse", instructions=SYSTEM, model=ContextWardenModel(ChatCompletionsTestModel(small.base_url), history)
    )
    for turn in range(TURNS):
        await Runner.run(agent, _note(turn), session=history)
    session = await history.open()
    assert session.status().served_window == SERVED and _held_instructions(session)  # type: ignore[arg-type]


def test_llamaindex_memory_compacts_on_the_error_and_the_next_get_fits(small: ScriptedOpenAIServer) -> None:
    from llama_index.core.base.llms.types import ChatMessage

    from contextwarden.integrations.llamaindex import ContextWardenMemory
    from contextwarden.testing.llamaindex_model import openai_mock_llm

    memory = ContextWardenMemory(window=CONFIGURED, counter="heuristic", instructions=SYSTEM)
    llm = openai_mock_llm(small.base_url)
    for turn in range(TURNS):
        memory.put(ChatMessage(role="user", content=_note(turn)))
        system = [ChatMessage(role="system", content=SYSTEM)]
        try:
            reply = llm.chat([*system, *memory.get()])
        except Exception as exc:
            memory.on_context_overflow(exc)
            reply = llm.chat([*system, *memory.get()])
        memory.put(reply.message)
    assert isinstance(memory.session, Session)
    _check(memory.session, small)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
