"""Minimal inputs the fuzz suite found in areas being hardened right now, one test each.

Each is the smallest form of a failing fuzz example. They are marked ``xfail(strict=True)``
while their fix is under way: a fix makes the test pass, strict xfail turns that into a failure,
and the mark must then go (the fuzz test that found it loses its mark too).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextwarden import Session
from contextwarden.compaction.config import CompactionConfig
from contextwarden.exceptions import ConfigError, MessageError, SchemaError, UpstreamError
from contextwarden.llm import AnthropicModel, OpenAIChatModel, RetryPolicy
from contextwarden.messages import Message, ToolCall
from contextwarden.settings import load_settings, validate_config_file
from contextwarden.stores import MemoryStore
from contextwarden.testing import ScriptedError, ScriptedOpenAIServer, ScriptedStream

from ._strategies import deep_json_text, deep_value

TOO_LONG_TO_PRINT = 10**5000
"""More digits than ``str()`` writes by default: any ``{value!r}`` of it raises ValueError."""


@pytest.mark.parametrize(
    "config",
    [
        deep_value(3000),
        {"low_water": deep_value(3000)},
        {"keep_recent_rounds": TOO_LONG_TO_PRINT},
        {"low_water": -(10**400)},
    ],
    ids=["list-3000-deep", "option-3000-deep", "option-too-long-to-print", "float-option-10**400"],
)
def test_a_config_that_cannot_be_printed_is_a_config_error(config: Any) -> None:
    with pytest.raises(ConfigError):
        Session(window=3000, config=config)


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("read_context", {"ref": TOO_LONG_TO_PRINT}),
        ("read_context", {"ref": "#0", "page": TOO_LONG_TO_PRINT}),
        ("write_note", {"text": "x", "resolve_id": TOO_LONG_TO_PRINT}),
        ("write_note", {"text": "x", "kind": TOO_LONG_TO_PRINT}),
    ],
)
def test_a_number_too_long_to_print_in_tool_arguments_gets_an_error_text(tool: str, arguments: Any) -> None:
    session = Session(window=3000)
    session.add([Message.user("hi")])
    answer = session.handle_tool_call(tool, arguments)
    assert isinstance(answer, str) and answer.startswith("error:")


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as running:
        yield running


def _model(api: str, server: ScriptedOpenAIServer) -> Any:
    fast = RetryPolicy(max_retries=0)
    if api == "openai":
        return OpenAIChatModel("m", base_url=server.base_url, retry=fast)
    return AnthropicModel("m", base_url=server.url, retry=fast)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("streamed", [False, True], ids=["body", "stream"])
def test_a_reply_nested_5000_deep_is_an_upstream_error(api: str, streamed: bool, server: ScriptedOpenAIServer) -> None:
    model = _model(api, server)
    try:
        if streamed:
            server.push(ScriptedStream(events=[deep_json_text(5000)]))
            with pytest.raises(UpstreamError):
                list(model.stream([Message.user("go")]))
        else:
            server.push(ScriptedError(status=200, body=deep_json_text(5000)))
            with pytest.raises(UpstreamError):
                model.request([Message.user("go")])
    finally:
        model.close()


def _two_calls_one_id(api: str) -> dict[str, Any]:
    if api == "openai":
        call = {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
        message = {"role": "assistant", "content": None, "tool_calls": [call, call]}
        return {"id": "c", "model": "m", "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
    block = {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}
    return {"id": "msg_1", "type": "message", "role": "assistant", "content": [block, block], "stop_reason": "tool_use"}


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_complete_keeps_a_reply_whose_tool_calls_share_an_id(api: str, server: ScriptedOpenAIServer) -> None:
    model = _model(api, server)
    session = Session(window=3000)
    session.add([Message.user("go")])
    server.push(ScriptedError(status=200, body=json.dumps(_two_calls_one_id(api))))
    try:
        reply = session.complete(model)
    finally:
        model.close()
    assert reply.message.message_id in [m.message_id for m in session.transcript]


@pytest.mark.parametrize("check", ["load", "validate"])
def test_a_config_file_with_a_5000_digit_integer_is_a_config_error(tmp_path: Path, check: str) -> None:
    path = tmp_path / "contextwarden.toml"
    path.write_text("[compaction]\nkeep_recent_rounds = " + "9" * 5000 + "\n")
    if check == "load":
        with pytest.raises(ConfigError):
            load_settings(path)
    else:
        assert validate_config_file(path, environment=False)


@pytest.mark.parametrize(
    ("fmt", "item"),
    [
        ("openai", {"role": "user", "content": "hi", "n": TOO_LONG_TO_PRINT}),
        ("responses", {"type": "message", "role": "user", "content": "hi", "n": TOO_LONG_TO_PRINT}),
        ("anthropic", {"role": "user", "content": "hi", "n": TOO_LONG_TO_PRINT}),
    ],
)
def test_a_message_the_store_cannot_load_back_is_refused_at_add(fmt: str, item: Any) -> None:
    store = MemoryStore()
    session = Session("s", store=store, window=3000)
    try:
        session.add([item], format=fmt)
    except MessageError:
        return  # refused: fine
    Session("s", store=store, window=3000)  # stored: it must load back


def _usage_reply(api: str, tokens: int) -> dict[str, Any]:
    if api == "openai":
        message = {"role": "assistant", "content": "ok"}
        usage = {"prompt_tokens": tokens, "completion_tokens": 1, "total_tokens": tokens}
        return {
            "id": "c",
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": usage,
        }
    content = [{"type": "text", "text": "ok"}]
    usage = {"input_tokens": tokens, "output_tokens": 1}
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": content,
        "stop_reason": "end_turn",
        "usage": usage,
    }


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_reply_reporting_an_absurd_token_count_is_kept(api: str, server: ScriptedOpenAIServer) -> None:
    model = _model(api, server)
    session = Session(window=3000)
    session.add([Message.user("go")])
    server.push(ScriptedError(status=200, body=json.dumps(_usage_reply(api, 10**400))))
    try:
        reply = session.complete(model)
    finally:
        model.close()
    assert reply.message.message_id in [m.message_id for m in session.transcript]
    session.prepare()


def _export_with_bad_ledger_turn() -> list[str]:
    store = MemoryStore()
    session = Session("src", store=store, window=3000, reserved_output=400)
    for i in range(6):
        session.add([Message.user(f"step {i} " + "words " * 200), Message.assistant(f"done {i}")])
        session.on_turn_end(step=f"step {i}")
    session.on_context_overflow(format="internal")
    lines = list(store.export_session("src"))
    out = []
    for line in lines:
        record = json.loads(line)
        if record["type"] == "state" and record["state"].get("ledger", {}).get("entries"):
            record["state"]["ledger"]["entries"][0]["turn"] = []
            line = json.dumps(record) + "\n"
        out.append(line)
    assert out != lines, "the export has no ledger entry to corrupt"
    return out


def test_import_refuses_a_state_the_session_cannot_open() -> None:
    lines = _export_with_bad_ledger_turn()
    store = MemoryStore()
    try:
        store.import_session(lines, session_id="imported")
    except SchemaError:
        return  # refused before writing: fine
    Session("imported", store=store, window=3000)  # accepted: it must open


def _export_with_view(session_id: str, window: int, output_words: int, change: Any) -> list[str]:
    """A compacted session's export whose saved view is changed by ``change`` (the state's view dict)."""
    store = MemoryStore()
    config = CompactionConfig(clear_after_rounds=1)
    session = Session(session_id, store=store, window=window, reserved_output=400, config=config)
    session.add([Message.system("You are a coding agent."), Message.user("Fix src/app.py.")])
    for i in range(12):
        call = Message.assistant(tool_calls=[ToolCall(call_id=f"c{i}", name="read_file", arguments="{}")])
        session.add([call, Message.tool_result(f"c{i}", f"line {i} of the file " * output_words)])
        session.prepare()
    out = []
    for line in store.export_session(session_id):
        record = json.loads(line)
        if record["type"] == "state" and record["slot"] == "view":
            change(record["state"]["view"])
            line = json.dumps(record) + "\n"
        out.append(line)
    return out


def _break_context(view: dict[str, Any]) -> None:
    view["context"]["role"] = None  # the block of a session that evicted rounds


def _break_stand_in(view: dict[str, Any]) -> None:
    cleared = next(iter(view["stand_ins"]))  # a cleared output, its stand-in made again from the transcript
    view["stand_ins"][cleared] = {"role": None, "parts": []}


@pytest.mark.parametrize(
    ("window", "output_words", "change"),
    [(4000, 100, _break_context), (6000, 120, _break_stand_in)],
    ids=["context", "stand-in"],
)
def test_import_refuses_a_saved_view_whose_messages_do_not_load(window: int, output_words: int, change: Any) -> None:
    """The view's messages are checked at import as opening the session reads them: refused, nothing written."""
    store = MemoryStore()
    with pytest.raises(SchemaError, match=r"view\.(context|stand_ins)"):
        store.import_session(_export_with_view("src", window, output_words, change), session_id="imported")
    assert store.list_sessions()[0] == []
    # the same export unchanged imports and opens
    store.import_session(_export_with_view("src", window, output_words, lambda view: None), session_id="imported")
    assert Session("imported", store=store, window=window).transcript


def test_a_streamed_tool_input_nested_5000_deep_is_kept_raw_as_invalid_input(server: ScriptedOpenAIServer) -> None:
    start = {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}
    deep = {"type": "input_json_delta", "partial_json": '{"a":' * 5000}
    events = [
        {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": []}},
        {"type": "content_block_start", "index": 0, "content_block": start},
        {"type": "content_block_delta", "index": 0, "delta": deep},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 1}},
        {"type": "message_stop"},
    ]
    model = _model("anthropic", server)
    server.push(ScriptedStream(events=events))
    try:
        events = list(model.stream([Message.user("go")]))
    finally:
        model.close()
    # the paid reply is not lost: its call is there with the raw input, which the session answers
    # as invalid arguments (see test_complete)
    message = events[-1].response.message  # type: ignore[union-attr]
    assert [c.name for c in message.tool_calls] == ["ls"]
    assert message.tool_calls[0].arguments == '{"a":' * 5000
