"""Responses custom and hosted tool items: one model turn per message, each call paired with its output.

Properties over generated Codex-like histories (the items go back exactly; every call the client
answers is one round with its output; a reasoning item stays with the item it produced), and over
real HTTP: a compacted view never sends a call without its output or an output without its call.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from hypothesis import given, strategies as st

from contextwarden.messages import TextPart
from contextwarden.rounds import group_rounds
from contextwarden.service.dialects.openai_responses import OpenAIResponses, _render, to_messages
from contextwarden.service.dialects.responses_items import BLANK_SCREENSHOT
from contextwarden.settings import Settings
from contextwarden.toolpairs import check

from ._responses_upstream import ResponsesUpstream, text_item
from .conftest import MODEL, Running, make_settings

_ids = iter(range(10**9))


def _id(prefix: str) -> str:
    return f"{prefix}_{next(_ids)}"


def _reasoning() -> dict[str, Any]:
    return {"type": "reasoning", "id": _id("rs"), "summary": [], "encrypted_content": f"enc-{next(_ids)}"}


def _call(kind: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A call item of ``kind`` and the output the client answers it with (None: a hosted call with its result)."""
    call_id = _id("call")
    if kind == "custom":
        call = {
            "type": "custom_tool_call",
            "id": _id("ctc"),
            "call_id": call_id,
            "name": "apply_patch",
            "input": "*** Begin Patch\n*** End Patch",
        }
        return call, {"type": "custom_tool_call_output", "call_id": call_id, "output": "Done!"}
    if kind == "computer":
        call = {
            "type": "computer_call",
            "id": _id("cu"),
            "call_id": call_id,
            "action": {"type": "click", "x": 1, "y": 2},
            "pending_safety_checks": [],
            "status": "completed",
        }
        shot = {"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"}
        return call, {"type": "computer_call_output", "call_id": call_id, "output": shot}
    if kind == "local_shell":
        call = {
            "type": "local_shell_call",
            "id": _id("lsh"),
            "call_id": call_id,
            "action": {"type": "exec", "command": ["ls"], "env": {}},
            "status": "completed",
        }
        return call, {"type": "local_shell_call_output", "id": call_id, "output": '{"stdout": "a.py"}'}
    if kind == "shell":
        call = {
            "type": "shell_call",
            "id": _id("sh"),
            "call_id": call_id,
            "action": {"commands": ["pytest"]},
            "status": "completed",
        }
        return call, {
            "type": "shell_call_output",
            "call_id": call_id,
            "output": [{"stdout": "ok", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
        }
    if kind == "approval":
        request = {
            "type": "mcp_approval_request",
            "id": call_id,
            "server_label": "files",
            "name": "delete",
            "arguments": "{}",
        }
        return request, {"type": "mcp_approval_response", "approval_request_id": call_id, "approve": True}
    if kind == "function":
        call = {
            "type": "function_call",
            "id": _id("fc"),
            "call_id": call_id,
            "name": "shell",
            "arguments": '{"command": ["ls"]}',
        }
        return call, {"type": "function_call_output", "call_id": call_id, "output": "a.py"}
    if kind == "web_search":
        return {
            "type": "web_search_call",
            "id": _id("ws"),
            "status": "completed",
            "action": {"type": "search", "query": "q"},
        }, None
    return {
        "type": "mcp_call",
        "id": _id("mcp"),
        "server_label": "files",
        "name": "read",
        "arguments": "{}",
        "output": "text",
    }, None


KINDS = ["custom", "computer", "local_shell", "shell", "approval", "function", "web_search", "mcp"]


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
    ]
    for _ in range(draw(st.integers(1, 5))):
        outputs: list[dict[str, Any]] = []
        for kind in draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=3)):
            if draw(st.booleans()):
                items.append(_reasoning())
            call, output = _call(kind)
            items.append(call)
            if output is not None:
                outputs.append(output)
        if draw(st.booleans()):
            items.append(text_item("done with this step"))
        items += outputs
        if draw(st.booleans()):
            items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "next"}]})
    return items


@given(histories())
def test_items_go_back_exactly_and_every_answered_call_is_one_round_with_its_output(
    items: list[dict[str, Any]],
) -> None:
    messages = to_messages(items)
    assert _render(messages) == items
    check(messages)  # every call has its output, every output its call
    for round_ in group_rounds(messages):
        inside = [messages[i] for i in round_.indices]
        called = {c.call_id for m in inside for c in m.tool_calls}
        assert {m.tool_call_id for m in inside if m.role == "tool"} <= called
        assert not round_.pending
    # a reasoning item is in the same message as the item after it
    for index, item in enumerate(items[:-1]):
        if item["type"] == "reasoning":
            after = items[index + 1]
            assert _render([_holding(messages, item)]) == _render([_holding(messages, after)])


def _holding(messages: list[Any], item: dict[str, Any]) -> Any:
    return next(m for m in messages if item in _render([m]))


def test_an_output_shortened_by_compaction_goes_back_with_the_shortened_text() -> None:
    call, output = _call("custom")
    assert output is not None
    messages = to_messages([call, output])
    shortened = replace(messages[1], parts=(TextPart(text="[cleared]"),))
    assert _render([messages[0], shortened]) == [call, {**output, "output": "[cleared]"}]


def test_a_turn_whose_call_a_repair_dropped_keeps_its_other_items() -> None:
    reasoning, (web, _), (custom, _) = _reasoning(), _call("web_search"), _call("custom")
    (turn,) = to_messages([reasoning, web, custom])
    without = turn.__class__(
        role="assistant", parts=tuple(p for p in turn.parts if p.kind != "tool-call"), extra=turn.extra
    )
    assert _render([without]) == [reasoning, web]


def _codex_history(rounds: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "patch every module"}]}
    ]
    for n in range(rounds):
        call, output = _call("custom")
        assert output is not None
        output["output"] = " ".join(f"patched_{n}_{j}" for j in range(300))
        web, _ = _call("web_search")
        items += [_reasoning(), web, call, output]
    return items


def test_a_compacted_view_keeps_custom_and_hosted_calls_paired(
    service_factory: Callable[[Settings], Running], sqlite_url: str
) -> None:
    with ResponsesUpstream() as upstream:
        service = service_factory(make_settings(sqlite_url, upstream.base_url))
        history = _codex_history(10)
        body = {
            "model": MODEL,
            "instructions": "Codex.",
            "input": history,
            "tools": [{"type": "custom", "name": "apply_patch"}],
        }
        r = service.client.post("/v1/responses", json=body, headers={"session-id": "ct"})
        assert r.status_code == 200, r.text
        sent = upstream.requests[-1]["input"]
        transcript = service.app.state.service.pool.loaded("default", "ct").state.messages()
    assert len(json.dumps(sent)) < len(json.dumps(history))  # compacted
    calls = {i["call_id"] for i in sent if i.get("type") == "custom_tool_call"}
    outputs = {i["call_id"] for i in sent if i.get("type") == "custom_tool_call_output"}
    assert calls and calls == outputs
    originals = [json.dumps(i, sort_keys=True) for i in history]
    for index, item in enumerate(sent):
        if item.get("type") == "reasoning":  # sent with the items of its turn, in their order
            at = originals.index(json.dumps(item, sort_keys=True))
            assert sent[index + 1] == history[at + 1]
        if item.get("type") in ("custom_tool_call", "web_search_call"):
            assert json.dumps(item, sort_keys=True) in originals  # as the client sent it
    # the outputs are tool results in the transcript, never the user's words
    assert not [m for m in transcript if m.role == "user" and "patched_" in m.text]
    assert sum(m.role == "tool" and m.name == "apply_patch" for m in transcript) == 10
    assert OpenAIResponses().reply({}, {"output": [text_item("ok")]}).messages


def test_a_stand_in_for_a_structured_output_keeps_the_items_shape() -> None:
    from contextwarden.messages import Message

    (shell, shell_out), (computer, shot) = _call("shell"), _call("computer")
    assert shell_out is not None and shot is not None
    history = [shell, computer, shell_out, shot]
    turn, *outputs = to_messages(history)
    # compaction's stand-ins keep the call id and the name, not what the adapter left on the message
    stand_ins = [
        Message(role="tool", tool_call_id=m.tool_call_id, name=m.name, parts=(TextPart(text="[cleared]"),))
        for m in outputs
    ]
    rendered = _render([turn, *stand_ins], history)
    assert rendered[:2] == [shell, computer]
    assert rendered[2] == {**shell_out, "output": [{**shell_out["output"][0], "stdout": "[cleared]", "stderr": ""}]}
    # a screenshot has no text form: a blank one keeps the item valid, the stand-in follows the outputs
    assert rendered[3] == {**shot, "output": {"type": "computer_screenshot", "image_url": BLANK_SCREENSHOT}}
    assert rendered[4]["role"] == "user" and "[cleared]" in rendered[4]["content"][0]["text"]
    assert len(rendered) == 5


def _screenshot(n: int) -> str:
    """A large, distinct screenshot data URL."""
    return "data:image/png;base64," + base64.b64encode(f"screen {n} ".encode() * 2000).decode()


def _computer_history(rounds: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "book the flight"}]}
    ]
    for n in range(rounds):
        call, output = _call("computer")
        assert output is not None
        output["output"] = {"type": "computer_screenshot", "image_url": _screenshot(n)}
        items += [_reasoning(), call, output]
    return items


def test_a_compacted_view_sends_no_cleared_screenshot_and_keeps_each_computer_call_paired(
    service_factory: Callable[[Settings], Running], sqlite_url: str
) -> None:
    with ResponsesUpstream() as upstream:
        service = service_factory(make_settings(sqlite_url, upstream.base_url, window=16000))
        history = _computer_history(8)
        body = {"model": MODEL, "instructions": "Operate the browser.", "input": history,
                "tools": [{"type": "computer_use_preview", "display_width": 1024, "display_height": 768,
                           "environment": "browser"}]}  # fmt: skip
        r = service.client.post("/v1/responses", json=body, headers={"session-id": "cu"})
        assert r.status_code == 200, r.text
        sent = upstream.requests[-1]["input"]
        session = service.app.state.service.pool.loaded("default", "cu")
    calls = [i["call_id"] for i in sent if i.get("type") == "computer_call"]
    outputs = [i for i in sent if i.get("type") == "computer_call_output"]
    assert calls and calls == [i["call_id"] for i in outputs]  # every call with its output, in order
    blank = [i for i in outputs if i["output"]["image_url"] == BLANK_SCREENSHOT]
    assert blank, "no screenshot was cleared"
    assert outputs[-1]["output"]["image_url"] == _screenshot(7)  # the newest screenshot goes whole
    assert len(json.dumps(sent)) < len(json.dumps(history)) // 2
    for item in blank:  # the stand-in says which snapshot holds the screenshot; read_context returns it
        note = next(i for i in sent if i.get("role") == "user" and repr(item["call_id"]) in json.dumps(i["content"]))
        text = note["content"][0]["text"]
        found = re.search(r"snap_[0-9a-f]+", text)
        assert found and "read_context" in text, text
        original = next(i for i in history if i.get("call_id") == item["call_id"] and i["type"].endswith("_output"))
        kept = session.handle_tool_call("read_context", json.dumps({"ref": found.group(0)}))
        assert kept is not None and original["output"]["image_url"][:400] in kept  # its first page
    # a note never sits between a call's output and the next output of the same turn
    for index, item in enumerate(sent[:-1]):
        if item.get("role") == "user" and index > 0:
            assert sent[index + 1].get("type") != "computer_call_output" or sent[index - 1].get("type") not in (
                "computer_call_output",
            )
