"""A LangChain v1 agent whose model sees contextwarden's view of a long tool-using session.

Runs offline: without ``OPENAI_BASE_URL`` it starts contextwarden's scripted OpenAI-compatible
server (a model that reads the file each request names, with a 16k-token window) and talks to it
through ``langchain_openai.ChatOpenAI``. With ``OPENAI_BASE_URL`` (and ``OPENAI_API_KEY``,
``MODEL``) it talks to that server instead.

    pip install 'contextwarden[langchain]' langchain-openai
    python examples/langchain_agent.py
"""

from __future__ import annotations

import os
from contextlib import ExitStack

from langchain.agents import create_agent
from langchain_core.messages import AnyMessage, HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from contextwarden import Session
from contextwarden.integrations.langchain import ContextWardenMiddleware
from contextwarden.testing import ScriptedOpenAIServer
from contextwarden.testing.tool_agent import ToolLoopModel, prompt_tokens, read_file as source_of, task

WINDOW = 16_000
TURNS = int(os.environ.get("TURNS", "60"))  # user requests in the session


@tool
def read_file(path: str) -> str:
    """Read a source file of the repository."""
    return source_of(path)


def main() -> None:
    with ExitStack() as stack:
        base_url = os.environ.get("OPENAI_BASE_URL")
        if base_url is None:
            server = stack.enter_context(
                ScriptedOpenAIServer(default=ToolLoopModel(), n_ctx=WINDOW, count_tokens=prompt_tokens)
            )
            base_url = server.base_url
        model = ChatOpenAI(
            model=os.environ.get("MODEL", "scripted-model"),
            base_url=base_url,
            api_key=os.environ.get("OPENAI_API_KEY", "unused"),  # type: ignore[arg-type]
        )
        session = Session("langchain-example", window=WINDOW, reserved_output=2_000)
        agent = create_agent(
            model,
            [read_file],
            system_prompt="You are a coding agent.",
            middleware=[ContextWardenMiddleware(session, include_read_tool=True)],
        )
        history: list[AnyMessage] = []
        for turn in range(TURNS):
            history = agent.invoke({"messages": [*history, HumanMessage(task(turn))]})["messages"]
        status = session.status()
        print(f"{TURNS} turns: the graph state holds {len(history)} messages, the model saw {status.view_messages}")
        print(f"view: {status.used} of {status.budget} tokens; compactions: {status.compactions}")


if __name__ == "__main__":
    main()
