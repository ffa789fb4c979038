"""The scripted server itself, spoken to with plain httpx."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from contextwarden.testing import ScriptedDisconnect, ScriptedError, ScriptedOpenAIServer, ScriptedReply, ScriptedStream


def _post(server: ScriptedOpenAIServer, body: dict[str, Any], path: str = "/v1/chat/completions") -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=5)


def test_models_listing_and_unknown_routes() -> None:
    with ScriptedOpenAIServer(model="tiny-model") as server:
        listing = httpx.get(server.base_url + "/models").json()
        assert listing["data"][0]["id"] == "tiny-model"
        missing = httpx.get(server.url + "/nope")
        assert missing.status_code == 404
        assert httpx.post(server.url + "/v2/else", json={}).status_code == 404
        assert [r.path for r in server.received] == ["/v1/models", "/nope", "/v2/else"]
        assert server.requests == [], "only completion requests count as requests"


def test_non_streaming_reply_shape() -> None:
    with ScriptedOpenAIServer(
        [ScriptedReply(text="hi", prompt_tokens=10, completion_tokens=2, cached_tokens=4)]
    ) as server:
        data = _post(server, {"model": "m", "messages": [{"role": "user", "content": "x"}]}).json()
    assert data["object"] == "chat.completion" and data["model"] == "m"
    assert data["choices"][0]["message"] == {"role": "assistant", "content": "hi"}
    assert data["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 2,
        "total_tokens": 12,
        "prompt_tokens_details": {"cached_tokens": 4},
    }


def test_streaming_frames_end_with_done() -> None:
    with ScriptedOpenAIServer(["a b"]) as server:
        response = _post(
            server, {"model": "m", "messages": [], "stream": True, "stream_options": {"include_usage": True}}
        )
    lines = [line for line in response.text.split("\n") if line]
    assert response.headers["content-type"] == "text/event-stream"
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == "a b"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] >= 1


def test_callable_items_push_default_and_remaining() -> None:
    def echo(body: dict[str, Any]) -> str:
        return "echo: " + body["messages"][-1]["content"]

    with ScriptedOpenAIServer([echo], default="fallback") as server:
        server.push(ScriptedError(status=418, message="teapot"))
        assert server.remaining == 2
        first = _post(server, {"messages": [{"role": "user", "content": "ping"}]}).json()
        assert first["choices"][0]["message"]["content"] == "echo: ping"
        teapot = _post(server, {"messages": []})
        assert teapot.status_code == 418 and teapot.json()["error"]["message"] == "teapot"
        assert _post(server, {"messages": []}).json()["choices"][0]["message"]["content"] == "fallback"
        assert server.remaining == 0


def test_anthropic_error_shape_and_retry_after_header() -> None:
    with ScriptedOpenAIServer([ScriptedError.rate_limited(retry_after=2)]) as server:
        response = _post(server, {"messages": []}, path="/v1/messages")
    assert response.status_code == 429 and response.headers["retry-after"] == "2"
    assert response.json()["type"] == "error" and response.json()["error"]["type"] == "rate_limit_error"


def test_invalid_json_body() -> None:
    with ScriptedOpenAIServer(["unused"]) as server:
        response = httpx.post(server.base_url + "/chat/completions", content=b"{not json", timeout=5)
        assert response.status_code == 400 and server.remaining == 1


def test_disconnect_without_answer() -> None:
    with ScriptedOpenAIServer([ScriptedDisconnect()]) as server:
        with pytest.raises(httpx.RemoteProtocolError):
            _post(server, {"messages": []})


def test_stop_does_not_wait_for_slow_replies() -> None:
    server = ScriptedOpenAIServer([ScriptedReply(text="slow", delay=30)]).start()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.base_url + "/chat/completions", json={"messages": []}, timeout=0.2)
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 2
    with pytest.raises(RuntimeError, match="not running"):
        server.base_url  # noqa: B018


def test_a_window_refuses_long_prompts_in_openai_wording_without_taking_a_script_item() -> None:
    count = lambda body: 10 * len(body["messages"])  # noqa: E731
    with ScriptedOpenAIServer(["answered"], n_ctx=30, count_tokens=count) as server:
        long = {"model": "m", "messages": [{"role": "user", "content": "x"}] * 3, "max_tokens": 5}
        refused = _post(server, long)
        short = _post(server, {"model": "m", "messages": [{"role": "user", "content": "x"}]})
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["message"].startswith("This model's maximum context length is 30 tokens. However, you requested 35")
    assert "(30 in the messages, 5 in the completion)" in error["message"]
    assert short.json()["choices"][0]["message"]["content"] == "answered"
    assert short.json()["usage"]["prompt_tokens"] == 10  # the server's own count


def test_llama_cpp_python_mode_streams_nothing_for_a_long_prompt_and_never_usage() -> None:
    count = lambda body: 10 * len(body["messages"])  # noqa: E731
    with ScriptedOpenAIServer.llama_cpp_python(["short answer"], n_ctx=30, count_tokens=count) as server:
        stream = {"model": "m", "stream": True, "stream_options": {"include_usage": True}}
        refused = _post(server, {**stream, "messages": [{"role": "user", "content": "x"}] * 3})
        answered = _post(server, {**stream, "messages": [{"role": "user", "content": "x"}]})
        plain = _post(server, {"model": "m", "messages": [{"role": "user", "content": "x"}] * 3})
    assert refused.status_code == 200 and refused.text == ""  # an empty event stream
    assert answered.text.endswith("data: [DONE]\n\n") and '"usage"' not in answered.text
    assert plain.status_code == 400 and "maximum context length is 30" in plain.text


def test_scripted_stream_sends_events_verbatim() -> None:
    with ScriptedOpenAIServer([ScriptedStream(events=["not json", {"a": 1}], done=False)]) as server:
        response = _post(server, {"model": "m", "messages": [], "stream": True})
    assert response.text == 'data: not json\n\ndata: {"a": 1}\n\n'
