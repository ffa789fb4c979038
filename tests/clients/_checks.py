"""What the client tests check on the requests that reached the scripted upstream."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ._agent import Record, Sent
from ._dialects import ROUTES, Dialect, issued_reasoning


def pairing_problems(dialect: Dialect, body: Mapping[str, Any]) -> list[str]:
    """Tool results without their call, calls without a result (other than at the end), duplicates."""
    events = list(_pair_events(dialect, body))
    problems: list[str] = []
    open_calls: dict[str, int] = {}
    answered: set[str] = set()
    for position, (kind, call_id) in enumerate(events):
        if kind == "call":
            if call_id in open_calls or call_id in answered:
                problems.append(f"call {call_id} made twice")
            open_calls[call_id] = position
        elif call_id in answered:
            problems.append(f"result {call_id} twice")
        elif call_id not in open_calls:
            problems.append(f"result {call_id} without its call")
        else:
            del open_calls[call_id]
            answered.add(call_id)
    problems += [f"call {call_id} without a result" for call_id in open_calls]
    return problems


def _pair_events(dialect: Dialect, body: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    if dialect == "chat":
        for message in body.get("messages") or []:
            for call in message.get("tool_calls") or []:
                yield "call", str(call.get("id"))
            if message.get("role") == "tool":
                yield "result", str(message.get("tool_call_id"))
    elif dialect == "responses":
        items = body.get("input")
        for item in items if isinstance(items, list) else []:
            if item.get("type") in ("function_call", "custom_tool_call", "local_shell_call"):
                yield "call", str(item.get("call_id"))
            elif item.get("type") in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
                yield "result", str(item.get("call_id"))
    else:
        for message in body.get("messages") or []:
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "tool_use":
                    yield "call", str(block.get("id"))
                elif block.get("type") == "tool_result":
                    yield "result", str(block.get("tool_use_id"))


def _system_kept(dialect: Dialect, client: Mapping[str, Any], upstream: Mapping[str, Any]) -> bool:
    """The client's system prompt (field and leading system messages) opens the upstream request unchanged."""
    field = {"chat": None, "responses": "instructions", "messages": "system"}[dialect]
    if field is not None and canonical(client.get(field)) != canonical(upstream.get(field)):
        return False
    key = "input" if dialect == "responses" else "messages"
    theirs = client.get(key)
    ours = upstream.get(key)
    if not isinstance(theirs, list) or not isinstance(ours, list):
        return not isinstance(theirs, list)  # a string input has no system messages of its own
    leading = 0
    while leading < len(theirs) and theirs[leading].get("role") in ("system", "developer"):
        leading += 1
    return canonical(theirs[:leading]) == canonical(ours[:leading])


def canonical(value: Any) -> str:
    """A JSON value as text: every string and number as sent, objects' keys in sorted order (the order
    of keys is JSON syntax, not content; a key dropped or added is a difference)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def own_tools(dialect: Dialect, body: Mapping[str, Any]) -> str:
    """The request's tools without the ``read_context`` tool the proxy serves itself."""
    tools = body.get("tools") or []
    names = ((t.get("function") or {}).get("name") if dialect == "chat" else t.get("name") for t in tools)
    return canonical([t for t, name in zip(tools, names, strict=True) if name != "read_context"])


def last_input(dialect: Dialect, body: Mapping[str, Any]) -> str:
    """What identifies the newest message (or input item) of a request: the ids of the tool results
    it carries (the proxy may show a long result as a stand-in), else its whole content."""
    key = "input" if dialect == "responses" else "messages"
    items = body.get(key)
    if isinstance(items, str):
        return canonical(items)
    if not items:
        return ""
    ids = [call_id for kind, call_id in _pair_events(dialect, {key: items[-1:]}) if kind == "result"]
    if dialect == "chat" and items[-1].get("role") == "tool":  # a chat turn's results are several messages
        trailing = []
        for message in reversed(items):
            if message.get("role") != "tool":
                break
            trailing.append(str(message.get("tool_call_id")))
        ids = sorted(trailing)
    return "results:" + ",".join(sorted(ids)) if ids else canonical(items[-1])


def client_requests(sent: Sequence[Sent]) -> list[tuple[Dialect, Mapping[str, Any]]]:
    """The model requests among what the client sent (through the tap)."""
    found: list[tuple[Dialect, Mapping[str, Any]]] = []
    for request in sent:
        path = request.path.split("?")[0]
        dialect = next((d for route, d in ROUTES.items() if path.endswith(route)), None)
        if request.method == "POST" and dialect is not None:
            found.append((dialect, json.loads(request.body)))
    return found


def own_content_problems(records: Sequence[Record], sent: Sequence[Sent]) -> list[str]:
    """Each upstream request must carry the system prompt and tools of the client request it serves.

    The client request it serves is the one whose newest message it ends with; the proxy's own
    read-back round trips end with a ``read_context`` result and are matched to the request before.
    """
    by_last: dict[str, list[Mapping[str, Any]]] = {}
    for dialect, body in client_requests(sent):
        by_last.setdefault(last_input(dialect, body), []).append(body)
    problems: list[str] = []
    served: Mapping[str, Any] | None = None
    for number, record in enumerate(records):
        dialect, body = record.request.dialect, record.request.body
        candidates = by_last.get(last_input(dialect, body))
        if candidates:
            # requests sent at once may end alike (a title request repeats the user's prompt): the one served is
            # the one whose system prompt and tools the upstream request carries, if any does
            kept = [
                c
                for c in candidates
                if _system_kept(dialect, c, body) and own_tools(dialect, c) == own_tools(dialect, body)
            ]
            served = (kept or candidates)[0]
        elif record.kind == "side" or served is None:
            problems.append(f"upstream request {number} ({record.kind}) ends with no client request's last message")
            continue
        assert served is not None
        if not _system_kept(dialect, served, body):
            problems.append(f"upstream request {number} ({record.kind}): system prompt differs from the client's")
        if own_tools(dialect, served) != own_tools(dialect, body):
            problems.append(f"upstream request {number} ({record.kind}): tools differ from the client's")
        if served.get("model") != body.get("model"):
            problems.append(f"upstream request {number} ({record.kind}): model {body.get('model')!r}")
    return problems


def _signed_parts(dialect: Dialect, body: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """(key, part) of every signed thinking block and reasoning item in a request."""
    if dialect == "responses":
        items = body.get("input")
        for item in items if isinstance(items, list) else []:
            if item.get("type") == "reasoning":
                yield str(item.get("id") or item.get("encrypted_content")), item
    elif dialect == "messages":
        for message in body.get("messages") or []:
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if block.get("type") in ("thinking", "redacted_thinking"):
                    yield str(block.get("signature") or block.get("data")), block


def signed_parts_changed(records: Sequence[Record], sent: Sequence[Sent]) -> list[str]:
    """Thinking blocks and reasoning items that reached the upstream other than byte for byte as the client sent them
    (those of the proxy's own read-back rounds, which the client never saw, are checked by their signature)."""
    theirs: dict[str, str] = {}
    for dialect, body in client_requests(sent):
        for key, part in _signed_parts(dialect, body):
            theirs[key] = canonical(part)
    changed = []
    for number, record in enumerate(records):
        for key, part in _signed_parts(record.request.dialect, record.request.body):
            # the proxy may send the part as the upstream issued it (the client re-sends it with a key of its own
            # added, Codex a "content": null): both forms carry the provider's signature unchanged
            if key in theirs and canonical(part) not in (theirs[key], _as_issued(part)):
                changed.append(f"upstream request {number}: {canonical(part)[:160]} (client: {theirs[key][:160]})")
    return changed


def _as_issued(part: Mapping[str, Any]) -> str:
    """How the scripted upstream issued a signed part (what the proxy's transcript holds from its reply)."""
    if part.get("type") == "reasoning" and isinstance(part.get("encrypted_content"), str):
        return canonical(issued_reasoning(part["encrypted_content"]))
    return canonical({"type": part.get("type"), "thinking": part.get("thinking"), "signature": part.get("signature")})
