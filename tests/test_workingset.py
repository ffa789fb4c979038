"""The working set: what the agent acted on is found, ranked above what it merely saw, and kept."""

from __future__ import annotations

import json
from collections.abc import Iterable

from hypothesis import given, settings, strategies as st

from contextwarden import Message, Session, ToolCall, workingset
from contextwarden.tokens import get_counter
from contextwarden.workingset import WorkingSet


def _call(call_id: str, name: str, **arguments: object) -> Message:
    return Message.assistant(tool_calls=[ToolCall(call_id=call_id, name=name, arguments=json.dumps(arguments))])


def test_file_tools_and_ranking_put_edited_files_above_files_only_seen() -> None:
    ws = WorkingSet()
    msgs = [
        Message.user("fix the parser"),
        _call("c1", "Edit", file_path="/repo/src/parser.c", old_string="a", new_string="b"),
        Message.tool_result("c1", "ok"),
    ]
    # a noisy output lists another path many times, later than the edit
    for i in range(8):
        msgs += [_call(f"g{i}", "Bash", command="ls"), Message.tool_result(f"g{i}", "src/noise.c src/noise.c")]
    ws.catch_up(msgs)
    files = [it.key for it in ws.ranked("file")]
    assert files[0] == "/repo/src/parser.c"
    assert files.index("/repo/src/parser.c") < files.index("src/noise.c")
    text = ws.render(max_tokens=400, count=len)
    assert "/repo/src/parser.c (edited 1×)" in text


def test_recency_orders_files_of_the_same_kind() -> None:
    ws = WorkingSet()
    msgs = [
        _call("a", "Read", file_path="old.py"),
        Message.tool_result("a", "x"),
        _call("b", "Read", file_path="new.py"),
        Message.tool_result("b", "x"),
    ]
    ws.catch_up(msgs)
    assert [it.key for it in ws.ranked("file")][:2] == ["new.py", "old.py"]


def test_command_outcomes_and_unresolved_errors() -> None:
    ws = WorkingSet()
    ws.catch_up(
        [
            _call("t1", "bash", command="python -m pytest tests/test_a.py"),
            Message.tool_result("t1", "E   AssertionError: boom\n1 failed, 3 passed\n<returncode>1</returncode>"),
        ]
    )
    command = ws.ranked("command")[0]
    assert command.outcome is not None and command.outcome.startswith("failed")
    assert ws.ranked("error"), "the failing run's error line is an unresolved error"
    assert "Unresolved errors:" in ws.render(max_tokens=500, count=len)
    ws.catch_up(
        [
            _call("t1", "bash", command="python -m pytest tests/test_a.py"),
            Message.tool_result("t1", "4 passed\n<returncode>0</returncode>"),
        ]
        * 1,
    )
    # catch_up reads only new messages: feed them as a longer transcript
    ws2 = WorkingSet()
    history = [
        _call("t1", "bash", command="python -m pytest tests/test_a.py"),
        Message.tool_result("t1", "E   AssertionError: boom\n1 failed\n<returncode>1</returncode>"),
        _call("t2", "bash", command="python -m pytest tests/test_a.py"),
        Message.tool_result("t2", "4 passed\n<returncode>0</returncode>"),
    ]
    ws2.catch_up(history)
    assert ws2.ranked("command")[0].outcome == "ok (4 passed)"
    assert not ws2.ranked("error"), "a later success resolves the errors"


def test_fenced_commands_and_user_observations_of_text_protocol_agents() -> None:
    ws = WorkingSet()
    ws.catch_up(
        [
            Message.user("Please fix the bug in the repo at /testbed"),
            Message.assistant("THOUGHT: edit it\n\n```bash\nsed -i 's/x/y/' /testbed/pkg/mod.py\n```"),
            Message.user("<returncode>0</returncode>\n<output>\n/testbed/other/seen.py\n</output>"),
        ]
    )
    mod = next(it for it in ws.ranked("file") if it.key == "/testbed/pkg/mod.py")
    seen = next(it for it in ws.ranked("file") if it.key == "/testbed/other/seen.py")
    assert mod.actions == {"edited": 1}
    assert seen.actions == {"seen": 1}, "an observation is not a user request"
    assert ws.ranked("command")[0].outcome == "ok"


def test_state_round_trip_renders_the_same() -> None:
    ws = WorkingSet()
    ws.catch_up(
        [
            _call("c1", "Write", file_path="a/b.py", content="x"),
            Message.tool_result("c1", "ok"),
            _call("c2", "bash", command="make test"),
        ]
    )
    copy = WorkingSet.from_dict(json.loads(json.dumps(ws.to_dict())))
    assert copy.render(max_tokens=300, count=len) == ws.render(max_tokens=300, count=len)
    tail = [Message.tool_result("c2", "Error: build failed\nexit code 2")]
    ws.observe(tail[0], ws.cursor)
    copy.observe(tail[0], copy.cursor)
    assert copy.render(max_tokens=300, count=len) == ws.render(max_tokens=300, count=len)


_text = st.text(alphabet=st.sampled_from(list("ab/._- \n`'\"<>|;&=$:0123456789xyz")), max_size=80)
_messages = st.lists(
    st.one_of(
        _text.map(Message.user),
        _text.map(Message.assistant),
        st.tuples(st.sampled_from(["bash", "Edit", "Read", "x"]), _text).map(
            lambda t: _call("c", t[0], command=t[1], file_path=t[1])
        ),
        _text.map(lambda t: Message.tool_result("c", t)),
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(_messages, st.integers(min_value=0, max_value=200))
def test_any_transcript_is_read_without_error_and_renders_within_its_cap(msgs: list[Message], cap: int) -> None:
    counter = get_counter("tiktoken:cl100k_base")
    ws = WorkingSet()
    ws.catch_up(msgs)
    text = ws.render(max_tokens=cap, count=counter.count_text)
    assert counter.count_text(text) <= cap + len(text.splitlines())  # lines are joined by newlines
    assert ws.cursor == len(msgs)


def test_the_files_being_changed_survive_a_long_noisy_session_in_a_small_window() -> None:
    session = Session("ws", window=3000, reserved_output=0)
    session.add([Message.system("You are a coding agent."), Message.user("Fix the bug.")])
    edited = ["src/app/core/engine_rules.py", "src/app/io/reader_utils.py"]
    for i, path in enumerate(edited):
        session.add(
            [_call(f"e{i}", "bash", command=f"sed -i 's/a/b/' {path}"), Message.tool_result(f"e{i}", "<returncode>0")]
        )
    for i in range(60):  # long outputs that name other paths, once each
        noise = "\n".join(f"lib/vendor/pkg{i}/mod{j}.py:12: match" for j in range(30))
        session.add(
            [_call(f"n{i}", "bash", command=f"grep -rn match lib/vendor/pkg{i}"), Message.tool_result(f"n{i}", noise)]
        )
        session.prepare()
    view = session.prepare(format="internal").view
    text = "\n".join(m.text for m in view)
    assert all(path in text for path in edited)
    block = next(m.text for m in view if m.extra.get("contextwarden") == "context")
    assert block.index(edited[0]) < block.index("Progress ledger") if "Progress ledger" in block else True


def test_outcome_reads_both_ends_of_a_long_output() -> None:
    middle = "log line\n" * 5000
    assert workingset._outcome("<returncode>1</returncode>\n" + middle, is_error=False)[0]
    assert workingset._outcome(middle + "=== 2 failed, 3 passed in 1s ===", is_error=False)[0]
    assert workingset._outcome(middle + "=== 5 passed in 1s ===", is_error=False) == (False, "ok (5 passed)")


_item = st.builds(
    workingset.WorkItem,
    kind=st.sampled_from(["file", "command", "error", "symbol"]),
    key=st.text(alphabet="abc/._", min_size=1, max_size=6),
    score=st.sampled_from([0.0, 0.5, 1.0, 2.0]),  # few values: many ties
    tier=st.integers(min_value=0, max_value=2),
    refs=st.integers(min_value=0, max_value=4),
    last_index=st.integers(min_value=-1, max_value=3),
)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=0, max_value=300).flatmap(lambda n: st.lists(_item, min_size=n, max_size=n)),
    st.integers(min_value=0, max_value=2000),
)
def test_a_render_shows_the_items_a_full_sort_ranks_first(items: list[workingset.WorkItem], cap: int) -> None:
    """Each group shows a prefix of its items sorted strongest first, ties in the order they came."""
    ws = WorkingSet()
    for n, it in enumerate(items):
        it.key += str(n)  # every item kept, however alike the drawn keys
        it.rerank()
        ws.items[(it.kind, it.key)] = it

    def ranked(kind: str) -> list[str]:
        of_kind = [it for it in ws.items.values() if it.kind == kind]
        return [it.key for it in sorted(of_kind, key=lambda it: it.rank_key, reverse=True)]

    shown_files = {it.key for it in ws.items.values() if it.kind == "file" and (it.tier >= 1 or it.refs >= 3)}
    expected = {
        "Files:": [key for key in ranked("file") if key in shown_files],
        "Commands (last outcome):": ranked("command")[:8],
        "Unresolved errors:": ranked("error")[:4],
    }
    for max_tokens in (cap, 10**6):  # 10**6: every row fits
        groups, symbols = _groups(ws.render(max_tokens=max_tokens, count=len), expected)
        for title, rows in groups.items():
            assert rows and rows == expected[title][: len(rows)]
        symbol_keys = {it.key for it in ws.items.values() if it.kind == "symbol" and it.refs >= 2}
        assert symbols == [key for key in ranked("symbol") if key in symbol_keys][: len(symbols)]
    assert groups == {title: rows for title, rows in expected.items() if rows}


def _groups(text: str, titles: Iterable[str]) -> tuple[dict[str, list[str]], list[str]]:
    """The keys a working-set render lists under each title, and its symbols."""
    groups: dict[str, list[str]] = {}
    symbols: list[str] = []
    rows: list[str] = []
    for line in text.splitlines()[1:]:
        if line in titles:
            rows = groups[line] = []
        elif line.startswith("Symbols: "):
            symbols = line.removeprefix("Symbols: ").split(", ")
        else:
            rows.append(line[2:].split(" ")[0])  # "- key", "- key (edited)", "- key → ok"
    return groups, symbols
