"""Session and AsyncSession: adding, preparing in every format, hooks, bad input."""

from __future__ import annotations

import json
from typing import Any

import pytest

from compaction._helpers import Recorder, check_view, make_text, session, tool_round
from contextwarden import toolpairs
from contextwarden.compaction.config import CompactionConfig
from contextwarden.events import ContextStatus
from contextwarden.exceptions import ConfigError, MessageError, ToolPairError
from contextwarden.messages import Message, TextPart, ToolCall
from contextwarden.session import AsyncSession, Session


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def started(window: int = 3000, **kwargs: Any) -> tuple[Session, Recorder, list[Message]]:
    s, rec = session(window, **kwargs)
    head = [Message.system("You are a travel agent."), Message.user("Book a flight to Lisbon on 2024-06-01.")]
    s.add(head)
    return s, rec, head


# --- construction ----------------------------------------------------------------------------


def test_needs_a_window_or_a_model() -> None:
    with pytest.raises(ConfigError, match="window"):
        Session()
    s = Session(window=10_000, reserved_output=1_000, counter="heuristic")
    assert s.budget.effective == 9_000
    assert s.session_id.startswith("ses_")
    assert Session("mine", window=1000, counter="heuristic").session_id == "mine"


def test_tools_leave_the_budget() -> None:
    tool = {"type": "function", "function": {"name": "search", "description": "Search flights", "parameters": {}}}
    s = Session(window=5000, counter="heuristic", tools=[tool])
    assert 0 < s.budget.tool_schemas < 200
    assert s.budget.effective == 5000 - 1024 - s.budget.tool_schemas  # a window-only session keeps 1,024 for the reply


# --- adding ----------------------------------------------------------------------------------


def test_add_is_idempotent_by_message_id() -> None:
    s, _, head = started()
    assert s.add(head) == 0
    extra = Message.user("and a hotel")
    assert s.add([extra, extra]) == 1
    assert s.transcript == [*head, extra]


def test_add_accepts_provider_dicts_and_single_messages() -> None:
    s = Session(window=3000, counter="heuristic")
    n = s.add(
        [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "w1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}],
            },
        ]
    )
    assert n == 3
    assert s.add({"role": "tool", "tool_call_id": "w1", "content": "sunny, 24°C"}) == 1
    assert [m.role for m in s.transcript] == ["system", "user", "assistant", "tool"]
    assert s.transcript[-1].tool_call_id == "w1"


def test_add_anthropic_input_with_format_override() -> None:
    s = Session(window=3000, counter="heuristic")
    s.add(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "done"}]},
        ],
        format="anthropic",
    )
    roles = [m.role for m in s.transcript]
    assert roles == ["user", "assistant", "tool"]
    assert toolpairs.validate(s.prepare(format="internal").view) == []


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "responses", "langchain", "internal"])
def test_prepare_in_every_format(fmt: str) -> None:
    s, _, _ = started(4000)
    s.add(tool_round("f1", '{"flights": ["TP123", "FR456"]}', name="search", to="LIS"))
    pv = s.prepare(format=fmt)  # type: ignore[arg-type]
    assert isinstance(pv.messages, list) and pv.messages
    if fmt == "internal":
        assert pv.messages == pv.view
    text = json.dumps(pv.messages, default=str)
    assert "TP123" in text and "Lisbon" in text


def test_prepare_format_default_is_the_session_format() -> None:
    s = Session(window=3000, counter="heuristic", format="responses")
    s.add(Message.user("hello"))
    assert s.prepare().messages == [{"type": "message", "role": "user", "content": "hello"}]


def test_converted_output_appends_between_compactions() -> None:
    s, _, _ = started(4000)
    first = s.prepare(format="openai").messages
    s.add(Message.assistant("Looking for flights."))
    second = s.prepare(format="openai").messages
    assert second[: len(first)] == first and len(second) == len(first) + 1
    assert second is not first  # the caller gets its own list
    second.append({"role": "user", "content": "tampered"})
    assert len(s.prepare(format="openai").messages) == len(first) + 1


# --- bad input: typed errors, session unchanged -----------------------------------------------


BAD_BATCHES: dict[str, list[Any]] = {
    "unknown-call": [Message.tool_result("nope", "x")],
    "second-result": [Message.tool_result("c1", "x"), Message.tool_result("c1", "y")],
    "unknown-role": [Message(role="wizard", parts=(TextPart(text="x"),))],  # type: ignore[arg-type]
    "result-without-call-id": [Message(role="tool", parts=(TextPart(text="x"),))],
    "bad-json-arguments": [Message.assistant("", tool_calls=[ToolCall(call_id="z", name="f", arguments="{oops")])],
    "one-call-id-twice": [
        Message.assistant("", tool_calls=[ToolCall(call_id="c9", name="f", arguments="{}")] * 2),
    ],
    "non-text-content": [Message.user(42)],  # type: ignore[arg-type]
    "lone-surrogate": [Message.user("bad \ud800 text")],
    "bad-dict": [{"role": "wizard", "content": "x"}],
    "dict-result-unknown-call": [{"role": "tool", "tool_call_id": "nope", "content": "x"}],
    "not-a-message": ["just a string"],
    "valid-then-invalid": [Message.tool_result("c1", "fine"), Message(role="wizard", parts=())],  # type: ignore[arg-type]
}


@pytest.mark.parametrize("name", list(BAD_BATCHES))
def test_bad_input_raises_a_typed_error_and_leaves_the_session_unchanged(name: str) -> None:
    s, rec, head = started()
    pending = Message.assistant("", tool_calls=[ToolCall(call_id="c1", name="f", arguments="{}")])
    s.add(pending)
    before = s.prepare(format="internal")
    expected = ToolPairError if name in ("unknown-call", "second-result", "one-call-id-twice") else MessageError
    if name == "dict-result-unknown-call":
        expected = ToolPairError
    with pytest.raises(expected) as info:
        s.add(BAD_BATCHES[name])
    assert str(info.value)  # the message names the problem
    assert isinstance(info.value, MessageError)
    assert s.transcript == [*head, pending]
    after = s.prepare(format="internal")
    assert after.view == before.view
    assert all(a is b for a, b in zip(after.view, before.view, strict=True))
    # the session still works
    s.add(Message.tool_result("c1", "ok"))
    assert s.prepare(format="internal").view[-1].text == "ok"


def test_second_result_after_the_first_was_added() -> None:
    s, _, head = started()
    s.add(tool_round("c1", "first"))
    with pytest.raises(ToolPairError) as info:
        s.add(Message.tool_result("c1", "again"))
    assert info.value.call_id == "c1"
    assert len(s.transcript) == len(head) + 2


def test_call_ids_may_be_reused_after_their_result() -> None:
    s, _, added = started()
    for i in range(4):
        batch = tool_round("call_0", f"result {i}")
        s.add(batch)
        added.extend(batch)
    check_view(s, s.prepare(format="internal"), added)


def test_a_raising_subscriber_does_not_break_prepare() -> None:
    s, rec, _ = started(3000, config=CompactionConfig(keep_recent_rounds=1))
    calls = []

    def broken(event: object) -> None:
        calls.append(event)
        raise RuntimeError("subscriber bug")

    s.subscribe(broken)
    for i in range(10):
        s.add(tool_round(f"c{i}", make_text(1500, seed=i)))
        pv = s.prepare(format="internal")
        assert pv.status.used <= pv.status.budget
    assert calls  # it was called, and it raised every time
    assert s.status().subscriber_errors == len(calls)
    assert len(rec.events) == len(calls)  # other subscribers still got every event


def test_unsubscribe() -> None:
    s, _, _ = started()
    got: list[object] = []
    stop = s.subscribe(got.append)
    s.prepare()
    n = len(got)
    stop()
    s.prepare()
    assert n > 0 and len(got) == n


# --- hooks -----------------------------------------------------------------------------------


def test_on_tool_result_adds_json_results() -> None:
    s, _, _ = started()
    s.add(Message.assistant("", tool_calls=[ToolCall(call_id="w", name="weather", arguments='{"city": "Zürich"}')]))
    assert s.on_tool_result("weather", {"temp": 21, "city": "Zürich"}, call_id="w") == 1
    result = s.transcript[-1]
    assert result.role == "tool" and result.tool_call_id == "w" and result.name == "weather"
    assert json.loads(result.text) == {"temp": 21, "city": "Zürich"}
    assert "Zürich" in result.text  # not escaped
    with pytest.raises(ToolPairError):
        s.on_tool_result("weather", "again", call_id="w")
    s.add(Message.assistant("", tool_calls=[ToolCall(call_id="e", name="book", arguments="{}")]))
    s.on_tool_result("book", "Error: sold out", call_id="e", is_error=True)
    assert s.transcript[-1].is_error


def test_on_turn_hooks() -> None:
    s, _, _ = started()
    status = s.on_turn_start()
    assert status.budget == s.budget.effective
    s.prepare()
    s.on_turn_end({"prompt_tokens": s.status().used + 5}, step="searched flights to LIS")
    assert s.accountant.calibration.samples == 1
    s.on_turn_end({"input_tokens": 40})  # Anthropic's name
    assert s.accountant.calibration.samples == 2
    s.on_turn_end(None)
    s.on_turn_end({"prompt_tokens": "garbage"})
    assert s.accountant.calibration.samples == 2
    notes = [e for e in s.ledger.entries if e.kind == "note"]
    assert [n.intention for n in notes] == ["searched flights to LIS"]
    s.on_turn_end(step="payment failed", status="failed")
    assert next(e for e in s.ledger.entries if e.intention == "payment failed").status == "failed"
    assert s.status().hook_errors == 0


def test_pin_keeps_a_message_through_compactions() -> None:
    s, _, head = started(3000, config=CompactionConfig(keep_recent_rounds=1))
    key = Message.user("Remember: the customer's loyalty number is TAP-778812.")
    s.add([key, Message.assistant("Noted.")])
    s.pin(key.message_id)
    assert s.transcript[2].pinned and s.transcript[2].message_id == key.message_id
    s.add(Message.user("Now search."))
    for i in range(12):
        s.add(tool_round(f"c{i}", make_text(1500, seed=i)))
        pv = s.prepare(format="internal")
    assert pv.status.compactions
    assert any(m.message_id == key.message_id for m in pv.view)
    with pytest.raises(MessageError):
        s.pin("msg_missing")


def test_pinned_on_arrival() -> None:
    s, _, _ = started(3000, config=CompactionConfig(keep_recent_rounds=1))
    key = Message.user("Constraint: budget EUR 400.", pinned=True)
    s.add([key, Message.assistant("ok"), Message.user("go on")])
    for i in range(12):
        s.add(tool_round(f"c{i}", make_text(1500, seed=i)))
        pv = s.prepare(format="internal")
    assert key in pv.view


# --- async twin ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_async_session_prepare_and_overflow() -> None:
    s = AsyncSession(window=3000, counter="tiktoken:cl100k_base", config=CompactionConfig(keep_recent_rounds=1))
    s.add([Message.system("sys"), Message.user("go")])
    for i in range(10):
        s.add(tool_round(f"c{i}", make_text(1500, seed=i)))
        pv = await s.prepare(format="internal")
        assert pv.status.used <= pv.status.budget
    deeper = await s.on_context_overflow(format="openai")
    assert deeper.status.used < pv.status.used or deeper.status.used <= 0.35 * 3000
    assert isinstance(deeper.messages[0], dict)


class CountingCounter:
    """A heuristic-like counter that records every text it is asked to count."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    @property
    def name(self) -> str:
        return "counting-test"

    def count_text(self, text: str) -> int:
        self.texts.append(text)
        return len(text) // 4 + 1


def test_a_turn_without_compaction_tokenizes_only_the_new_messages() -> None:
    counter = CountingCounter()
    s = Session(window=200_000, counter=counter)
    s.add([Message.system("You are a travel agent."), Message.user("Find me a flight.")])
    s.prepare()
    for i in range(30):
        before = len(counter.texts)
        batch = tool_round(f"c{i}", make_text(800, seed=i), name="search", q=f"leg {i}")
        s.add(batch)
        added = counter.texts[before:]
        # the assistant call (its name and arguments) and the result: nothing older is counted again
        assert set(added) <= {"search", batch[0].tool_calls[0].arguments, batch[1].text}
        before = len(counter.texts)
        pv = s.prepare(format="internal")
        # preparing a view that only appends counts no message again (what it may count is the
        # stand-ins a long turn prepares ahead of a compaction)
        transcript_texts = {t for m in s.transcript for t in (m.text, *(c.arguments for c in m.tool_calls))}
        assert not transcript_texts & set(counter.texts[before:])
        assert pv.status.layer is None


def test_ledger_notes_between_compactions_do_not_change_the_cached_prefix() -> None:
    s, _, _ = started(8000)
    prev = s.prepare(format="internal")
    for i in range(6):
        s.on_turn_start()
        batch = tool_round(f"c{i}", make_text(600, seed=i))
        s.add(batch)
        s.on_turn_end({"prompt_tokens": prev.status.used}, step=f"searched leg {i}")
        pv = s.prepare(format="internal")
        assert pv.view[: len(prev.view)] == prev.view and pv.view[len(prev.view) :] == batch
        prev = pv


def test_the_transcript_property_is_a_copy() -> None:
    s, _, head = started()
    t = s.transcript
    t.clear()
    assert s.transcript == head


@pytest.mark.parametrize("with_store", [False, True])
def test_a_session_is_freed_with_its_last_reference_without_the_cycle_collector(
    with_store: bool, tmp_path: Any
) -> None:
    # a service caches many sessions: one that needs the full garbage collector to be freed makes
    # the process pause for it (the engine must not hold its session strongly)
    import gc
    import weakref

    from contextwarden.stores import open_store

    store = open_store(f"sqlite:///{tmp_path}/s.db") if with_store else None
    gc.disable()
    try:
        s = Session("ses_freed", window=8000, store=store)
        s.add([Message.system("You are careful."), Message.user("hi")])
        s.prepare()
        engine = weakref.ref(s.engine)
        ref = weakref.ref(s)
        del s
        assert ref() is None and engine() is None
    finally:
        gc.enable()
        if store is not None:
            store.close()


# --- the status of a prepared view -----------------------------------------------------------


def test_a_prepared_views_status_is_the_one_of_its_turn_even_when_read_later() -> None:
    s, _, _ = started(window=100_000)
    first = s.prepare(format="internal")
    s.add([Message.assistant("Found two flights."), Message.user("Take the earlier one " + make_text(50, seed=3))])
    second = s.prepare(format="internal")
    # read only now, after the second turn: each still reports its own turn
    assert (first.status.turn, second.status.turn) == (1, 2)
    assert first.status.view_messages == 2 and second.status.view_messages == 4
    assert first.status.used < second.status.used == s.status().used
    assert first.status.breakdown["history"] == first.status.used_raw - first.status.breakdown["system"]
    assert first.status is first.status  # computed once


def test_a_status_subscriber_gets_the_same_status_the_prepared_view_reports() -> None:
    s, _, _ = started(window=100_000)
    seen: list[ContextStatus] = []
    s.subscribe(lambda e: seen.append(e) if isinstance(e, ContextStatus) else None)
    pv = s.prepare(format="internal")
    assert [(e.used, e.ratio, e.state, e.turn) for e in seen] == [
        (pv.status.used, pv.status.ratio, pv.status.state, pv.status.turn)
    ]


def test_a_session_takes_the_store_of_its_kind(tmp_path: Any) -> None:
    import anyio

    from contextwarden.stores import AsyncSqliteStore, SqliteStore

    sync_store = SqliteStore.connect(tmp_path / "sync.db")
    async_store = AsyncSqliteStore.connect(tmp_path / "async.db")
    try:
        with pytest.raises(ConfigError, match="Session needs a sync store"):
            Session("s", window=4000, store=async_store)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="AsyncSession needs an async store"):
            AsyncSession("s", window=4000, store=sync_store)  # type: ignore[arg-type]
        assert Session("s", window=4000, store=sync_store).store is sync_store
    finally:
        sync_store.close()
        anyio.run(async_store.aclose)
