"""A pydantic-ai agent whose model gets contextwarden's view through a history processor.

Runs offline: without ``OPENAI_BASE_URL`` it starts contextwarden's scripted OpenAI-compatible
server (a model that reads the file each request names, with a 16k-token window) and talks to it
through pydantic-ai's ``OpenAIChatModel``. With ``OPENAI_BASE_URL`` (and ``OPENAI_API_KEY``,
``MODEL``) it talks to that server instead.

    pip install 'contextwarden[pydantic-ai]'
    python examples/pydantic_ai_agent.py
"""

from __future__ import annotations

import os
from contextlib import ExitStack

from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from contextwarden import Session
from contextwarden.integrations.pydantic_ai import history_processor
from contextwarden.testing import ScriptedOpenAIServer
from contextwarden.testing.tool_agent import ToolLoopModel, prompt_tokens, read_file as source_of, task

WINDOW = 16_000
TURNS = int(os.environ.get("TURNS", "60"))  # user requests in the session


def main() -> None:
    with ExitStack() as stack:
        base_url = os.environ.get("OPENAI_BASE_URL")
        if base_url is None:
            server = stack.enter_context(
                ScriptedOpenAIServer(default=ToolLoopModel(), n_ctx=WINDOW, count_tokens=prompt_tokens)
            )
            base_url = server.base_url
        provider = OpenAIProvider(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "unused"))
        model = OpenAIChatModel(os.environ.get("MODEL", "scripted-model"), provider=provider)
        session = Session("pydantic-ai-example", window=WINDOW, reserved_output=2_000)
        agent = Agent(
            model, instructions="You are a coding agent.", capabilities=[ProcessHistory(history_processor(session))]
        )

        @agent.tool_plain
        def read_file(path: str) -> str:
            """Read a source file of the repository."""
            return source_of(path)

        history: list[ModelMessage] = []
        for turn in range(TURNS):
            result = agent.run_sync(task(turn), message_history=history)
            history = result.all_messages()
        status = session.status()
        print(f"last answer: {result.output}")
        print(f"{TURNS} turns: {len(session.transcript)} messages kept, the model saw {status.view_messages}")
        print(f"view: {status.used} of {status.budget} tokens; compactions: {status.compactions}")


if __name__ == "__main__":
    main()
