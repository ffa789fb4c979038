"""Assertions shared by the integrations' end-to-end tests."""

from __future__ import annotations

from collections.abc import Sequence

from contextwarden import Message, from_messages
from contextwarden.testing import ScriptedOpenAIServer
from contextwarden.testing.tool_agent import broken_pairs, prompt_tokens

from .conftest import WINDOW


def assert_long_session_fits(server: ScriptedOpenAIServer, transcript: Sequence[Message], *, requests: int) -> None:
    """The whole history would overflow the window, yet every request fit it with every call paired."""
    assert prompt_tokens({"messages": from_messages(transcript, format="openai")}) > WINDOW
    bodies = server.requests  # a request over the window got an error the framework raised
    assert len(bodies) == requests
    assert max(prompt_tokens(b) for b in bodies) < WINDOW
    assert [broken_pairs(b) for b in bodies] == [0] * len(bodies)
