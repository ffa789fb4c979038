"""A LlamaIndex FunctionAgent whose memory is contextwarden's: every step gets the managed view.

Runs offline against contextwarden's scripted OpenAI-compatible server (a model that reads the
file each request names, with a 16k-token window), through LlamaIndex's ``MockFunctionCallingLLM``
wired to that server (`contextwarden.testing.llamaindex_model`). In an application, pass any
function-calling LLM (``llama_index.llms.openai.OpenAI``, ...) instead.

    pip install 'contextwarden[llamaindex]'
    python examples/llamaindex_agent.py
"""

from __future__ import annotations

import asyncio
import os
import warnings

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool

from contextwarden.integrations.llamaindex import ContextWardenMemory
from contextwarden.testing import ScriptedOpenAIServer
from contextwarden.testing.llamaindex_model import openai_mock_llm
from contextwarden.testing.tool_agent import ToolLoopModel, prompt_tokens, read_file as source_of, task

WINDOW = 16_000
TURNS = int(os.environ.get("TURNS", "60"))  # user requests in the session


def read_file(path: str) -> str:
    """Read a source file of the repository."""
    return source_of(path)


async def main() -> None:
    warnings.filterwarnings("ignore", module="pydantic")  # LlamaIndex touches pydantic's deprecated attributes
    with ScriptedOpenAIServer(default=ToolLoopModel(), n_ctx=WINDOW, count_tokens=prompt_tokens) as server:
        agent = FunctionAgent(
            tools=[FunctionTool.from_defaults(read_file)],
            llm=openai_mock_llm(server.base_url),
            system_prompt="You are a coding agent.",
        )
        memory = ContextWardenMemory.from_defaults(
            session_id="llamaindex-example", window=WINDOW, reserved_output=2_000
        )
        for turn in range(TURNS):
            response = await agent.run(task(turn), memory=memory)
        status = memory.session.status()
        print(f"last answer: {response}")
        print(f"{TURNS} turns: {len(memory.get_all())} messages kept, the model saw {status.view_messages}")
        print(f"view: {status.used} of {status.budget} tokens; compactions: {status.compactions}")


if __name__ == "__main__":
    asyncio.run(main())
