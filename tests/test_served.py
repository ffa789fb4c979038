"""A session's assumptions before the server told it anything: reply room, counting margin, served window."""

from __future__ import annotations

import pytest

from contextwarden import AsyncSession, Message, Session
from contextwarden.exceptions import ConfigError
from contextwarden.llm import AsyncOpenAIChatModel, ResponseDone
from contextwarden.llm.served_window import ServedWindow
from contextwarden.served import DEFAULT_REPLY_RESERVE, UNKNOWN_MODEL_MARGIN
from contextwarden.testing import ScriptedOpenAIServer


def test_a_window_only_session_reserves_room_for_the_reply() -> None:
    assert Session(window=8192).budget.reserved_output == DEFAULT_REPLY_RESERVE
    assert Session(window=2048).budget.reserved_output == 512  # at most a quarter of the window
    assert Session(window=8192, reserved_output=0).budget.reserved_output == 0


def test_a_guessed_counter_for_an_unknown_model_counts_with_a_margin_until_calibrated() -> None:
    s = Session(window=8192)
    assert s.budget.scale == UNKNOWN_MODEL_MARGIN
    for _ in range(3):
        s.add(Message.user("hello there " * 20))
        s.on_turn_end({"prompt_tokens": s.engine.used()})
    assert s.budget.scale == 1.0  # usage agreed with the counts: the margin is gone
    assert Session(model="gpt-4o").budget.scale == 1.0  # the registry knows it and its tokenizer
    assert Session(window=8192, counter="heuristic").budget.scale == 1.0  # a counter given is trusted


def test_a_served_window_smaller_than_the_configured_one_is_used_from_the_start() -> None:
    s = Session(window=8192, served_window=2048)
    assert s.budget.window == 2048 and s.status().served_window == 2048
    assert Session(served_window=ServedWindow(base_url="", server="vllm", window=4096)).budget.window == 4096
    with pytest.raises(ConfigError, match="base_url"):
        Session(window=8192, served_window="probe")


def test_probe_asks_the_server_for_its_window_and_measures_the_margin_with_its_tokenizer() -> None:
    with ScriptedOpenAIServer.llama_cpp_python(n_ctx=2048) as server:
        s = Session(served_window="probe", base_url=server.base_url, counter="heuristic")
    assert s.served is not None and s.served.server == "llama-cpp-python"
    assert s.budget.window == 2048 and s.budget.reserved_output == 512
    assert 1.0 <= s.accountant.calibration.prior <= 2.0


@pytest.mark.anyio
async def test_async_stream_recovers_from_an_empty_stream_like_the_sync_one() -> None:
    with ScriptedOpenAIServer.llama_cpp_python(n_ctx=2048, default="Fits now.") as server:
        s = AsyncSession(window=8192, counter="heuristic")
        for turn in range(14):
            s.add(Message.user(f"note {turn}: " + "the parser builds a tree of nodes. " * 30))
            s.add(Message.assistant("OK."))
        s.add(Message.user("Summarise."))
        async with AsyncOpenAIChatModel("m", base_url=server.base_url, max_retries=0) as model:
            events = [e async for e in s.stream(model)]
    assert isinstance(events[-1], ResponseDone) and events[-1].response.text == "Fits now."
    assert s.status().served_window == 2048


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
