"""A plain agent loop on the OpenAI Python SDK with `Session.complete()`, `read_context` and the ledger.

`Session.complete(model)` wants a model with contextwarden's `request()` contract; `OpenAISDKModel`
below is that contract over the official SDK's client (twenty lines you can copy): the view goes
out as Chat Completions messages, the reply comes back as a contextwarden message, and the SDK's
"context length exceeded" error becomes `ContextOverflowError`, so `complete()` compacts deeper
and retries. The session answers its own ``read_context`` tool; every tool step goes into the
progress ledger, which survives every compaction.

Runs offline against contextwarden's scripted server (16k-token window) unless ``OPENAI_BASE_URL``
is set (then ``OPENAI_API_KEY`` and ``MODEL`` too).

    pip install contextwarden openai
    python examples/openai_sdk_loop.py
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from typing import Any

import openai

from contextwarden import Message, RequestUsage, Session, from_messages, to_messages
from contextwarden.llm import ModelResponse, classify_error
from contextwarden.testing import ScriptedOpenAIServer
from contextwarden.testing.tool_agent import READ_FILE_TOOL, ToolLoopModel, prompt_tokens, read_file, task

WINDOW = 16_000
TURNS = int(os.environ.get("TURNS", "60"))  # user requests in the session


class OpenAISDKModel:
    """contextwarden's `Model` contract over ``openai.OpenAI`` (Chat Completions)."""

    def __init__(self, client: openai.OpenAI, model_name: str) -> None:
        self.client, self.model_name = client, model_name

    def request(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> ModelResponse:
        options: dict[str, Any] = {"tools": list(tools)} if tools else {}
        if max_tokens is not None:
            options["max_tokens"] = max_tokens
        try:
            reply = self.client.chat.completions.create(
                model=self.model_name, messages=from_messages(messages, format="openai"), **options
            )
        except openai.APIStatusError as exc:  # "context length exceeded" -> ContextOverflowError
            raise classify_error(exc.status_code, exc.response.text, url=str(exc.request.url)) from exc
        (message,) = to_messages([reply.choices[0].message.model_dump(exclude_none=True)], format="openai")
        usage = reply.usage
        return ModelResponse(
            message=message,
            usage=RequestUsage(input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens)
            if usage
            else RequestUsage(reported=False),
        )

    def stream(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("this loop does not stream")


def main() -> None:
    with ExitStack() as stack:
        base_url = os.environ.get("OPENAI_BASE_URL")
        if base_url is None:
            server = stack.enter_context(
                ScriptedOpenAIServer(default=ToolLoopModel(), n_ctx=WINDOW, count_tokens=prompt_tokens)
            )
            base_url = server.base_url
        client = openai.OpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "unused"))
        model = OpenAISDKModel(client, os.environ.get("MODEL", "scripted-model"))
        session = Session(
            "openai-sdk-loop", window=WINDOW, reserved_output=2_000, tools=[READ_FILE_TOOL], include_read_tool=True
        )
        session.add(Message.system("You are a coding agent. read_context reads back anything compacted."))
        for turn in range(TURNS):
            session.add(Message.user(task(turn)))
            for _step in range(5):  # model calls per user request, with a limit
                reply = session.complete(model)  # prepare the view, call, calibrate, append the reply
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
