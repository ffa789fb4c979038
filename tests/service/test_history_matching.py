"""History matching over real HTTP: what clients really re-send, and how the session takes it."""

from __future__ import annotations

import pytest

from contextwarden.testing import ScriptedOpenAIServer, ScriptedReply

from ._stored import stored
from .conftest import SYSTEM, Running, assistant, chat, user


def _unmanaged(service: Running) -> str:
    metrics = service.app.state.service.metrics.render().decode()
    return "\n".join(
        line for line in metrics.splitlines() if line.startswith("contextwarden_unmanaged_requests_total{")
    )


def test_a_reply_re_sent_as_a_system_message_is_the_stored_reply(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    upstream.push("The tests pass.", "Next I will lint.")
    headers = {"X-Session-Id": "sysecho"}
    r = service.client.post("/v1/chat/completions", json=chat(SYSTEM, user("run the tests")), headers=headers)
    assert r.status_code == 200
    # the client folds the model's answer into a system note when it sends the history again
    follow = chat(SYSTEM, user("run the tests"), {"role": "system", "content": "The tests pass."}, user("and now?"))
    r = service.client.post("/v1/chat/completions", json=follow, headers=headers)
    assert r.status_code == 200 and r.headers["x-session-id"] == "sysecho"
    assert _unmanaged(service) == ""
    assert stored(service, "sysecho") == [
        ("system", "You are a careful agent."),
        ("user", "run the tests"),
        ("assistant", "The tests pass."),
        ("user", "and now?"),
        ("assistant", "Next I will lint."),
    ]
    # the upstream gets the reply as the model gave it
    assert upstream.requests[-1]["messages"][2] == {"role": "assistant", "content": "The tests pass."}


def test_a_system_message_that_is_not_a_stored_reply_is_new(service: Running, upstream: ScriptedOpenAIServer) -> None:
    headers = {"X-Session-Id": "sysnew"}
    service.client.post("/v1/chat/completions", json=chat(SYSTEM, user("start")), headers=headers)
    note = {"role": "system", "content": "The user switched to the release branch."}
    r = service.client.post(
        "/v1/chat/completions", json=chat(SYSTEM, user("start"), assistant("ok"), note, user("go")), headers=headers
    )
    assert r.status_code == 200 and r.headers["x-session-id"] == "sysnew"
    assert [role for role, _ in stored(service, "sysnew")] == [
        "system",
        "user",
        "assistant",
        "system",
        "user",
        "assistant",
    ]


@pytest.mark.parametrize(
    "echo",
    ["  The tests pass.\n", "The  tests\n pass.", "The tests pass.\n\n"],
    ids=["padded", "re-wrapped", "trailing-newlines"],
)
def test_a_reply_re_sent_with_other_whitespace_is_the_stored_reply(
    service: Running, upstream: ScriptedOpenAIServer, echo: str
) -> None:
    upstream.push("The tests pass.")
    headers = {"X-Session-Id": "ws"}
    service.client.post("/v1/chat/completions", json=chat(SYSTEM, user("run the tests")), headers=headers)
    follow = chat(SYSTEM, user("run the tests"), assistant(echo), user("thanks"))
    r = service.client.post("/v1/chat/completions", json=follow, headers=headers)
    assert r.status_code == 200 and r.headers["x-session-id"] == "ws"
    assert [text for _, text in stored(service, "ws")][2:] == ["The tests pass.", "thanks", "ok"]


@pytest.mark.parametrize("stream", [False, True])
def test_identical_retries_store_one_reply(service: Running, upstream: ScriptedOpenAIServer, stream: bool) -> None:
    upstream.push(*[ScriptedReply(text=f"answer {i}") for i in range(5)])
    body = chat(SYSTEM, user("once"), stream=stream)
    for _ in range(5):
        r = service.client.post("/v1/chat/completions", json=body, headers={"X-Session-Id": "retry"})
        assert r.status_code == 200, r.text
        assert r.headers["x-session-id"] == "retry"
        # each retry goes upstream as the client sent it: without the reply stored for the first
        assert upstream.requests[-1]["messages"] == body["messages"]
    assert stored(service, "retry") == [
        ("system", "You are a careful agent."),
        ("user", "once"),
        ("assistant", "answer 0"),
    ]


def test_a_user_message_equal_to_an_earlier_one_is_new(service: Running, upstream: ScriptedOpenAIServer) -> None:
    upstream.push("step one done", "step two done", "step three done")
    headers = {"X-Session-Id": "again"}
    history = [SYSTEM, user("continue")]
    for _ in range(3):
        r = service.client.post("/v1/chat/completions", json=chat(*history), headers=headers)
        assert r.status_code == 200 and r.headers["x-session-id"] == "again"
        history += [r.json()["choices"][0]["message"], user("continue")]
    assert [text for _, text in stored(service, "again")] == [
        "You are a careful agent.",
        "continue",
        "step one done",
        "continue",
        "step two done",
        "continue",
        "step three done",
    ]


def test_several_choices_then_the_pick_re_sent_as_a_system_message(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    headers = {"X-Session-Id": "n3"}
    r = service.client.post("/v1/chat/completions", json=chat(SYSTEM, user("a name?"), n=3), headers=headers)
    assert r.status_code == 200
    assert stored(service, "n3") == [("system", "You are a careful agent."), ("user", "a name?")]
    picked = chat(SYSTEM, user("a name?"), {"role": "system", "content": "Ada"}, user("why?"))
    r = service.client.post("/v1/chat/completions", json=picked, headers=headers)
    assert r.status_code == 200 and r.headers["x-session-id"] == "n3"
    # no reply was stored, so the pick is a message of the client's own: kept as it came
    assert stored(service, "n3")[2:] == [("system", "Ada"), ("user", "why?"), ("assistant", "ok")]
