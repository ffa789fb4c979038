"""Histories of file reads the read-back tests send through the proxy."""

from __future__ import annotations

from typing import Any

from .conftest import SYSTEM, user

READ = {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}}}


def read_history(turns: int) -> list[dict[str, Any]]:
    """A chat history of ``turns`` read_file calls, each answered with 400 words."""
    history: list[dict[str, Any]] = [SYSTEM, user("read every file")]
    for i in range(turns):
        call = {"id": f"call_{i}", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
        history.append({"role": "assistant", "content": None, "tool_calls": [call]})
        body = " ".join(f"line{i}_{j}" for j in range(400))
        history.append({"role": "tool", "tool_call_id": f"call_{i}", "content": body})
    return history


def anthropic_read_history(turns: int) -> list[dict[str, Any]]:
    """The same history as Anthropic Messages blocks."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "read every file"}]
    for i in range(turns):
        history.append(
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"tu_{i}", "name": "read_file", "input": {}}]}
        )
        body = " ".join(f"line{i}_{j}" for j in range(400))
        history.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"tu_{i}", "content": body}]}
        )
    return history
