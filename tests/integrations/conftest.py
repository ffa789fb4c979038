"""A tool-using model on a real local server with a 16k window, for every framework's end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from contextwarden.testing import ScriptedOpenAIServer
from contextwarden.testing.tool_agent import ToolLoopModel, prompt_tokens

WINDOW = 16_000
"""The server's context window: a request this long or longer is refused with a context-length error."""
TURNS = 200
"""User requests per long session: each is a tool call, its result and an answer (about 80k tokens in all)."""


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(default=ToolLoopModel(), n_ctx=WINDOW, count_tokens=prompt_tokens) as s:
        yield s
