"""Calibration from the server's token count when replies carry no usage (`contextwarden.served_counts`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import pytest
from hypothesis import given, strategies as st

from contextwarden import Message
from contextwarden.llm import AsyncOpenAIChatModel, OpenAIChatModel
from contextwarden.llm.base import ResponseDone
from contextwarden.llm.served_calls import Answer
from contextwarden.llm.served_window import ServedWindow
from contextwarden.messages import ToolCall
from contextwarden.served_counts import DEFAULT_COUNTED_SAMPLES, ServedCounts, request_text
from contextwarden.session import AsyncSession, Session
from contextwarden.testing import ScriptedOpenAIServer
from contextwarden.tokens import get_counter
from contextwarden.tokens.calibration import Calibration
from contextwarden.usage import RequestUsage

COUNTER = "tiktoken:cl100k_base"
OURS = get_counter(COUNTER)
NOTE = "the parser reads tokens and builds a tree of nodes, then the checker walks it twice. " * 6


def _counting(factor: float) -> Callable[[Any], Mapping[str, Any]]:
    """llama-cpp-python's ``/extras/tokenize/count`` for a tokenizer that makes ``factor`` × our tokens."""

    def count(body: Any) -> Mapping[str, Any]:
        return {"count": round(factor * OURS.count_text(body["input"]))}

    return count


def _paths(server: ScriptedOpenAIServer, *paths: str) -> list[str]:
    return [r.path for r in server.received if r.path in paths]


def _session() -> Session:
    s = Session("streams", window=8192, reserved_output=256, counter=COUNTER)
    s.add(Message.system("You are a terse assistant."))
    return s


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_a_session_that_only_streams_calibrates_from_the_servers_token_count(twin: str) -> None:
    routes = {"POST /extras/tokenize/count": _counting(1.3)}
    with ScriptedOpenAIServer.llama_cpp_python(n_ctx=100_000, default="Noted.", routes=routes) as server:
        if twin == "sync":
            s: Any = _session()
            with OpenAIChatModel("m", base_url=server.base_url, max_retries=0) as model:
                for turn in range(8):
                    s.add(Message.user(f"note {turn}: {NOTE}"))
                    events = list(s.stream(model))
                    done = events[-1]
                    assert isinstance(done, ResponseDone) and not done.response.usage.reported
        else:
            s = AsyncSession("streams", window=8192, reserved_output=256, counter=COUNTER)
            s.add(Message.system("You are a terse assistant."))

            async def run() -> None:
                async with AsyncOpenAIChatModel("m", base_url=server.base_url, max_retries=0) as model:
                    for turn in range(8):
                        s.add(Message.user(f"note {turn}: {NOTE}"))
                        events = [e async for e in s.stream(model)]
                        done = events[-1]
                        assert isinstance(done, ResponseDone) and not done.response.usage.reported

            anyio.run(run)
        counted = _paths(server, "/extras/tokenize/count")
        texts = [r.body["input"] for r in server.received if r.path == "/extras/tokenize/count" and r.body]
    # the probe that found the endpoint counts once; then one count per reply until the calibration holds its samples
    assert len(counted) == 1 + DEFAULT_COUNTED_SAMPLES and s.served_counts.taken == DEFAULT_COUNTED_SAMPLES
    assert s.usage.unreported == 8  # the replies' usage stays "not reported"
    assert s.status().calibration == pytest.approx(1.3, abs=0.05)
    assert "note 0:" in texts[1] and "Noted." in texts[2]  # the request's text, as it was sent


def test_a_llama_cpp_server_counts_at_its_tokenize_endpoint() -> None:
    def tokenize(body: Any) -> Mapping[str, Any]:
        return {"tokens": list(range(round(1.5 * OURS.count_text(body["content"]))))}

    routes = {
        "GET /props": {"default_generation_settings": {"n_ctx": 8192}, "model_path": "/models/small.gguf"},
        "POST /tokenize": tokenize,
    }
    with ScriptedOpenAIServer(default="Noted.", stream_usage=False, routes=routes) as server:
        s = Session("llama", served_window="probe", base_url=server.base_url, counter=COUNTER)
        assert s.served is not None and s.served.server == "llama.cpp"
        at_start = len(_paths(server, "/tokenize"))  # the counting margin, measured once
        with OpenAIChatModel("m", base_url=server.base_url, max_retries=0) as model:
            for turn in range(4):
                s.add(Message.user(f"note {turn}: {NOTE}"))
                list(s.stream(model))
        counted = _paths(server, "/tokenize")[at_start:]
        probed = _paths(server, "/props")
    assert len(counted) == 4 and len(probed) == 1  # the session's own probe is reused, not repeated
    assert s.accountant.calibration.samples == 4
    assert s.status().calibration == pytest.approx(1.5, abs=0.08)


def test_a_server_without_a_count_endpoint_is_probed_once_and_not_asked_again() -> None:
    probes = ("/props", "/v1/models", "/api/show", "/extras/tokenize/count", "/tokenize")
    with ScriptedOpenAIServer(default="Noted.", stream_usage=False) as server:
        s = _session()
        with OpenAIChatModel("m", base_url=server.base_url, max_retries=0) as model:
            for turn in range(4):
                s.add(Message.user(f"note {turn}: {NOTE}"))
                events = list(s.stream(model))
                assert isinstance(events[-1], ResponseDone) and events[-1].response.text == "Noted."
            asked = _paths(server, *probes)
    assert asked == ["/props", "/v1/models", "/api/show", "/extras/tokenize/count"]
    assert s.served_counts.unavailable and s.accountant.calibration.samples == 0


def test_reported_usage_is_used_and_no_count_is_asked() -> None:
    with ScriptedOpenAIServer(default="Noted.") as server:
        s = _session()
        with OpenAIChatModel("m", base_url=server.base_url, max_retries=0) as model:
            for turn in range(3):
                s.add(Message.user(f"note {turn}: {NOTE}"))
                list(s.stream(model)) if turn % 2 else s.complete(model)
        assert _paths(server, "/extras/tokenize/count", "/props", "/v1/models") == []
    assert s.accountant.calibration.samples == 3


def test_a_limit_of_zero_never_asks() -> None:
    with ScriptedOpenAIServer.llama_cpp_python(n_ctx=100_000, default="Noted.") as server:
        s = _session()
        s.served_counts.limit = 0
        with OpenAIChatModel("m", base_url=server.base_url, max_retries=0) as model:
            s.add(Message.user(NOTE))
            list(s.stream(model))
        assert _paths(server, "/extras/tokenize/count", "/props", "/v1/models") == []
    assert s.accountant.calibration.samples == 0


def test_the_count_waits_for_the_calibrations_own_minimum() -> None:
    counts = ServedCounts(limit=2)
    cal = Calibration(min_samples=4)
    for _ in range(3):
        cal.record(100, 120)
    assert counts.wanted(cal, RequestUsage.unreported(), "http://127.0.0.1:1/v1")
    cal.record(100, 120)
    assert not counts.wanted(cal, RequestUsage.unreported(), "http://127.0.0.1:1/v1")
    assert not ServedCounts().wanted(Calibration(), RequestUsage(input_tokens=5), "http://127.0.0.1:1/v1")
    assert not ServedCounts().wanted(Calibration(), RequestUsage.unreported(), None)  # nowhere to ask


def test_a_failed_count_stops_the_asking() -> None:
    served = ServedWindow(
        base_url="http://127.0.0.1:1/v1", server="llama.cpp", window=2048, token_count_url="http://127.0.0.1:1/tokenize"
    )
    counts = ServedCounts(served=served)
    steps = counts.flow("some text", base_url=served.base_url, model=None)
    call = next(steps)
    assert call.url == "http://127.0.0.1:1/tokenize" and call.body == {"content": "some text"}
    with pytest.raises(StopIteration) as done:
        steps.send(Answer(500, None, "tokenizer failed"))
    assert done.value.value is None and counts.unavailable and counts.taken == 0
    assert not counts.wanted(Calibration(), RequestUsage.unreported(), served.base_url)


texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@given(st.lists(st.tuples(texts, texts, texts), min_size=1, max_size=6))
def test_request_text_holds_every_text_the_counter_counts(rounds: list[tuple[str, str, str]]) -> None:
    messages: list[Message] = []
    for i, (said, name, args) in enumerate(rounds):
        call = ToolCall(call_id=f"c{i}", name=name or "tool", arguments=json.dumps({"a": args}))
        messages += [Message.user(said), Message.assistant("", tool_calls=[call]), Message.tool_result(f"c{i}", args)]
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    text = request_text(messages, tools)
    for said, name, args in rounds:
        assert said in text and (name or "tool") in text and json.dumps({"a": args}) in text
    assert '"name":"read_file"' in text
    assert request_text([Message.user("")]) == ""
