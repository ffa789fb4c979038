from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Literal

import anyio.to_thread
import pytest

import contextwarden.llm
from contextwarden.llm.base import ModelResponse, ResponseDone, StreamEvent
from contextwarden.messages import Message
from contextwarden.testing import ScriptedOpenAIServer

# No test may reach a paid API; local test servers stay reachable.
# (The lead moves this to tests/conftest.py.)
contextwarden.llm.ALLOW_MODEL_REQUESTS = False

Mode = Literal["sync", "async"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    """A running scripted server with an empty script; tests push what they need."""
    with ScriptedOpenAIServer() as running:
        yield running


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> Mode:
    """Each client test runs once against the sync client and once against the async one."""
    mode: Mode = request.param
    return mode


class Driver:
    """Drives a sync or an async model through one awaitable interface.

    The sync model runs in a worker thread (it blocks); the async one on the test's event loop.
    """

    def __init__(self, mode: Mode, model: Any) -> None:
        self.mode = mode
        self.model = model

    async def request(self, messages: Sequence[Message], **kwargs: Any) -> ModelResponse:
        if self.mode == "sync":
            return await anyio.to_thread.run_sync(lambda: self.model.request(messages, **kwargs))
        return await self.model.request(messages, **kwargs)

    async def stream(self, messages: Sequence[Message], **kwargs: Any) -> list[StreamEvent]:
        if self.mode == "sync":
            return await anyio.to_thread.run_sync(lambda: list(self.model.stream(messages, **kwargs)))
        return [event async for event in self.model.stream(messages, **kwargs)]

    async def stream_until_error(self, messages: Sequence[Message]) -> tuple[list[StreamEvent], BaseException]:
        """The events received before the stream failed, and the error."""
        received: list[StreamEvent] = []

        def consume() -> None:
            for event in self.model.stream(messages):
                received.append(event)

        try:
            if self.mode == "sync":
                await anyio.to_thread.run_sync(consume)
            else:
                async for event in self.model.stream(messages):
                    received.append(event)
        except Exception as exc:
            return received, exc
        raise AssertionError(f"the stream did not fail; events: {received}")

    @staticmethod
    def final(events: Sequence[StreamEvent]) -> ModelResponse:
        """The response of the stream's last event (which must be the only ResponseDone)."""
        assert isinstance(events[-1], ResponseDone), events[-1]
        assert not any(isinstance(e, ResponseDone) for e in events[:-1])
        return events[-1].response

    async def close(self) -> None:
        if self.mode == "sync":
            self.model.close()
        else:
            await self.model.aclose()


@pytest.fixture
async def drivers(mode: Mode) -> Any:
    """``wrap(model) -> Driver`` for the current mode; closes every wrapped model at the end."""
    made: list[Driver] = []

    def wrap(model: Any) -> Driver:
        driver = Driver(mode, model)
        made.append(driver)
        return driver

    yield wrap
    for driver in made:
        await driver.close()
