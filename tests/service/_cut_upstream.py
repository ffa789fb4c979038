"""An upstream that streams a whole reply in each dialect, or cuts it after a number of events.

Each dialect's stream is the one its provider sends (chat completion chunks ending with
``[DONE]``; Anthropic's ``message_start`` ... ``message_stop``; Responses events from
``response.created`` to ``response.completed``, each with its sequence number), so the official
SDKs read it as they read the provider's. A cut either ends the body cleanly after the events
sent (``ends``) or drops the connection in the middle of a body announced longer (``drops``).
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ._raw_upstream import RawAnswer, RawUpstream

MODEL = "scripted-model"
REPLY = "The parser builds a tree of nodes and the checker walks it."
PIECES = [REPLY[i : i + 12] for i in range(0, len(REPLY), 12)]

How = Literal["ends", "drops"]


def _sse(data: dict[str, Any] | str, name: str | None = None) -> bytes:
    head = f"event: {name}\n" if name else ""
    body = data if isinstance(data, str) else json.dumps(data)
    return f"{head}data: {body}\n\n".encode()


def chat_events(serial: int = 0) -> list[bytes]:
    base = {"id": f"chatcmpl-cut{serial}", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": MODEL}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    usage = {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}
    return [
        chunk({"role": "assistant", "content": ""}),
        *(chunk({"content": piece}) for piece in PIECES),
        chunk({}, "stop"),
        _sse({**base, "choices": [], "usage": usage}),
        _sse("[DONE]"),
    ]


def messages_events(serial: int = 0) -> list[bytes]:
    message: dict[str, Any] = {
        "id": f"msg_cut{serial}",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 30, "output_tokens": 1},
    }

    def event(name: str, **data: Any) -> bytes:
        return _sse({"type": name, **data}, name)

    return [
        event("message_start", message=message),
        event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        *(event("content_block_delta", index=0, delta={"type": "text_delta", "text": p}) for p in PIECES),
        event("content_block_stop", index=0),
        event("message_delta", delta={"stop_reason": "end_turn", "stop_sequence": None}, usage={"output_tokens": 12}),
        event("message_stop"),
    ]


def responses_events(serial: int = 0) -> list[bytes]:
    """A Responses stream; ``serial`` makes its ids its own (an upstream never repeats an item id)."""
    response = {
        "id": f"resp_cut{serial}",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "in_progress",
        "model": MODEL,
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    item = {"type": "message", "id": f"msg_cut{serial}", "role": "assistant", "status": "in_progress", "content": []}
    part = {"type": "output_text", "text": "", "annotations": []}
    done_part = {**part, "text": REPLY}
    done_item = {**item, "status": "completed", "content": [done_part]}
    usage = {
        "input_tokens": 30,
        "output_tokens": 12,
        "total_tokens": 42,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }
    where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": response},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.content_part.added", **where, "part": part},
        *({"type": "response.output_text.delta", **where, "delta": p, "logprobs": []} for p in PIECES),
        {"type": "response.output_text.done", **where, "text": REPLY, "logprobs": []},
        {"type": "response.content_part.done", **where, "part": done_part},
        {"type": "response.output_item.done", "output_index": 0, "item": done_item},
        {
            "type": "response.completed",
            "response": {**response, "status": "completed", "output": [done_item], "usage": usage},
        },
    ]
    return [_sse({**e, "sequence_number": n}, str(e["type"])) for n, e in enumerate(events)]


@dataclass(frozen=True)
class Wire:
    """One dialect: its route, a request for a history, its stream and where the reply is whole."""

    path: str
    request: Callable[[list[dict[str, Any]]], dict[str, Any]]
    events: Callable[[int], list[bytes]]
    """The whole stream of the n-th reply."""
    whole_after: int
    """Events after which the reply is whole without its end marker (its finish reason came)."""


WIRES = {
    "chat": Wire(
        "/v1/chat/completions",
        lambda history: {"model": MODEL, "messages": history, "stream": True},
        chat_events,
        len(PIECES) + 2,
    ),
    "messages": Wire(
        "/v1/messages",
        lambda history: {"model": MODEL, "max_tokens": 100, "messages": history, "stream": True},
        messages_events,
        len(PIECES) + 4,
    ),
    "responses": Wire(
        "/v1/responses",
        lambda history: {"model": MODEL, "input": history, "store": False, "stream": True},
        responses_events,
        len(PIECES) + 7,  # only response.completed, the last event, makes it whole
    ),
}


class CutUpstream:
    """A raw upstream streaming ``wire``'s reply; ``cut(after, how)`` cuts the next stream after ``after`` events."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self.cuts: deque[tuple[int, How]] = deque()
        self.served = 0
        self._lock = threading.Lock()
        self._raw = RawUpstream(self._answer)

    @property
    def base_url(self) -> str:
        return self._raw.base_url

    def cut(self, after: int, how: How) -> None:
        self.cuts.append((after, how))

    def _answer(self, path: str, body: bytes) -> RawAnswer:
        with self._lock:
            self.served += 1
            serial = self.served
            cut = self.cuts.popleft() if self.cuts else None
        events = self.wire.events(serial)
        headers = {"content-type": "text/event-stream"}
        if cut is None:
            return 200, headers, events
        after, how = cut
        if how == "drops":  # the body announced is the whole stream: the connection closes before its end
            headers["content-length"] = str(len(b"".join(events)))
        return 200, headers, events[:after]

    def __enter__(self) -> CutUpstream:
        self._raw.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._raw.__exit__(*exc)
