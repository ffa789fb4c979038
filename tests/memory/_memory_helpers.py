"""Helpers for the memory tests: a settable clock, and a task whose early fact long-term memory must recall."""

from __future__ import annotations

from contextwarden.messages import Message, ToolCall
from contextwarden.session import PreparedView, Session


class Clock:
    """A settable clock."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


WINDOW = 3000
FACT = "SHIP-4471"


def filler(n: int, width: int = 60) -> str:
    return "\n".join(f"line {n}.{i}: " + "lorem ipsum dolor sit amet " * (width // 28) for i in range(14))


def bash_round(n: int, output: str, *, user: str | None = None) -> list[Message]:
    call = ToolCall(call_id=f"call_{n}", name="bash", arguments=f'{{"command": "step {n}"}}')
    head = [Message.user(user)] if user is not None else []
    return [
        *head,
        Message.assistant(f"Running step {n}.", tool_calls=[call]),
        Message.tool_result(call.call_id, output, name="bash"),
    ]


def shipment_history() -> list[list[Message]]:
    """A task whose early output names a shipment id, then enough unrelated rounds to push it out."""
    turns = [
        bash_round(0, f"Shipment {FACT} left the Rotterdam warehouse; carrier: Maersk.", user="Track the parcels."),
        *[bash_round(n, filler(n)) for n in range(1, 30)],
    ]
    turns.append([Message.user("Which shipment id left the Rotterdam warehouse, and with which carrier?")])
    return turns


def memory_blocks(view: list[Message]) -> list[Message]:
    return [m for m in view if m.extra.get("contextwarden") == "memory"]


def run_turns(session: Session, turns: list[list[Message]]) -> list[PreparedView]:
    views = []
    for batch in turns:
        session.add(batch)
        views.append(session.prepare(format="internal"))
    return views
