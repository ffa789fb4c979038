"""Each framework's own context handling vs contextwarden on one long tool-using session.

    .venv/bin/python -m benchmarks.integrations_bench [--turns 200] [--runs 3] [--json OUT]

The session (`contextwarden.testing.tool_agent`): ``--turns`` user requests, each answered by a
``read_file`` call (about 400 tokens of output) and a short answer; five requests plant a fact
to remember. It runs through the real framework (LangChain v1 ``create_agent``, the OpenAI
Agents SDK ``Runner``, a pydantic-ai ``Agent``, a LlamaIndex ``FunctionAgent``) against the
scripted OpenAI-compatible server, which here refuses nothing, so every request can be measured:

* **over window**: agent requests whose prompt (about 4 characters of JSON per token, tools
  included) reaches the 16k window, i.e. requests a real 16k server would refuse;
* **broken pairs**: tool calls without their result, or results without their call, summed
  over the agent's requests (a provider refuses such a request);
* **overhead**: time spent in the context handling per user request (ms): the middleware,
  filter, processor, session or memory calls; a summarizer's model calls included;
* **retention**: share of the planted facts still in the last request.

Each configuration runs ``--runs`` times; the table gives the range (min–max) of each figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from contextwarden import AsyncSession, Session
from contextwarden.testing import ScriptedOpenAIServer
from contextwarden.testing.tool_agent import (
    ToolLoopModel,
    broken_pairs,
    probe_retention,
    prompt_tokens,
    read_file as source_of,
    task,
)

WINDOW = 16_000
RESERVED = 2_000
"""What contextwarden keeps free for the reply; the built-ins get the same room (trigger at 12k)."""
TRIGGER = 12_000


@dataclass(frozen=True, kw_only=True)
class Result:
    framework: str
    handling: str
    requests: int
    over_window: int
    broken_pairs: int
    overhead_ms: float
    retention: float
    seconds: float


def _measure(
    framework: str, handling: str, server: ScriptedOpenAIServer, turns: int, spent: float, seconds: float
) -> Result:
    agent = [b for b in server.requests if b.get("tools")]  # a summarizer's own calls carry no tools
    return Result(
        framework=framework,
        handling=handling,
        requests=len(agent),
        over_window=sum(prompt_tokens(b) >= WINDOW for b in agent),
        broken_pairs=sum(broken_pairs(b) for b in agent),
        overhead_ms=1000 * spent / turns,
        retention=probe_retention(agent[-1], before_turn=turns),
        seconds=seconds,
    )


def _server() -> ScriptedOpenAIServer:
    return ScriptedOpenAIServer(default=ToolLoopModel(), count_tokens=prompt_tokens)


def _keeper(cls: type[Session] | type[AsyncSession] = Session) -> Any:
    return cls(window=WINDOW, reserved_output=RESERVED)


# --- LangChain ------------------------------------------------------------------------------------
def langchain(handling: str, turns: int) -> Result:
    from langchain.agents import create_agent
    from langchain.agents.middleware import AgentMiddleware, SummarizationMiddleware
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool

    from contextwarden.integrations.langchain import ContextWardenMiddleware
    from contextwarden.testing.langchain_model import OpenAICompatibleChatModel

    @tool
    def read_file(path: str) -> str:
        """Read a source file of the repository."""
        return source_of(path)

    class TimedSummarization(SummarizationMiddleware):
        seconds = 0.0

        def before_model(self, state: Any, runtime: Any) -> Any:
            started = time.perf_counter()
            try:
                return super().before_model(state, runtime)
            finally:
                TimedSummarization.seconds += time.perf_counter() - started

    with _server() as server:
        model = OpenAICompatibleChatModel(base_url=server.base_url)
        middleware: list[AgentMiddleware[Any, Any, Any]] = []
        spent: Callable[[], float] = lambda: 0.0  # noqa: E731
        if handling == "SummarizationMiddleware":
            TimedSummarization.seconds = 0.0
            middleware = [TimedSummarization(model, trigger=("tokens", TRIGGER), keep=("messages", 20))]
            spent = lambda: TimedSummarization.seconds  # noqa: E731
        elif handling == "contextwarden":
            keeper = ContextWardenMiddleware(_keeper())
            middleware = [keeper]
            spent = lambda: keeper.seconds  # noqa: E731
        agent = create_agent(model, [read_file], system_prompt="You are a coding agent.", middleware=middleware)
        history: list[Any] = []
        started = time.perf_counter()
        for turn in range(turns):
            history = agent.invoke({"messages": [*history, HumanMessage(task(turn))]})["messages"]
        return _measure("LangChain", handling, server, turns, spent(), time.perf_counter() - started)


# --- OpenAI Agents SDK ----------------------------------------------------------------------------
class _TimedSession:
    """Times an Agents SDK session's reads and writes (the context handling of session-based runs)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.session_id, self.session_settings, self.seconds = inner, inner.session_id, None, 0.0

    async def _timed(self, call: Any) -> Any:
        started = time.perf_counter()
        try:
            return await call
        finally:
            self.seconds += time.perf_counter() - started

    async def get_items(self, limit: int | None = None) -> Any:
        return await self._timed(self.inner.get_items(limit))

    async def add_items(self, items: Any) -> None:
        await self._timed(self.inner.add_items(items))

    async def pop_item(self) -> Any:
        return await self.inner.pop_item()

    async def clear_session(self) -> None:
        await self.inner.clear_session()


def agents(handling: str, turns: int) -> Result:
    from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool, set_tracing_disabled
    from agents.extensions.tool_output_trimmer import ToolOutputTrimmer

    from contextwarden.integrations.agents import ContextWardenSession
    from contextwarden.testing.agents_model import ChatCompletionsTestModel

    set_tracing_disabled(True)

    @function_tool
    def read_file(path: str) -> str:
        """Read a source file of the repository."""
        return source_of(path)

    async def run() -> Result:
        with _server() as server:
            agent = Agent(
                name="coder",
                instructions="You are a coding agent.",
                tools=[read_file],
                model=ChatCompletionsTestModel(server.base_url),
            )
            session = _TimedSession(
                ContextWardenSession("bench", window=WINDOW, reserved_output=RESERVED)
                if handling == "contextwarden"
                else SQLiteSession("bench")
            )
            filter_seconds = [0.0]
            config = RunConfig()
            if handling == "ToolOutputTrimmer":
                trimmer = ToolOutputTrimmer(recent_turns=2, max_output_chars=500)

                def timed(data: Any) -> Any:
                    started = time.perf_counter()
                    try:
                        return trimmer(data)
                    finally:
                        filter_seconds[0] += time.perf_counter() - started

                config = RunConfig(call_model_input_filter=timed)
            started = time.perf_counter()
            for turn in range(turns):
                await Runner.run(agent, task(turn), session=session, run_config=config)  # type: ignore[arg-type]
            seconds = time.perf_counter() - started
            handled = session.seconds if handling == "contextwarden" else filter_seconds[0]
            return _measure("OpenAI Agents SDK", handling, server, turns, handled, seconds)

    return asyncio.run(run())


# --- pydantic-ai ----------------------------------------------------------------------------------
def pydantic_ai(handling: str, turns: int) -> Result:
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import ProcessHistory

    from contextwarden.integrations.pydantic_ai import history_processor
    from contextwarden.testing.pydantic_ai_model import openai_function_model

    async def run() -> Result:
        with _server() as server:
            processor = history_processor(_keeper(AsyncSession)) if handling == "contextwarden" else None
            agent = Agent(
                openai_function_model(server.base_url),
                instructions="You are a coding agent.",
                capabilities=[ProcessHistory(processor)] if processor is not None else [],
            )

            @agent.tool_plain
            def read_file(path: str) -> str:
                """Read a source file of the repository."""
                return source_of(path)

            history: list[Any] = []
            started = time.perf_counter()
            for turn in range(turns):
                history = (await agent.run(task(turn), message_history=history)).all_messages()
            seconds = time.perf_counter() - started
            spent = processor.state.seconds if processor is not None else 0.0  # type: ignore[attr-defined]
            return _measure("pydantic-ai", handling, server, turns, spent, seconds)

    return asyncio.run(run())


# --- LlamaIndex -----------------------------------------------------------------------------------
def llamaindex(handling: str, turns: int) -> Result:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.memory import ChatMemoryBuffer, Memory
    from llama_index.core.tools import FunctionTool

    from contextwarden.integrations.llamaindex import ContextWardenMemory
    from contextwarden.testing.llamaindex_model import openai_mock_llm

    warnings.filterwarnings("ignore", module="pydantic")  # LlamaIndex touches pydantic's deprecated attributes

    def read_file(path: str) -> str:
        """Read a source file of the repository."""
        return source_of(path)

    def timed(cls: type[Any]) -> type[Any]:
        class Timed(cls):  # type: ignore[misc,valid-type]
            async def aget(self, *args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return await super().aget(*args, **kwargs)
                finally:
                    spent[0] += time.perf_counter() - started

            async def aput_messages(self, *args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return await super().aput_messages(*args, **kwargs)
                finally:
                    spent[0] += time.perf_counter() - started

            async def aput(self, *args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return await super().aput(*args, **kwargs)
                finally:
                    spent[0] += time.perf_counter() - started

        return Timed

    spent = [0.0]

    async def run() -> Result:
        with _server() as server:
            agent = FunctionAgent(
                tools=[FunctionTool.from_defaults(read_file)],
                llm=openai_mock_llm(server.base_url),
                system_prompt="You are a coding agent.",
            )
            # LlamaIndex's memories count with tiktoken by default; ChatMemoryBuffer's trimming loop
            # recounts the whole history once per message it drops, which took seconds a turn at 800
            # messages. Here they count like the window does (4 characters a token).
            if handling == "ChatMemoryBuffer":
                memory = timed(ChatMemoryBuffer).from_defaults(token_limit=TRIGGER, tokenizer_fn=_chars)
            elif handling == "Memory":
                memory = timed(Memory).from_defaults(token_limit=TRIGGER, tokenizer_fn=_chars)
            elif handling == "contextwarden":
                memory = timed(ContextWardenMemory)(window=WINDOW, reserved_output=RESERVED, asynchronous=True)
            else:
                memory = timed(ChatMemoryBuffer).from_defaults(token_limit=10**9, tokenizer_fn=_chars)  # keeps all
            started = time.perf_counter()
            for turn in range(turns):
                await agent.run(task(turn), memory=memory)
            seconds = time.perf_counter() - started
            return _measure("LlamaIndex", handling, server, turns, spent[0] if handling != "none" else 0.0, seconds)

    return asyncio.run(run())


def _chars(text: str) -> range:
    """A tokenizer for LlamaIndex's memories that counts as the window does: about 4 characters a token."""
    return range(len(text) // 4)


CONFIGURATIONS: dict[str, tuple[Callable[[str, int], Result], Sequence[str]]] = {
    "langchain": (langchain, ("none", "SummarizationMiddleware", "contextwarden")),
    "agents": (agents, ("none", "ToolOutputTrimmer", "contextwarden")),
    "pydantic-ai": (pydantic_ai, ("none", "contextwarden")),
    "llamaindex": (llamaindex, ("none", "ChatMemoryBuffer", "Memory", "contextwarden")),
}


def _range(values: Sequence[float], fmt: str) -> str:
    low, high = min(values), max(values)
    return format(low, fmt) if format(low, fmt) == format(high, fmt) else f"{low:{fmt}}–{high:{fmt}}"


def table(results: Sequence[Result]) -> str:
    """The markdown table of the runs: one row per framework and handling, ranges over the runs."""
    rows = [
        "| framework | context handling | requests over 16k | broken pairs | overhead ms/turn | probe retention |",
        "|---|---|---|---|---|---|",
    ]
    keys = list(dict.fromkeys((r.framework, r.handling) for r in results))
    for framework, handling in keys:
        runs = [r for r in results if (r.framework, r.handling) == (framework, handling)]
        over = _range([r.over_window for r in runs], "d")
        requests = runs[0].requests
        rows.append(
            f"| {framework} | {handling} | {over} of {requests} | {_range([r.broken_pairs for r in runs], 'd')} "
            f"| {_range([r.overhead_ms for r in runs], '.1f')} | {_range([r.retention for r in runs], '.1f')} |"
        )
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=200, help="user requests per session (default 200)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each configuration (default 3)")
    parser.add_argument("--only", choices=sorted(CONFIGURATIONS), action="append", help="frameworks to run")
    parser.add_argument("--json", metavar="OUT", help="write every run's figures to this file")
    args = parser.parse_args(argv)
    results: list[Result] = []
    for name in args.only or CONFIGURATIONS:
        run, handlings = CONFIGURATIONS[name]
        for handling in handlings:
            for _ in range(args.runs):
                result = run(handling, args.turns)
                results.append(result)
                print(json.dumps(asdict(result)), flush=True)
    print(table(results))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump([asdict(r) for r in results], out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
