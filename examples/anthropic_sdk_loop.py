"""A plain agent loop on the Anthropic Python SDK with `Session.complete()`, `read_context` and the ledger.

`AnthropicSDKModel` below is contextwarden's `request()` contract over ``anthropic.Anthropic``
(copy it): the view goes out as Messages API blocks with the system prompt apart, the reply
comes back as a contextwarden message, and "prompt is too long" becomes `ContextOverflowError`,
so `complete()` compacts deeper and retries. Token counts use Anthropic's message framing.

Runs offline against contextwarden's scripted server, which also speaks ``/v1/messages``
(16k-token window), unless ``ANTHROPIC_BASE_URL`` is set (then ``ANTHROPIC_API_KEY`` and ``MODEL``).

    pip install contextwarden anthropic
    python examples/anthropic_sdk_loop.py
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from typing import Any

import anthropic

from contextwarden import Message, RequestUsage, Session
from contextwarden.adapters import anthropic as anthropic_format
from contextwarden.llm import ModelResponse, classify_error
from contextwarden.testing import ScriptedOpenAIServer
from contextwarden.testing.tool_agent import READ_FILE_TOOL, ToolLoopModel, prompt_tokens, read_file, task
from contextwarden.tokens.accountant import ANTHROPIC_FRAMING

WINDOW = 16_000
TURNS = int(os.environ.get("TURNS", "60"))  # user requests in the session


class AnthropicSDKModel:
    """contextwarden's `Model` contract over ``anthropic.Anthropic`` (Messages API)."""

    def __init__(self, client: anthropic.Anthropic, model_name: str) -> None:
        self.client, self.model_name = client, model_name

    def request(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> ModelResponse:
        system, turns = anthropic_format.from_messages(messages)
        options: dict[str, Any] = {"system": system} if system else {}
        if tools:  # OpenAI-style schemas (the session's) -> Anthropic tools
            options["tools"] = [
                {"name": f["name"], "description": f.get("description", ""), "input_schema": f["parameters"]}
                for f in (t["function"] for t in tools)
            ]
        try:
            reply = self.client.messages.create(
                model=self.model_name, messages=turns, max_tokens=max_tokens or 1024, **options
            )
        except anthropic.APIStatusError as exc:  # "prompt is too long" -> ContextOverflowError
            raise classify_error(exc.status_code, exc.response.text, url=str(exc.request.url)) from exc
        content = [block.model_dump(exclude_none=True) for block in reply.content]
        (message,) = anthropic_format.to_messages([{"role": "assistant", "content": content}])
        usage = RequestUsage(input_tokens=reply.usage.input_tokens, output_tokens=reply.usage.output_tokens)
        return ModelResponse(message=message, usage=usage)

    def stream(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("this loop does not stream")


def main() -> None:
    with ExitStack() as stack:
        base_url = os.environ.get("ANTHROPIC_BASE_URL")
        if base_url is None:
            server = stack.enter_context(
                ScriptedOpenAIServer(default=ToolLoopModel(), n_ctx=WINDOW, count_tokens=prompt_tokens)
            )
            base_url = server.url
        client = anthropic.Anthropic(base_url=base_url, api_key=os.environ.get("ANTHROPIC_API_KEY", "unused"))
        model = AnthropicSDKModel(client, os.environ.get("MODEL", "scripted-model"))
        session = Session(
            "anthropic-sdk-loop",
            window=WINDOW,
            reserved_output=2_000,
            tools=[READ_FILE_TOOL],
            include_read_tool=True,
            framing=ANTHROPIC_FRAMING,
        )
        session.add(Message.system("You are a coding agent. read_context reads back anything compacted."))
        for turn in range(TURNS):
            session.add(Message.user(task(turn)))
            for _step in range(5):  # model calls per user request, with a limit
                reply = session.complete(model)
                for call in reply.tool_calls:
                    output = session.handle_tool_call(call.name, call.arguments)  # read_context: the session
                    if output is None:
                        output = read_file(**call.parsed_arguments())
                    session.on_tool_result(call.name, output, call_id=call.call_id)
                    session.on_turn_end(step=f"{call.name} {call.arguments}")  # a ledger step
                if not reply.tool_calls:
                    break
        status = session.status()
        print(f"{TURNS} turns: {len(session.transcript)} messages kept, the model saw {status.view_messages}")
        print(f"view: {status.used} of {status.budget} tokens; compactions: {status.compactions}")
        print(f"ledger: {len(session.ledger.entries)} steps; step #2 read back: {session.read_context('#2')[:100]!r}")


if __name__ == "__main__":
    main()
