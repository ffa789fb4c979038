"""The cascade table: utilization decides which layers a compaction uses, and when delegation runs.

Clearing of used and old tool outputs, eviction by age tiers, the summary layer, and delegation of
sub-tasks the caller marked delegable.
"""

from __future__ import annotations

import anyio
import pytest

from contextwarden.compaction.config import DEFAULT_CASCADE, CompactionConfig
from contextwarden.events import DelegationFinished
from contextwarden.exceptions import ConfigError
from contextwarden.llm import AsyncTestModel, OpenAIChatModel, TestModel
from contextwarden.messages import Message, ToolCall
from contextwarden.session import AsyncSession, Session
from contextwarden.summarize.base import SummaryRequest
from contextwarden.testing import ScriptedOpenAIServer
from contextwarden.tokens import get_counter

from ._helpers import COUNTER, Recorder, make_text, session, tool_round

CL100K = get_counter(COUNTER)


def tokens(text: str) -> int:
    return CL100K.count_text(text)


def text_of(n_tokens: int, seed: int) -> str:
    """About ``n_tokens`` of English-like text (a few percent either way)."""
    text = make_text(n_tokens * 4, seed=seed)
    while tokens(text) < n_tokens:
        text += " " + make_text(40, seed=seed + 1)
    return text


def layers_run(rec: Recorder, since: int) -> list[str]:
    return [e.layer for e in rec.since(since, "compaction.started")]


# --- the table ------------------------------------------------------------------------------------


def test_default_table_gates_the_layers_by_name() -> None:
    config = CompactionConfig()
    assert dict(config.cascade) == {"clear": 0.75, "evict": 0.85, "summarize": 0.92, "delegation": 0.95}
    assert [config.gate(s) for s in ("clear", "evict", "summarize", "delegation")] == [0.75, 0.85, 0.92, 0.95]
    assert (config.tool_result_min_tokens, config.progressive_line_after) == (500, 20)
    seed = CompactionConfig.profile("seed")
    assert (seed.gate("clear"), seed.gate("evict"), seed.gate("summarize")) == (0.70, 0.70, 0.90)


def test_a_partial_table_keeps_the_other_defaults_and_round_trips() -> None:
    config = CompactionConfig.from_dict({"cascade": {"delegation": 0.9}, "tool_result_min_tokens": 800})
    assert dict(config.cascade) == {**DEFAULT_CASCADE, "delegation": 0.9}
    assert CompactionConfig.from_dict(config.to_dict()) == config
    seed = CompactionConfig.from_dict({"profile": "seed", "cascade": {"summarize": 0.8}})
    assert (seed.gate("clear"), seed.gate("summarize")) == (0.70, 0.8)
    # built directly, a partial table falls back to the defaults too
    assert CompactionConfig(cascade={"evict": 0.5}).gate("summarize") == 0.92


def test_the_seed_designs_strategy_names_are_read_as_layer_names() -> None:
    config = CompactionConfig.from_dict({"cascade": {"tool-results": 0.6, "progressive": 0.7, "conversation": 0.8}})
    assert dict(config.cascade) == {"clear": 0.6, "evict": 0.7, "summarize": 0.8, "delegation": 0.95}
    assert config.to_dict()["cascade"] == dict(config.cascade)
    seed = CompactionConfig.from_dict({"profile": "seed", "cascade": {"conversation": 0.8}})
    assert seed.gate("summarize") == 0.8
    assert CompactionConfig(cascade={"progressive": 0.5}).gate("evict") == 0.5
    with pytest.raises(ConfigError, match="cascade"):
        CompactionConfig.from_dict({"cascade": {"clear": 0.6, "tool-results": 0.7}})


@pytest.mark.parametrize(
    ("data", "names"),
    [
        ({"cascade": {"summaries": 0.9}}, "summaries"),
        ({"cascade": {"evict": 0.0}}, "cascade.evict"),
        ({"cascade": {"progressive": "high"}}, "cascade.evict"),
        ({"cascade": {"delegation": True}}, "cascade.delegation"),
        ({"cascade": [0.75, 0.85]}, "cascade"),
        ({"tool_result_min_tokens": 0}, "tool_result_min_tokens"),
        ({"progressive_line_after": 3, "clear_after_rounds": 5}, "progressive_line_after"),
    ],
)
def test_bad_tables_name_the_key_and_the_fix(data: dict[str, object], names: str) -> None:
    with pytest.raises(ConfigError) as info:
        CompactionConfig.from_dict(data)
    assert names in str(info.value)
    assert "allowed" in str(info.value)


# --- utilization picks the layers ---------------------------------------------------------------

GATED = CompactionConfig(high_water=0.75, low_water=0.4, keep_recent_rounds=1, clear_after_rounds=1)


def fill_until(s: Session, ratio: float, *, make: object, start: int = 0) -> int:
    """Add rounds from ``make(i)`` one at a time, preparing after each, until a prepare sees ``ratio``."""
    i = start
    while s.status().ratio < ratio:
        s.add(make(i))  # type: ignore[operator]
        i += 1
    return i


def test_only_clearing_runs_below_the_evict_gate() -> None:
    s, rec = session(10_000, config=GATED)
    s.add([Message.system("You are a data agent."), Message.user("Collect the reports.")])
    i = 0
    while True:  # 700-token outputs: the first compaction starts between 0.75 and 0.85
        s.add(tool_round(f"c{i}", text_of(700, seed=i)))
        i += 1
        mark = rec.mark()
        pv = s.prepare(format="internal")
        if rec.since(mark, "compaction.started"):
            break
    assert 0.75 <= s.engine._pre_ratio < 0.85
    assert layers_run(rec, mark) == ["clear"]
    assert pv.status.layer == "clear"
    assert pv.status.used <= 0.4 * pv.status.budget  # clearing alone reached the target
    assert all(r.state != "evicted" for r in s.engine.rounds)


def small_round(i: int) -> list[Message]:
    # outputs below min_clear_tokens: clearing cannot help, only eviction can
    return tool_round(f"c{i}", f"row {i}: status ok, value {i * 7}", item=f"item-{i}")


def test_a_held_compaction_waits_for_the_next_gate_instead_of_running_every_turn() -> None:
    s, rec = session(3_000, config=GATED)
    s.add([Message.system("You are a data agent."), Message.user("Check every row.")])
    i = fill_until(s, 0.75, make=small_round)
    mark = rec.mark()
    s.prepare()  # starts at >= 0.75: clearing may run, eviction is held (progressive: 0.85)
    assert "evict" not in layers_run(rec, mark)
    assert s.status().ratio > 0.75  # held above high water
    held = rec.mark()
    while s.status().ratio < 0.84:
        s.add(small_round(i))
        i += 1
        s.prepare()
    assert rec.since(held, "compaction.started") == []  # no retry on every turn below the next gate
    i = fill_until(s, 0.85, make=small_round, start=i)
    mark = rec.mark()
    pv = s.prepare()
    assert "evict" in layers_run(rec, mark)
    assert pv.status.used <= 0.4 * pv.status.budget


class CountingSummarizer:
    def __init__(self) -> None:
        self.calls = 0

    def summarize(self, request: SummaryRequest) -> str:
        self.calls += 1
        return f"Checked {len(request.messages)} messages of rows; all ok."


@pytest.mark.parametrize(("gate", "summarized"), [(0.95, False), (0.8, True)])
def test_the_summary_layer_runs_from_its_gate(gate: float, summarized: bool) -> None:
    config = CompactionConfig(
        high_water=0.75,
        low_water=0.4,
        keep_recent_rounds=1,
        clear_after_rounds=1,
        cascade={"clear": 0.75, "evict": 0.75, "summarize": gate},
    )
    summarizer = CountingSummarizer()
    s = Session(window=3_000, counter=COUNTER, config=config, summarizer=summarizer)
    s.add([Message.system("You are a data agent."), Message.user("Check every row.")])
    i = fill_until(s, 0.86, make=small_round)
    pv = s.prepare()
    assert s.engine._pre_ratio < 0.95
    assert pv.status.compactions.get("evict") == 1
    assert (summarizer.calls > 0) is summarized
    assert ("summarize" in pv.status.compactions) is summarized
    assert i > 0


def test_a_view_that_would_not_fit_may_use_every_layer() -> None:
    # every gate above 1: a compaction is still allowed everything once the view would not fit
    config = CompactionConfig(cascade={"clear": 2.0, "evict": 2.0, "summarize": 2.0})
    s, rec = session(3_000, config=config)
    s.add([Message.system("You are a data agent."), Message.user("Check every row.")])
    for i in range(250):
        s.add(small_round(i))
        pv = s.prepare(format="internal")
        assert pv.status.used <= pv.status.budget
    assert "evict" in [e.layer for e in rec.of("compaction.started")]


# --- tool-result summarization ---------------------------------------------------------------------


def test_large_used_outputs_are_summarized_whatever_their_age() -> None:
    def add_rounds(s: Session) -> list[list[Message]]:
        s.add([Message.system("You are a data agent."), Message.user("Load the three tables.")])
        rounds = [
            tool_round("c0", text_of(800, seed=1)),  # large and used: the next call answered to it
            tool_round("c1", text_of(300, seed=2)),  # used, but below tool_result_min_tokens
            tool_round("c2", text_of(800, seed=3)),  # large, but nothing answered to it yet
        ]
        s.add([*rounds[0], *rounds[1], *rounds[2], Message.user("Now compare them.")])
        return rounds

    probe = Session(window=100_000, counter=COUNTER)
    add_rounds(probe)
    config = CompactionConfig(
        low_water=0.05,
        min_low_water=0.05,
        reactive_low_water=0.05,
        layers=("clear",),
        keep_recent_rounds=1,
        clear_after_rounds=10,  # too young for age-based clearing: only the size-and-use rule applies
    )
    s, _ = session(probe.status().used - 50, config=config)
    rounds = add_rounds(s)
    pv = s.prepare(format="internal")
    shown = {m.tool_call_id: m for m in pv.view if m.role == "tool"}
    assert shown["c0"] is not rounds[0][1]
    assert shown["c0"].snapshot_id is not None and "read_context(" in shown["c0"].text  # key findings + reference
    assert shown["c1"] is rounds[1][1]
    assert shown["c2"] is rounds[2][1]
    assert rounds[0][1].text[:200] in s.read_context(shown["c0"].snapshot_id)


# --- progressive tiers ------------------------------------------------------------------------------


def add_referenced_rounds(s: Session) -> None:
    """An old round whose id later messages keep using (lru keeps it), and younger rounds nobody uses."""
    s.add([Message.system("You are a data agent."), Message.user("Track order ORD-7731.")])
    s.add(tool_round("c0", "ORD-7731 found in warehouse WH-12. " + text_of(200, seed=0), item="ORD-7731"))
    for i in range(1, 6):
        s.add(tool_round(f"c{i}", f"unrelated row {i}. " + text_of(200, seed=i), item=f"misc-{i}"))
    s.add(Message.user("Where is ORD-7731 now?"))


def evicted_calls(line_after: int) -> set[str]:
    probe = Session(window=100_000, counter=COUNTER)
    add_referenced_rounds(probe)
    used = probe.status().used
    window = used - 20  # just over: one compaction, which must shed about three rounds
    config = CompactionConfig(
        eviction_policy="lru",
        keep_recent_rounds=1,
        clear_after_rounds=1,
        progressive_line_after=line_after,
        layers=("evict",),
        low_water=(used - 600) / window,
    )
    s = Session(window=window, counter=COUNTER, config=config)
    add_referenced_rounds(s)
    s.prepare()
    return {
        s.transcript[r.indices[0]].tool_calls[0].call_id
        for r in s.engine.rounds
        if r.state == "evicted" and s.transcript[r.indices[0]].tool_calls
    }


def test_progressive_tiers_evict_the_oldest_tier_before_the_policy_order() -> None:
    by_policy = evicted_calls(line_after=100)
    assert by_policy and "c0" not in by_policy  # lru: the old round is still referenced
    assert "c0" in evicted_calls(line_after=2)  # past the one-line tier it goes first


# --- delegation --------------------------------------------------------------------------------------


def full_session(model_window: int = 2_000, **config: object) -> Session:
    s = Session(window=model_window, counter=COUNTER, config=CompactionConfig(**config))  # type: ignore[arg-type]
    s.add([Message.system("You are the lead agent."), Message.user("Fix the login bug.")])
    i = 0
    while s.status().ratio < 0.95:
        s.add([Message.assistant(f"step {i}: " + text_of(20, seed=i)), Message.user(f"go on {i}")])
        i += 1
    assert s.status().ratio <= 1.0
    return s


def test_marked_sub_tasks_wait_below_the_delegation_threshold() -> None:
    s = Session(window=20_000, counter=COUNTER)
    s.add([Message.system("You are the lead agent."), Message.user("Fix the login bug.")])
    s.mark_delegable("Find where sessions expire.", "The code base is a Flask app.")
    model = TestModel(["I will look at app/auth.py."])
    s.complete(model)
    assert len(s.pending_delegations) == 1
    assert len(model.requests) == 1
    assert not any(c.name == "delegate" for m in s.transcript for c in m.tool_calls)


def test_at_the_threshold_complete_delegates_first_and_only_the_result_enters() -> None:
    s = full_session()
    rec = Recorder()
    s.subscribe(rec)
    marked = s.mark_delegable("Find where sessions expire.", "The code base is a Flask app.", max_result_tokens=64)
    model = TestModel(["Sessions expire in app/auth.py:88 (SESSION_TTL=900).", "Patching app/auth.py now."])
    reply = s.complete(model)
    assert reply.message.text == "Patching app/auth.py now."
    assert s.pending_delegations == ()
    sub_request, parent_request = model.requests
    assert sub_request.messages[-1].text == "Find where sessions expire."
    assert all(m.text != "Fix the login bug." for m in sub_request.messages)  # isolated from the parent
    calls = [c for m in s.transcript for c in m.tool_calls if c.name == "delegate"]
    assert len(calls) == 1 and "Find where sessions expire." in calls[0].arguments
    result = next(m for m in s.transcript if m.role == "tool" and m.tool_call_id == calls[0].call_id)
    assert result.text == "Sessions expire in app/auth.py:88 (SESSION_TTL=900)."
    assert any("SESSION_TTL=900" in m.text for m in parent_request.messages)
    (done,) = rec.of("delegation.finished")
    assert isinstance(done, DelegationFinished)
    assert done.task_id == marked.task_id and done.utilization >= 0.95 and done.finished
    assert s.usage.requests >= 1


def test_delegation_can_be_disabled_or_run_explicitly() -> None:
    s = full_session(cascade={"delegation": 2.0})
    s.mark_delegable("Summarize the auth module.")
    model = TestModel(["Working on it.", "auth.py handles login and logout."])
    s.complete(model)
    assert len(s.pending_delegations) == 1  # above 1: never automatic
    (result,) = s.delegate_pending(model)
    assert result.result == "auth.py handles login and logout."
    assert s.pending_delegations == ()


def test_no_delegation_while_a_call_waits_for_its_result() -> None:
    s = full_session()
    s.mark_delegable("Find where sessions expire.")
    s.add(Message.assistant("", tool_calls=[ToolCall(call_id="open1", name="grep", arguments="{}")]))
    assert not s.delegation_due()
    s.add(Message.tool_result("open1", "no match", name="grep"))
    assert s.delegation_due() is (s.status().ratio >= 0.95)


def test_bad_marks_are_refused() -> None:
    s = Session(window=4_000, counter=COUNTER)
    with pytest.raises(ConfigError, match="non-empty"):
        s.mark_delegable("  ")
    with pytest.raises(ConfigError, match="max_result_tokens"):
        s.mark_delegable("Do it.", max_result_tokens=4)
    assert s.pending_delegations == ()


def test_async_sessions_delegate_too() -> None:
    async def main() -> None:
        s = AsyncSession(window=2_000, counter=COUNTER)
        s.add([Message.system("You are the lead agent."), Message.user("Fix the login bug.")])
        i = 0
        while s.status().ratio < 0.95:
            s.add([Message.assistant(f"step {i}: " + text_of(20, seed=i)), Message.user(f"go on {i}")])
            i += 1
        s.mark_delegable("Find where sessions expire.")
        model = AsyncTestModel(["In app/auth.py:88.", "Patching."])
        await s.complete(model)
        assert s.pending_delegations == ()
        assert any(m.role == "tool" and m.text == "In app/auth.py:88." for m in s.transcript)

    anyio.run(main)


def test_delegation_over_real_http() -> None:
    s = full_session()
    s.mark_delegable("Count the failing tests.", "pytest output: 3 failed, 120 passed")
    with ScriptedOpenAIServer(["3 tests fail: tests/test_api.py.", "Fixing tests/test_api.py."]) as server:
        with OpenAIChatModel("scripted", base_url=server.base_url, max_retries=0) as model:
            reply = s.complete(model)
        assert len(server.requests) == 2
    assert reply.message.text == "Fixing tests/test_api.py."
    assert any(m.role == "tool" and m.text == "3 tests fail: tests/test_api.py." for m in s.transcript)


def test_stream_delegates_first_too() -> None:
    s = full_session()
    s.mark_delegable("List the failing tests.", "CI run 88123 failed.")
    model = TestModel(["tests/test_api.py::test_login fails.", "Fixing test_login."])
    events = list(s.stream(model))
    assert events[-1].kind == "done"
    assert s.pending_delegations == ()
    assert s.transcript[-1].text == "Fixing test_login."
    assert any(m.role == "tool" and m.text == "tests/test_api.py::test_login fails." for m in s.transcript)
