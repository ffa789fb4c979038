"""What the client tests check on the requests that reached the scripted upstream."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ._agent import Record, Sent
from ._dialects import ROUTES, Dialect


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
    """Bytes-level form of a JSON value as parsed (key order kept)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def own_tools(dialect: Dialect, body: Mapping[str, Any]) -> str:
    """The request's tools without the ``read_context`` tool the proxy serves itself."""
    tools = body.get("tools") or []
    names = ((t.get("function") or {}).get("name") if dialect == "chat" else t.get("name") for t in tools)
    return canonical([t for t, name in zip(tools, names, strict=True) if name != "read_context"])


def last_input(dialect: Dialect, body: Mapping[str, Any]) -> str:
    """The newest message (or input item) the client sent: what identifies the request it came from."""
    key = "input" if dialect == "responses" else "messages"
    items = body.get(key)
    if isinstance(items, str):
        return canonical(items)
    return canonical(items[-1]) if items else ""


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
            served = candidates[0]
        elif record.kind != "agent" or served is None:
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
