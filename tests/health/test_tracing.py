"""OpenTelemetry spans: prepare with its compactions as children, model calls with usage, errors."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from contextwarden import AsyncSession, Message, Session
from contextwarden.exceptions import UpstreamError
from contextwarden.health.tracing import AsyncInstrumentedModel, InstrumentedModel, instrument
from contextwarden.llm import AsyncOpenAIChatModel, OpenAIChatModel
from contextwarden.testing import ScriptedError, ScriptedOpenAIServer, ScriptedReply


@pytest.fixture
def spans() -> tuple[InMemorySpanExporter, TracerProvider]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, provider


def _fill(session: Session, turns: int) -> None:
    session.add([Message.system("agent"), Message.user("Read the logs.")])
    for i in range(turns):
        session.add([Message.assistant(f"step {i} " + "reading logs " * 60), Message.user(f"go on {i}")])
        session.prepare()


def test_prepare_spans_with_compaction_children(spans: tuple[InMemorySpanExporter, TracerProvider]) -> None:
    exporter, provider = spans
    session = Session(window=4000, counter="heuristic")
    undo = instrument(session, tracer=provider.get_tracer("test"))
    _fill(session, 30)
    finished = exporter.get_finished_spans()
    prepares = [s for s in finished if s.name == "contextwarden.prepare"]
    compactions = [s for s in finished if s.name == "contextwarden.compaction"]
    assert len(prepares) == 30
    assert compactions, "a 4,000-token window compacts within 30 turns"
    by_id = {s.context.span_id: s for s in prepares}
    for c in compactions:
        assert c.parent is not None and c.parent.span_id in by_id
        attrs = c.attributes or {}
        assert attrs["contextwarden.tokens_after"] <= attrs["contextwarden.tokens_before"]
    last = prepares[-1].attributes or {}
    assert last["contextwarden.turn"] == 30 and last["contextwarden.used"] == session.status().used
    undo()
    session.add([Message.user("more")])
    session.prepare()
    assert len([s for s in exporter.get_finished_spans() if s.name == "contextwarden.prepare"]) == 30


@pytest.mark.anyio
async def test_async_prepare_is_traced(spans: tuple[InMemorySpanExporter, TracerProvider]) -> None:
    exporter, provider = spans
    session = AsyncSession(window=4000, counter="heuristic")
    instrument(session, tracer=provider.get_tracer("test"))
    session.add([Message.system("agent"), Message.user("hi")])
    prepared = await session.prepare()
    (span,) = exporter.get_finished_spans()
    assert span.name == "contextwarden.prepare"
    assert (span.attributes or {})["contextwarden.used"] == prepared.status.used


def test_model_call_spans_carry_usage_and_errors(spans: tuple[InMemorySpanExporter, TracerProvider]) -> None:
    exporter, provider = spans
    script = [ScriptedReply(text="hello", prompt_tokens=12, completion_tokens=3), ScriptedError.server_error(400)]
    with ScriptedOpenAIServer(script) as server, OpenAIChatModel("m", base_url=server.base_url) as inner:
        model = InstrumentedModel(inner, tracer=provider.get_tracer("test"))
        assert model.request([Message.user("hi")]).text == "hello"
        with pytest.raises(UpstreamError):
            model.request([Message.user("again")])
    ok, failed = exporter.get_finished_spans()
    assert ok.name == failed.name == "contextwarden.model_call"
    attrs = ok.attributes or {}
    assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) == (12, 3)
    assert not failed.status.is_ok and failed.events[0].name == "exception"


@pytest.mark.anyio
async def test_async_streamed_model_call_is_one_span(spans: tuple[InMemorySpanExporter, TracerProvider]) -> None:
    exporter, provider = spans
    with ScriptedOpenAIServer([ScriptedReply(text="streamed reply", prompt_tokens=7, completion_tokens=2)]) as server:
        async with AsyncOpenAIChatModel("m", base_url=server.base_url) as inner:
            model = AsyncInstrumentedModel(inner, tracer=provider.get_tracer("test"))
            events = [e async for e in model.stream([Message.user("hi")])]
    assert events
    (span,) = exporter.get_finished_spans()
    assert (span.attributes or {})["contextwarden.stream"] is True
    assert (span.attributes or {})["gen_ai.usage.output_tokens"] == 2
