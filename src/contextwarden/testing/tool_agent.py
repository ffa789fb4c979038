"""A long tool-using agent session for `ScriptedOpenAIServer`: the model side, the tool and the checks.

`ToolLoopModel` is a server ``default``: it answers a user request with one ``read_file`` call
(the path named in the request) and a tool result with a short answer, in the OpenAI and the
Anthropic format. `read_file` returns a deterministic source file of about 1,600 characters, so
a session of a few hundred turns overflows any small window. `task` is the user request of turn
``n``; a few turns plant a fact (`PROBES`) that a good context manager keeps reachable to the end.
`broken_pairs` counts the tool-pair problems of a request the server received, and
`probe_retention` the share of planted facts still in a request.

Integration tests, examples and benchmarks all drive the same session with these.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ..messages import ToolCall
from .openai_server import ScriptedReply

__all__ = [
    "PROBES",
    "READ_FILE_TOOL",
    "ToolLoopModel",
    "broken_pairs",
    "probe_retention",
    "prompt_tokens",
    "read_file",
    "task",
]

READ_FILE_TOOL: Mapping[str, Any] = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a source file of the repository.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "Path from the repository root."}},
            "required": ["path"],
        },
    },
}

PROBES: Mapping[int, tuple[str, str]] = {
    2: ("the release branch is named", "rel-ORCHID-7"),
    30: ("the flaky test to skip is", "test_ledger_TAPIR_19"),
    70: ("the on-call reviewer is", "reviewer-MARLIN-42"),
    110: ("the API key to use is stored as", "KEY_QUOKKA_88"),
    150: ("the maximum batch size agreed is", "BATCH_IBIS_256"),
}
"""Turn -> (what the user says, the identifier to remember)."""

_PATH = re.compile(r"[\w./-]+\.py")


def task(turn: int) -> str:
    """The user's request of turn ``turn`` (a fact to remember on the turns of `PROBES`)."""
    text = f"Step {turn}: read src/pkg/module_{turn}.py and tell me what it defines."
    probe = PROBES.get(turn)
    if probe is not None:
        text += f" Remember for later: {probe[0]} {probe[1]}."
    return text


def read_file(path: str) -> str:
    """A deterministic source file of about 1,600 characters for ``path``."""
    seed = hashlib.sha256(path.encode()).hexdigest()
    lines = [f"# {path}", f'"""Module {seed[:8]}: helpers generated for the benchmark."""', ""]
    for i in range(12):
        digest = seed[(i * 5) % 56 : (i * 5) % 56 + 8]
        lines.append(f"def helper_{digest}(value: int) -> int:")
        lines.append(f"    return value * {i + 3} + 0x{digest[:4]}  # step {i}")
        lines.append("")
    return "\n".join(lines)


class ToolLoopModel:
    """A scripted model that reads the file each request names, then answers.

    Use it as ``ScriptedOpenAIServer(default=ToolLoopModel())``. Requests without tools get
    the answer directly. Call ids are numbered, so a run is reproducible.
    """

    def __init__(self, *, tool: str = "read_file", calls_per_request: int = 1) -> None:
        self.tool = tool
        self.calls_per_request = calls_per_request
        """Tool calls made, one after the other, before answering a request (a long run: many)."""
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def __call__(self, body: Mapping[str, Any]) -> ScriptedReply:
        messages = body.get("messages") or []
        request: Mapping[str, Any] = next(
            (m for m in reversed(messages) if m.get("role") == "user" and not _has_tool_result(m)), {}
        )
        done = _calls_since_request(messages)
        if body.get("tools") and request and done < self.calls_per_request:
            paths = _PATH.findall(_text(request.get("content")))
            path = paths[-1] if paths else "README.md"
            if done:
                path = path.replace(".py", f"_part{done}.py")
            with self._lock:
                call_id = f"call_{next(self._ids):05d}"
            arguments = json.dumps({"path": path})
            return ScriptedReply(tool_calls=[ToolCall(call_id=call_id, name=self.tool, arguments=arguments)])
        return ScriptedReply(text="It defines twelve small helper functions; nothing else stands out.")


def _calls_since_request(messages: Sequence[Any]) -> int:
    """Calls made for the newest user request, read from the newest call's path (compaction may
    have taken the earlier calls of a long run out of the view, never the newest)."""
    for m in reversed(messages):
        if m.get("role") == "user" and not _has_tool_result(m):
            return 0
        paths = [_PATH.findall(str(c.get("function", {}).get("arguments", ""))) for c in m.get("tool_calls") or []]
        if isinstance(m.get("content"), list):
            paths += [_PATH.findall(json.dumps(b.get("input"))) for b in m["content"] if b.get("type") == "tool_use"]
        found = [p for group in paths for p in group]
        if found:
            part = re.search(r"_part(\d+)\.py$", found[-1])
            return int(part.group(1)) + 1 if part else 1
    return 0


def _has_tool_result(message: Mapping[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(b.get("text", "")) for b in content if isinstance(b, Mapping))
    return ""


def prompt_tokens(body: Mapping[str, Any]) -> int:
    """A provider-like count of a request's prompt: about four characters of its JSON per token, tools included."""
    size = len(json.dumps(body.get("messages", []))) + len(json.dumps(body.get("tools", [])))
    return size // 4 + len(str(body.get("system", ""))) // 4


def broken_pairs(body: Mapping[str, Any]) -> int:
    """Tool calls without their result and results without their call in a request's messages.

    Works on OpenAI chat requests (``tool_calls`` / ``role: tool``) and Anthropic ones
    (``tool_use`` / ``tool_result`` blocks). A call the last message makes may be pending.
    """
    open_calls: set[str] = set()
    broken = 0
    messages: Sequence[Any] = body.get("messages") or []
    for i, m in enumerate(messages):
        calls = [c.get("id") for c in m.get("tool_calls") or []]
        results = [m.get("tool_call_id")] if m.get("role") == "tool" else []
        if isinstance(m.get("content"), list):
            for block in m["content"]:
                if not isinstance(block, Mapping):
                    continue
                if block.get("type") == "tool_use":
                    calls.append(block.get("id"))
                elif block.get("type") == "tool_result":
                    results.append(block.get("tool_use_id"))
        for r in results:
            if r in open_calls:
                open_calls.discard(r)
            else:
                broken += 1
        if calls:
            if m.get("role") == "assistant" and open_calls:
                broken += len(open_calls)  # a new turn began before the earlier calls were answered
                open_calls.clear()
            if i < len(messages) - 1:
                open_calls.update(c for c in calls if isinstance(c, str))
    return broken + len(open_calls)


def probe_retention(body: Mapping[str, Any], *, before_turn: int) -> float:
    """Share of the facts planted before ``before_turn`` that a request still contains (1.0 when none were)."""
    planted = [fact for turn, (_, fact) in PROBES.items() if turn < before_turn]
    if not planted:
        return 1.0
    text = json.dumps(body)
    return sum(fact in text for fact in planted) / len(planted)
