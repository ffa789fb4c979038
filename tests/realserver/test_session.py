"""`Session.complete()` and `Session.stream()` against the real server, window configured at 4× the served one.

Each scenario grows one conversation for 40 turns (about 250 tokens of user text per turn, and in
the tool variants an assistant tool call and its result before it); a turn is good when the
session got a reply whose prompt fit the served window.
"""

from __future__ import annotations

import json
import time
from typing import Literal

import pytest

from contextwarden import Message, Session
from contextwarden.exceptions import ContextWardenError
from contextwarden.llm import OpenAIChatModel, ResponseDone, TextDelta
from contextwarden.messages import ToolCall

from .conftest import N_CTX, full_size_only, note, record, turns

pytestmark = pytest.mark.llama_server

TURNS = turns(40)
REPLY_TOKENS = 48


def _session() -> Session:
    s = Session(window=4 * N_CTX, counter="tiktoken:cl100k_base", max_tokens=REPLY_TOKENS)
    s.add([Message.system("You are a terse assistant.")])
    return s


def _grow(s: Session, turn: int, *, tool_text: bool | None) -> None:
    if tool_text is not None:
        call = ToolCall(call_id=f"call_{turn}", name="read_file", arguments=json.dumps({"path": f"src/m{turn}.py"}))
        s.add(Message.assistant("Reading the file." if tool_text else "", tool_calls=[call]))
        s.add(Message.tool_result(call.call_id, f"def f{turn}(x):\n    return x * {turn}\n" * 6, name="read_file"))
    s.add(Message.user(note(turn)))


@pytest.mark.parametrize(
    ("mode", "tools"),
    [
        ("complete", "without-text"),
        ("stream", "none"),
        pytest.param("complete", "none", marks=full_size_only),
        pytest.param("complete", "with-text", marks=full_size_only),
        pytest.param("stream", "with-text", marks=full_size_only),
        pytest.param("stream", "without-text", marks=full_size_only),
    ],
)
def test_a_conversation_past_the_served_window_keeps_working(
    llama_server: str, mode: Literal["complete", "stream"], tools: str
) -> None:
    started = time.monotonic()
    s = _session()
    ok, failures = 0, []
    tool_text = {"none": None, "with-text": True, "without-text": False}[tools]
    with OpenAIChatModel("smollm2", base_url=llama_server, timeout=300, max_retries=0) as model:
        for turn in range(TURNS):
            _grow(s, turn, tool_text=tool_text)
            try:
                if mode == "complete":
                    reply = s.complete(model)
                else:
                    events = list(s.stream(model))
                    assert isinstance(events[-1], ResponseDone)
                    reply = events[-1].response
                    assert reply.text == "".join(e.text for e in events if isinstance(e, TextDelta))
            except ContextWardenError as exc:
                failures.append(f"turn {turn}: {type(exc).__name__}: {exc}"[:300])
                continue
            if not reply.usage.reported or reply.usage.input_tokens < N_CTX:
                ok += 1
    status = s.status()
    record(
        f"session.{mode}.tools-{tools}",
        ok,
        TURNS,
        seconds=time.monotonic() - started,
        window=4 * N_CTX,
        served_window=status.served_window,
        calibration=status.calibration,
        counted=s.served_counts.taken,
        failures=failures[:3],
    )
    assert ok == TURNS, failures[:3]
    if mode == "stream" and TURNS >= 3:  # no usage in this server's streams: its token count calibrates
        assert s.served_counts.taken >= 3 and status.calibration != 1.0, s.accountant.calibration
    if TURNS >= 10:  # ten notes are past the served window: the session met a refusal and adopted it
        assert status.served_window == N_CTX


def test_probe_finds_the_served_window_and_a_session_that_sets_nothing_fits_from_the_first_turn(
    llama_server: str,
) -> None:
    started = time.monotonic()
    s = Session(served_window="probe", base_url=llama_server, max_tokens=REPLY_TOKENS)
    assert s.served is not None and s.served.window == N_CTX and s.budget.window == N_CTX
    assert s.accountant.calibration.prior > 1.0  # measured with the server's own tokenizer
    ok = 0
    with OpenAIChatModel("smollm2", base_url=llama_server, timeout=300, max_retries=0) as model:
        for turn in range(10):
            s.add(Message.user(note(turn)))
            s.complete(model)
            ok += 1
    record("session.probe", ok, 10, seconds=time.monotonic() - started, prior=s.accountant.calibration.prior)
    assert ok == 10
