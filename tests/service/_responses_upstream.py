"""A real local HTTP server answering OpenAI Responses requests from a script (the tests' upstream).

Each ``POST /v1/responses`` takes the next list of output items (default: one assistant message
"ok"; a function of the request body returns the list) and answers with a response object, or,
for ``stream: true``, with Responses stream events (``response.created``,
``response.output_item.added``, text and argument deltas, ``response.output_item.done``,
``response.completed``).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Output = list[dict[str, Any]] | Callable[[dict[str, Any]], list[dict[str, Any]]]


def text_item(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{uuid.uuid4().hex[:12]}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def call_item(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{uuid.uuid4().hex[:12]}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


class ResponsesUpstream:
    """The scripted server: ``push`` output item lists; ``requests`` holds the bodies received."""

    def __init__(self) -> None:
        self.script: deque[Output] = deque()
        self.requests: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                owner.requests.append(body)
                output = owner.script.popleft() if owner.script else [text_item("ok")]
                if callable(output):
                    output = output(body)
                response = {
                    "id": f"resp_{uuid.uuid4().hex[:12]}",
                    "object": "response",
                    "status": "completed",
                    "model": body.get("model"),
                    "output": output,
                    "usage": {"input_tokens": 50, "output_tokens": 5, "input_tokens_details": {"cached_tokens": 0}},
                }
                if not body.get("stream"):
                    data = json.dumps(response).encode()
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                events: list[dict[str, Any]] = [
                    {"type": "response.created", "response": {**response, "status": "in_progress", "output": []}}
                ]
                for index, item in enumerate(output):
                    events.append({"type": "response.output_item.added", "output_index": index, "item": item})
                    if item["type"] == "message":
                        text = item["content"][0]["text"]
                        events += [
                            {"type": "response.output_text.delta", "output_index": index, "delta": text[i : i + 3]}
                            for i in range(0, len(text), 3)
                        ]
                    elif item["type"] == "function_call":
                        events.append(
                            {
                                "type": "response.function_call_arguments.delta",
                                "output_index": index,
                                "delta": item["arguments"],
                            }
                        )
                    events.append({"type": "response.output_item.done", "output_index": index, "item": item})
                events.append({"type": "response.completed", "response": response})
                for event in events:
                    self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
                    self.wfile.flush()
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def push(self, *outputs: Output) -> None:
        self.script.extend(outputs)

    def __enter__(self) -> ResponsesUpstream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
