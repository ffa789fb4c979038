"""LangChain v1 agents and LangGraph's prebuilt agent with contextwarden, end to end on a real local server."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.warnings import LangGraphDeprecatedSinceV10

from contextwarden import AsyncSession, Session, UsageError
from contextwarden.integrations.langchain import ContextWardenMiddleware, pre_model_hook
from contextwarden.testing import ScriptedOpenAIServer
from contextwarden.testing.langchain_model import OpenAICompatibleChatModel
from contextwarden.testing.tool_agent import read_file as source_of, task

from ._checks import assert_long_session_fits
from .conftest import TURNS, WINDOW


@tool
def read_file(path: str) -> str:
    """Read a source file of the repository."""
    return source_of(path)


def _session(cls: type[Session] | type[AsyncSession] = Session) -> Session | AsyncSession:
    return cls(window=WINDOW, reserved_output=2_000)


def test_a_200_turn_agent_stays_under_the_window_and_keeps_its_state_whole(server: ScriptedOpenAIServer) -> None:
    session = _session()
    middleware = ContextWardenMiddleware(session)
    agent = create_agent(
        OpenAICompatibleChatModel(base_url=server.base_url),
        [read_file],
        system_prompt="You are a coding agent.",
        middleware=[middleware],
    )
    history: list = []
    for turn in range(TURNS):
        history = agent.invoke({"messages": [*history, HumanMessage(task(turn))]})["messages"]

    assert len(history) == 4 * TURNS  # the state was never rewritten
    assert [m.message_id for m in session.transcript] == [m.id for m in history]  # ids kept, nothing lost
    assert session.status().compactions  # the view was compacted ...
    assert_long_session_fits(server, session.transcript, requests=2 * TURNS)  # ... and always fit
    assert server.requests[-1]["messages"][0] == {"role": "system", "content": "You are a coding agent."}
    assert session.status().calibration != 1.0  # the reported input tokens calibrated the counting


@pytest.mark.anyio
async def test_an_async_agent_with_an_async_session_stays_under_the_window(server: ScriptedOpenAIServer) -> None:
    session = _session(AsyncSession)
    agent = create_agent(
        OpenAICompatibleChatModel(base_url=server.base_url), [read_file], middleware=[ContextWardenMiddleware(session)]
    )
    history: list = []
    for turn in range(TURNS):
        history = (await agent.ainvoke({"messages": [*history, HumanMessage(task(turn))]}))["messages"]
    assert len(session.transcript) == 4 * TURNS
    assert_long_session_fits(server, session.transcript, requests=2 * TURNS)


def test_rewrite_state_replaces_the_state_by_the_view_and_the_transcript_stays_whole(
    server: ScriptedOpenAIServer,
) -> None:
    session = _session()
    agent = create_agent(
        OpenAICompatibleChatModel(base_url=server.base_url),
        [read_file],
        middleware=[ContextWardenMiddleware(session, rewrite_state=True)],
    )
    history: list = []
    for turn in range(80):
        history = agent.invoke({"messages": [*history, HumanMessage(task(turn))]})["messages"]
    assert len(history) < 4 * 80  # the state holds the compacted view ...
    assert history[0].content.startswith("[contextwarden]")  # ... led by the context block
    assert len(session.transcript) == 4 * 80  # ... while the transcript has every message, once
    assert_long_session_fits(server, session.transcript, requests=2 * 80)


def test_read_context_is_offered_to_the_model_and_answered_by_the_session(server: ScriptedOpenAIServer) -> None:
    session = _session()
    middleware = ContextWardenMiddleware(session, include_read_tool=True)
    agent = create_agent(OpenAICompatibleChatModel(base_url=server.base_url), [read_file], middleware=[middleware])
    history = agent.invoke({"messages": [HumanMessage(task(0))]})["messages"]
    assert {t["function"]["name"] for t in server.requests[0]["tools"]} == {"read_file", "read_context"}
    (read_back,) = middleware.tools
    first_step = read_back.invoke({"ref": "#0"})
    assert task(0) in first_step
    assert isinstance(history[2], ToolMessage)


def test_one_session_per_thread_when_given_a_function_of_the_thread_id(server: ScriptedOpenAIServer) -> None:
    sessions: dict[str, Session] = {}

    def session_of(thread_id: str) -> Session:
        return sessions.setdefault(thread_id, Session(thread_id, window=WINDOW, reserved_output=2_000))

    agent = create_agent(
        OpenAICompatibleChatModel(base_url=server.base_url),
        [read_file],
        middleware=[ContextWardenMiddleware(session_of)],
    )
    for thread in ("a", "b"):
        agent.invoke({"messages": [HumanMessage(task(1))]}, {"configurable": {"thread_id": thread}})
    assert sorted(sessions) == ["a", "b"]
    assert [len(s.transcript) for s in sessions.values()] == [4, 4]


def test_the_langgraph_pre_model_hook_sends_the_view_as_llm_input_messages(server: ScriptedOpenAIServer) -> None:
    from langgraph.prebuilt import create_react_agent

    session = _session()
    with pytest.warns(LangGraphDeprecatedSinceV10):  # LangGraph moved its prebuilt agent to langchain.agents
        agent = create_react_agent(
            OpenAICompatibleChatModel(base_url=server.base_url), [read_file], pre_model_hook=pre_model_hook(session)
        )
    history: list = []
    for turn in range(TURNS):
        history = agent.invoke({"messages": [*history, HumanMessage(task(turn))]})["messages"]
    assert len(history) == 4 * TURNS
    assert_long_session_fits(server, session.transcript, requests=2 * TURNS)


def test_bad_sessions_are_refused_with_the_fix() -> None:
    with pytest.raises(UsageError, match=r"session=str: pass a contextwarden `Session` or `AsyncSession`"):
        ContextWardenMiddleware("thread-1")  # type: ignore[arg-type]


def test_an_async_session_in_a_sync_run_names_the_async_call(server: ScriptedOpenAIServer) -> None:
    agent = create_agent(
        OpenAICompatibleChatModel(base_url=server.base_url),
        [read_file],
        middleware=[ContextWardenMiddleware(_session(AsyncSession))],
    )
    with pytest.raises(UsageError, match="ainvoke"):
        agent.invoke({"messages": [HumanMessage(task(0))]})


def test_read_context_with_wrong_arguments_tells_the_model_what_to_send() -> None:
    from contextwarden.integrations.langchain import read_context_tool

    read_back = read_context_tool(_session())
    assert read_back.invoke({}).startswith("error: ref must be a reference")
    assert "unknown step reference '#7'" in read_back.invoke({"ref": "#7"})


def test_a_rewritten_state_handed_to_another_middleware_adds_only_what_is_new(server: ScriptedOpenAIServer) -> None:
    session = _session()
    first = create_agent(
        OpenAICompatibleChatModel(base_url=server.base_url),
        [read_file],
        middleware=[ContextWardenMiddleware(session, rewrite_state=True)],
    )
    history: list = []
    for turn in range(40):
        history = first.invoke({"messages": [*history, HumanMessage(task(turn))]})["messages"]
    assert len(history) < 4 * 40  # compacted copies in the state, under the transcript's ids
    second = create_agent(  # e.g. the process restarted: a new middleware, the same session
        OpenAICompatibleChatModel(base_url=server.base_url), [read_file], middleware=[ContextWardenMiddleware(session)]
    )
    second.invoke({"messages": [*history, HumanMessage(task(40))]})
    assert len(session.transcript) == 4 * 41
