"""An OpenAI Agents SDK agent whose session is contextwarden's: every run starts from the managed view.

Runs offline: without ``OPENAI_BASE_URL`` it starts contextwarden's scripted OpenAI-compatible
server (a model that reads the file each request names, with a 16k-token window) and talks to it
through the SDK's Chat Completions model. With ``OPENAI_BASE_URL`` (and ``OPENAI_API_KEY``,
``MODEL``) it talks to that server instead.

    pip install 'contextwarden[agents]'
    python examples/openai_agents.py
"""

from __future__ import annotations

import asyncio
import os
from contextlib import ExitStack

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from contextwarden.integrations.agents import ContextWardenSession
from contextwarden.testing import ScriptedOpenAIServer
from contextwarden.testing.tool_agent import ToolLoopModel, prompt_tokens, read_file as source_of, task

WINDOW = 16_000
TURNS = int(os.environ.get("TURNS", "60"))  # user requests in the session


@function_tool
def read_file(path: str) -> str:
    """Read a source file of the repository."""
    return source_of(path)


async def main() -> None:
    set_tracing_disabled(True)  # this example sends nothing to OpenAI's trace service
    with ExitStack() as stack:
        base_url = os.environ.get("OPENAI_BASE_URL")
        if base_url is None:
            server = stack.enter_context(
                ScriptedOpenAIServer(default=ToolLoopModel(), n_ctx=WINDOW, count_tokens=prompt_tokens)
            )
            base_url = server.base_url
        client = AsyncOpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "unused"))
        model = OpenAIChatCompletionsModel(model=os.environ.get("MODEL", "scripted-model"), openai_client=client)
        agent = Agent(name="coder", instructions="You are a coding agent.", tools=[read_file], model=model)
        session = ContextWardenSession("agents-example", window=WINDOW, reserved_output=2_000)
        for turn in range(TURNS):
            result = await Runner.run(agent, task(turn), session=session)
        keeper = await session.open()
        status = keeper.status()
        print(f"last answer: {result.final_output}")
        print(f"{TURNS} turns: {len(keeper.transcript)} items kept, the model saw {status.view_messages} messages")
        print(f"view: {status.used} of {status.budget} tokens; compactions: {status.compactions}")


if __name__ == "__main__":
    asyncio.run(main())
