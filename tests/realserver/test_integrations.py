"""The four framework integrations against the real server, at the served window and at 4× it.

Each run grows one conversation for 15 turns through the framework's own agent and model client
(LangChain's ``ChatOpenAI``, the Agents SDK's ``OpenAIChatCompletionsModel``, pydantic-ai's
``OpenAIChatModel``; LlamaIndex through a small ``CustomLLM`` over the library's client); a turn
is good when the framework returned a reply.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import pytest

from contextwarden import AsyncSession, Session
from contextwarden.llm import OpenAIChatModel

from .conftest import N_CTX, full_size_only, note, record, turns

pytestmark = pytest.mark.llama_server

TURNS = turns(15)
REPLY_TOKENS = 48
SYSTEM = "You are a terse assistant. Answer in one sentence. " * 4
WINDOWS = [N_CTX, 4 * N_CTX]
FULL_SIZE_WINDOWS = [pytest.param(window, marks=full_size_only) for window in WINDOWS]


def _finish(
    name: str, window: int, ok: int, failures: list[str], session: Session | AsyncSession, started: float
) -> None:
    status = session.status()
    record(
        f"{name}.window-{window}",
        ok,
        TURNS,
        seconds=time.monotonic() - started,
        served_window=status.served_window,
        calibration=status.calibration,
        failures=failures[:3],
    )
    assert ok == TURNS, failures[:3]


@pytest.mark.parametrize("window", [N_CTX, pytest.param(4 * N_CTX, marks=full_size_only)])
def test_langchain_middleware(llama_server: str, window: int) -> None:
    from langchain.agents import create_agent
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver

    from contextwarden.integrations.langchain import ContextWardenMiddleware

    started = time.monotonic()
    session = Session(window=window, counter="tiktoken:cl100k_base")
    model = ChatOpenAI(model="smollm2", base_url=llama_server, api_key="none", max_tokens=REPLY_TOKENS, max_retries=0)
    agent = create_agent(
        model,
        tools=[],
        system_prompt=SYSTEM,
        middleware=[ContextWardenMiddleware(session)],
        checkpointer=InMemorySaver(),
    )
    ok, failures = 0, []
    for turn in range(TURNS):
        try:
            agent.invoke({"messages": [{"role": "user", "content": note(turn)}]}, {"configurable": {"thread_id": "t"}})
            ok += 1
        except Exception as exc:
            failures.append(f"turn {turn}: {type(exc).__name__}: {exc}"[:300])
    _finish("langchain", window, ok, failures, session, started)


@pytest.mark.parametrize("window", FULL_SIZE_WINDOWS)
def test_agents_sdk_model_wrapper(llama_server: str, window: int) -> None:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from agents.model_settings import ModelSettings
    from openai import AsyncOpenAI

    from contextwarden.integrations.agents import ContextWardenModel, ContextWardenSession

    set_tracing_disabled(True)
    started = time.monotonic()
    history = ContextWardenSession("agents", window=window, counter="tiktoken:cl100k_base")

    async def run() -> tuple[int, list[str]]:
        client = AsyncOpenAI(base_url=llama_server, api_key="none", max_retries=0)
        inner = OpenAIChatCompletionsModel(model="smollm2", openai_client=client)
        agent = Agent(
            name="terse",
            instructions=SYSTEM,
            model=ContextWardenModel(inner, history),
            model_settings=ModelSettings(max_tokens=REPLY_TOKENS),
        )
        ok, failures = 0, []
        for turn in range(TURNS):
            try:
                await Runner.run(agent, note(turn), session=history)
                ok += 1
            except Exception as exc:
                failures.append(f"turn {turn}: {type(exc).__name__}: {exc}"[:300])
        await client.close()
        return ok, failures

    ok, failures = asyncio.run(run())
    _finish("agents", window, ok, failures, asyncio.run(history.open()), started)


@pytest.mark.parametrize("window", FULL_SIZE_WINDOWS)
def test_pydantic_ai_model_wrapper_and_history_processor(llama_server: str, window: int) -> None:
    from openai import AsyncOpenAI
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import ProcessHistory
    from pydantic_ai.models.openai import OpenAIChatModel as PydanticOpenAI
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.settings import ModelSettings

    from contextwarden.integrations.pydantic_ai import ContextWardenModel, history_processor

    started = time.monotonic()
    session = Session(window=window, counter="tiktoken:cl100k_base")

    # one event loop for the run, and the client closed on it (run_sync keeps a loop whose connections outlive it)
    async def run() -> tuple[int, list[str]]:
        client = AsyncOpenAI(base_url=llama_server, api_key="none", max_retries=0)
        inner = PydanticOpenAI("smollm2", provider=OpenAIProvider(openai_client=client))
        agent = Agent(
            ContextWardenModel(inner, session),
            instructions=SYSTEM,
            capabilities=[ProcessHistory(history_processor(session))],
            model_settings=ModelSettings(max_tokens=REPLY_TOKENS),
        )
        ok, failures, messages = 0, [], []
        async with client:
            for turn in range(TURNS):
                try:
                    result = await agent.run(note(turn), message_history=messages)
                    messages = result.all_messages()
                    ok += 1
                except Exception as exc:
                    failures.append(f"turn {turn}: {type(exc).__name__}: {exc}"[:300])
        return ok, failures

    ok, failures = asyncio.run(run())
    _finish("pydantic-ai", window, ok, failures, session, started)


def _llamaindex_llm(client: OpenAIChatModel) -> Any:
    """A LlamaIndex chat LLM over the library's OpenAI-compatible client (errors and usage as the library reports)."""
    from llama_index.core.base.llms.types import ChatMessage, ChatResponse, CompletionResponse, LLMMetadata
    from llama_index.core.llms.callbacks import llm_chat_callback
    from llama_index.core.llms.custom import CustomLLM

    from contextwarden.integrations.llamaindex import to_messages as from_llamaindex

    class LibraryLLM(CustomLLM):
        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(context_window=N_CTX, num_output=REPLY_TOKENS, is_chat_model=True)

        @llm_chat_callback()  # type: ignore[misc]  # LlamaIndex's instrumentation reports the usage from here
        def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            reply = client.request(from_llamaindex(messages), max_tokens=REPLY_TOKENS)
            usage = {"prompt_tokens": reply.usage.input_tokens} if reply.usage.reported else {}
            return ChatResponse(message=ChatMessage(role="assistant", content=reply.text), raw={"usage": usage})

        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            raise NotImplementedError("chat only")

        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            raise NotImplementedError("chat only")

    return LibraryLLM()


@pytest.mark.parametrize("window", FULL_SIZE_WINDOWS)
def test_llamaindex_memory(llama_server: str, window: int) -> None:
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.chat_engine import SimpleChatEngine

    from contextwarden.integrations.llamaindex import ContextWardenMemory

    started = time.monotonic()
    memory = ContextWardenMemory(window=window, counter="tiktoken:cl100k_base", instructions=SYSTEM)
    ok, failures = 0, []
    with OpenAIChatModel("smollm2", base_url=llama_server, timeout=300, max_retries=0) as client:
        engine = SimpleChatEngine.from_defaults(
            llm=_llamaindex_llm(client), memory=memory, prefix_messages=[ChatMessage(role="system", content=SYSTEM)]
        )
        for turn in range(TURNS):
            try:
                try:
                    engine.chat(note(turn))
                except Exception as exc:  # a LlamaIndex engine cannot retry from its memory: the guide's wrapper
                    memory.on_context_overflow(exc)
                    engine.chat(note(turn))
                ok += 1
            except Exception as exc:
                failures.append(f"turn {turn}: {type(exc).__name__}: {exc}"[:300])
    _finish("llamaindex", window, ok, failures, memory.session, started)
