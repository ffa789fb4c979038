"""OpenTelemetry spans for prepare, compaction and model calls (extra: ``otel``).

    from contextwarden.health.tracing import InstrumentedModel, instrument
    undo = instrument(session)             # spans: contextwarden.prepare > contextwarden.compaction
    model = InstrumentedModel(model)       # span: contextwarden.model_call (tokens, finish reason)

Spans go to the global tracer provider unless a ``tracer`` is given, so an application's own
OpenTelemetry set-up (exporter, sampler) applies. A compaction span is opened by the
``compaction.started`` event and closed by ``compaction.finished``; both are emitted inside
``prepare``, so each compaction span is a child of its prepare span. ``instrument`` wraps the
session's ``prepare`` (sync or async) on that one instance; ``undo()`` restores it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import trace
    from opentelemetry.trace import Span, Status, StatusCode, Tracer
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "contextwarden.health.tracing needs opentelemetry-api: pip install 'contextwarden[otel]'"
    ) from exc

from ..events import CompactionFinished, CompactionStarted, Event

if TYPE_CHECKING:
    from ..llm import AsyncModel, Model, ModelResponse, StreamEvent
    from ..messages import Message
    from ..session import AsyncSession, PreparedView, Session

__all__ = ["AsyncInstrumentedModel", "InstrumentedModel", "instrument"]

_NAME = "contextwarden"


def _tracer(tracer: Tracer | None) -> Tracer:
    return tracer if tracer is not None else trace.get_tracer(_NAME)


def _view_attributes(span: Span, prepared: PreparedView) -> None:
    s = prepared.status
    span.set_attribute("contextwarden.used", s.used)
    span.set_attribute("contextwarden.budget", s.budget)
    span.set_attribute("contextwarden.ratio", s.ratio)
    span.set_attribute("contextwarden.state", s.state)
    span.set_attribute("contextwarden.turn", s.turn)
    span.set_attribute("contextwarden.view_messages", s.view_messages)
    if s.layer is not None:
        span.set_attribute("contextwarden.layer", s.layer)


def instrument(session: Session | AsyncSession, *, tracer: Tracer | None = None) -> Callable[[], None]:
    """Trace ``session``'s prepares and compactions; returns the function that stops it."""
    t = _tracer(tracer)
    open_spans: dict[str, Span] = {}

    def on_event(event: Event) -> None:
        if isinstance(event, CompactionStarted):
            span = t.start_span(f"{_NAME}.compaction")
            span.set_attribute("contextwarden.session_id", event.session_id)
            span.set_attribute("contextwarden.layer", event.layer)
            span.set_attribute("contextwarden.trigger", event.trigger)
            span.set_attribute("contextwarden.tokens_before", event.tokens_before)
            span.set_attribute("contextwarden.target", event.target)
            open_spans[event.layer] = span
        elif isinstance(event, CompactionFinished):
            done = open_spans.pop(event.layer, None)
            if done is not None:
                done.set_attribute("contextwarden.tokens_after", event.tokens_after)
                done.set_attribute("contextwarden.items", event.items)
                done.end()

    unsubscribe = session.events.subscribe(on_event)
    original = session.prepare
    session_id = session.session_id

    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def aprepare(*args: Any, **kwargs: Any) -> PreparedView:
            with t.start_as_current_span(f"{_NAME}.prepare") as span:
                span.set_attribute("contextwarden.session_id", session_id)
                prepared: PreparedView = await original(*args, **kwargs)
                _view_attributes(span, prepared)
                return prepared

        session.prepare = aprepare  # type: ignore[method-assign]
    else:

        @functools.wraps(original)
        def prepare(*args: Any, **kwargs: Any) -> PreparedView:
            with t.start_as_current_span(f"{_NAME}.prepare") as span:
                span.set_attribute("contextwarden.session_id", session_id)
                prepared: PreparedView = original(*args, **kwargs)  # type: ignore[assignment]
                _view_attributes(span, prepared)
                return prepared

        session.prepare = prepare  # type: ignore[method-assign]

    def undo() -> None:
        unsubscribe()
        for span in open_spans.values():
            span.end()
        open_spans.clear()
        session.__dict__.pop("prepare", None)

    return undo


def _response_attributes(span: Span, response: ModelResponse) -> None:
    u = response.usage
    span.set_attribute("gen_ai.usage.input_tokens", u.input_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", u.output_tokens)
    if response.finish_reason is not None:
        span.set_attribute("gen_ai.response.finish_reasons", [response.finish_reason])
    if response.model_name:
        span.set_attribute("gen_ai.response.model", response.model_name)


def _failed(span: Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))


class InstrumentedModel:
    """A `Model` whose requests and streams are ``contextwarden.model_call`` spans."""

    def __init__(self, inner: Model, *, tracer: Tracer | None = None) -> None:
        self.inner = inner
        self.tracer = _tracer(tracer)

    def __getattr__(self, name: str) -> Any:  # everything else is the inner model's
        return getattr(self.inner, name)

    def request(self, messages: Sequence[Message], **kwargs: Any) -> ModelResponse:
        with self.tracer.start_as_current_span(f"{_NAME}.model_call", record_exception=False) as span:
            span.set_attribute("contextwarden.messages", len(messages))
            try:
                response = self.inner.request(messages, **kwargs)
            except Exception as exc:
                _failed(span, exc)
                raise
            _response_attributes(span, response)
            return response

    def stream(self, messages: Sequence[Message], **kwargs: Any) -> Iterator[StreamEvent]:
        from ..llm import ResponseDone

        with self.tracer.start_as_current_span(f"{_NAME}.model_call", record_exception=False) as span:
            span.set_attribute("contextwarden.messages", len(messages))
            span.set_attribute("contextwarden.stream", True)
            try:
                for event in self.inner.stream(messages, **kwargs):
                    if isinstance(event, ResponseDone):
                        _response_attributes(span, event.response)
                    yield event
            except Exception as exc:
                _failed(span, exc)
                raise


class AsyncInstrumentedModel:
    """An `AsyncModel` whose requests and streams are ``contextwarden.model_call`` spans."""

    def __init__(self, inner: AsyncModel, *, tracer: Tracer | None = None) -> None:
        self.inner = inner
        self.tracer = _tracer(tracer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def request(self, messages: Sequence[Message], **kwargs: Any) -> ModelResponse:
        with self.tracer.start_as_current_span(f"{_NAME}.model_call", record_exception=False) as span:
            span.set_attribute("contextwarden.messages", len(messages))
            try:
                response = await self.inner.request(messages, **kwargs)
            except Exception as exc:
                _failed(span, exc)
                raise
            _response_attributes(span, response)
            return response

    async def stream(self, messages: Sequence[Message], **kwargs: Any) -> AsyncIterator[StreamEvent]:
        from ..llm import ResponseDone

        with self.tracer.start_as_current_span(f"{_NAME}.model_call", record_exception=False) as span:
            span.set_attribute("contextwarden.messages", len(messages))
            span.set_attribute("contextwarden.stream", True)
            try:
                async for event in self.inner.stream(messages, **kwargs):
                    if isinstance(event, ResponseDone):
                        _response_attributes(span, event.response)
                    yield event
            except Exception as exc:
                _failed(span, exc)
                raise
