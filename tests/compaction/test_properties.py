"""Property: any sequence of adds and prepares yields views that fit, keep pairs and the protected
set, start with the system prompt, and leave the transcript unchanged (issue 3, "Done when")."""

from __future__ import annotations

from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings, strategies as st

from contextwarden.compaction.config import CompactionConfig
from contextwarden.exceptions import BudgetExceeded
from contextwarden.messages import Message
from contextwarden.session import AsyncSession, PreparedView, Session

from ._helpers import COUNTER
from ._program import (
    WINDOWS,
    AsyncEchoSummarizer,
    EchoSummarizer,
    Note,
    Overflow,
    Pin,
    Text,
    User,
    build_messages,
    configs,
    ops,
    run_program,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    program=ops,
    window=st.sampled_from(WINDOWS),
    reserved=st.sampled_from([0, 8]),
    config=configs(),
    system=st.integers(0, 2),
    summarize=st.booleans(),
    counter=st.sampled_from([COUNTER, COUNTER, "heuristic"]),
)
def test_any_program_yields_valid_views(
    program: list[Any],
    window: int,
    reserved: int,
    config: CompactionConfig,
    system: int,
    summarize: bool,
    counter: str,
) -> None:
    s = Session(
        window=window,
        reserved_output=window // reserved if reserved else 0,
        counter=counter,
        config=config,
        summarizer=EchoSummarizer() if summarize else None,
    )
    first: list[Message] = [Message.system(f"You are agent {i}. Follow the rules.") for i in range(system)]
    batches = build_messages([User(Text("small", 7, False), False), *program], window)
    run_program(s, [first, *batches] if first else batches)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(program=ops, window=st.sampled_from(WINDOWS[:3]), config=configs())
def test_async_session_gives_the_same_views_as_the_sync_one(
    program: list[Any], window: int, config: CompactionConfig
) -> None:
    batches = build_messages([User(Text("small", 3, False), False), *program], window)
    sync = Session("parity", window=window, counter=COUNTER, config=config, summarizer=EchoSummarizer())
    asyn = AsyncSession("parity", window=window, counter=COUNTER, config=config, summarizer=AsyncEchoSummarizer())

    def sync_views() -> list[Any]:
        out: list[Any] = []
        for batch in batches:
            if isinstance(batch, list):
                sync.add(batch)
                continue
            if isinstance(batch, Pin | Note):
                continue
            try:
                call = sync.on_context_overflow if isinstance(batch, Overflow) else sync.prepare
                out.append(_shape(call(format="internal")))
            except BudgetExceeded as exc:
                out.append(("budget", exc.used, exc.budget))
        return out

    async def async_views() -> list[Any]:
        out: list[Any] = []
        for batch in batches:
            if isinstance(batch, list):
                asyn.add(batch)
                continue
            if isinstance(batch, Pin | Note):
                continue
            try:
                call = asyn.on_context_overflow if isinstance(batch, Overflow) else asyn.prepare
                out.append(_shape(await call(format="internal")))
            except BudgetExceeded as exc:
                out.append(("budget", exc.used, exc.budget))
        return out

    assert sync_views() == anyio.run(async_views)


def _shape(pv: PreparedView) -> tuple[Any, ...]:
    """What must be equal between twins (context-block ids carry the turn, so text is compared)."""
    return (
        tuple((m.role, m.message_id, m.text, m.tool_call_id) for m in pv.view),
        pv.status.used,
        pv.status.layer,
    )
