"""A client that compresses its own history (qwen-code's chat compression), over and over, stays managed.

qwen-code keeps its system prompt and its environment message, puts a summary of the steps in
place of them and keeps the last few. Each compression is a side request with the summarizer's
own prompt (a conversation of its own); each rewritten history that follows is a session of its
own, which the client's next requests continue: the second and later compressions are followed
the way the first is, and no request goes upstream unmanaged.
"""

from __future__ import annotations

from typing import Any

from contextwarden.messages import Message, ToolCall
from contextwarden.stores import open_store
from contextwarden.testing import ScriptedOpenAIServer, ScriptedReply

from .conftest import SYSTEM, Running, assistant, chat, user

ENV = user("This is the Qwen Code. We are setting up the context for our chat. Today's date is Monday.")
ACK = assistant("Got it. Thanks for the context!")
SUMMARIZER = {"role": "system", "content": "You are the component that summarizes internal chat history."}
HEADERS = {"X-Session-Id": "qwen"}
READ = {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}}}


def _step(n: int) -> list[dict[str, Any]]:
    call = {"id": f"call_{n}", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    output = " ".join(f"file{n}_{j}" for j in range(120))
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{n}", "content": output},
    ]


def _unmanaged(service: Running) -> list[str]:
    metrics = service.app.state.service.metrics.render().decode()
    return [line for line in metrics.splitlines() if line.startswith("contextwarden_unmanaged_requests_total{")]


def _stored(service: Running) -> dict[str, list[Message]]:
    """Every session the store holds, with its messages."""
    with open_store(service.app.state.service.settings.store_url) as store:
        ids = [info.session_id for info in store.list_sessions(tenant="default")[0]]
        return {session_id: list(store.load_messages(session_id, tenant="default")) for session_id in ids}


def test_every_compression_of_the_clients_history_is_followed_and_stays_managed(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    history: list[dict[str, Any]] = [SYSTEM, ENV, ACK, user("fix the failing test")]
    step = 0

    def turn() -> None:
        nonlocal step
        upstream.push(ScriptedReply(tool_calls=[ToolCall(call_id=f"call_{step}", name="read_file", arguments="{}")]))
        r = service.client.post("/v1/chat/completions", json=chat(*history, tools=[READ]), headers=HEADERS)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["tool_calls"][0]["id"] == f"call_{step}"
        # the agent runs the tool the model asked for
        history.extend(_step(step))
        step += 1

    def compress(summary: str) -> None:
        side = chat(SUMMARIZER, *history[1:], user("Summarize the history into a <state_snapshot>."))
        upstream.push(summary)
        r = service.client.post("/v1/chat/completions", json=side, headers=HEADERS)
        assert r.status_code == 200, r.text
        kept = history[-4:]  # the last steps stay
        history[:] = [SYSTEM, ENV, ACK, user(summary), assistant("Got it. Thanks for the additional context!"), *kept]

    for _ in range(4):
        turn()
    compress("<state_snapshot>first: the parser test fails</state_snapshot>")
    for _ in range(3):
        turn()
    compress("<state_snapshot>second: the parser test fails, the lexer is fixed</state_snapshot>")
    for _ in range(3):
        turn()
    compress("<state_snapshot>third: both fixed, running the suite</state_snapshot>")
    for _ in range(2):
        turn()

    assert _unmanaged(service) == []  # every request was managed, the compressions' too
    # the last request's view: the third summary and the steps since, with the client's tools
    last = upstream.requests[-1]
    assert any("third: both fixed" in str(m.get("content")) for m in last["messages"])
    # each rewritten history is a session of its own that holds its requests, the newest turns in it
    sessions = _stored(service)
    newest = [
        messages
        for session_id, messages in sessions.items()
        if session_id.startswith("qwen~")
        and any(m.role == "user" and "third: both fixed" in m.text for m in messages)
        and not any(m.role == "system" and "summarizes" in m.text for m in messages)
    ]
    assert len(newest) == 1, sorted(sessions)
    calls = [c.call_id for m in newest[0] for c in m.tool_calls]
    assert calls[-2:] == [f"call_{step - 2}", f"call_{step - 1}"]
    # and each compression's summary request is a conversation of its own, never in an agent's session
    summarizers = [s for s in sessions.values() if s[0].role == "system" and "summarizes" in s[0].text]
    assert len(summarizers) == 3
