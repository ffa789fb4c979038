"""The clear layer on a round book: old outputs become stand-ins, oldest first, down to the target."""

from __future__ import annotations

import json

import pytest

from contextwarden.compaction import clear
from contextwarden.compaction.config import CompactionConfig
from contextwarden.messages import Message

from ._helpers import book_totals_ok, make_book, make_text, tool_round

CONFIG = CompactionConfig(clear_after_rounds=2, keep_recent_rounds=1)


def tool_book(n: int, size: int = 2000, **kwargs: object) -> object:
    msgs = [Message.system("You audit shards."), Message.user("Audit every shard.")]
    for i in range(n):
        msgs += tool_round(f"c{i}", make_text(size, seed=i) + f"\nshard SH-{1000 + i} done", q=f"q{i}")
    return make_book(msgs, config=CONFIG, **kwargs)  # type: ignore[arg-type]


def test_clear_runs_oldest_first_and_stops_at_the_target() -> None:
    book = tool_book(8)
    before = book.total()
    target = before - 900
    change = clear.run(book, target, CONFIG, protected=book.protected(1))
    assert change.layer == "clear" and change.tokens_before == before and change.tokens_after == book.total()
    assert change.tokens_after <= target < change.tokens_before
    cleared = [r.ordinal for r in book.rounds if r.state == "cleared"]
    assert cleared == list(range(2, 2 + change.items))  # the oldest tool rounds, and only as many as needed
    assert change.items < 6
    assert book_totals_ok(book) and book.dirty


def test_clear_keeps_recent_and_protected_rounds_whole() -> None:
    book = tool_book(8)
    protected = book.protected(1) | {3}
    change = clear.run(book, 0, CONFIG, protected=protected)  # an unreachable target: clear all it may
    states = {r.ordinal: r.state for r in book.rounds if r.kind == "tool-call"}
    # rounds 2..9 are the tool rounds; the last two are too recent (clear_after_rounds=2)
    assert states == {
        2: "cleared",
        3: "full",
        4: "cleared",
        5: "cleared",
        6: "cleared",
        7: "cleared",
        8: "full",
        9: "full",
    }
    assert change.items == 5


def test_a_stand_in_keeps_head_identifiers_and_its_snapshot() -> None:
    book = tool_book(4)
    clear.run(book, 0, CONFIG, protected=set())
    r = book.rounds[2]
    original = book.transcript[r.indices[1]]
    stand_in = r.shown[1]  # type: ignore[index]
    sid = book.snapshot_id(r)
    assert stand_in.tool_call_id == original.tool_call_id and stand_in.source_ids == (original.message_id,)
    assert stand_in.snapshot_id == sid and f'read_context("{sid}")' in stand_in.text
    assert stand_in.text.split("\n")[1] in original.text  # the head
    assert book.accountant.count_message(stand_in) < book.counts[r.indices[1]]
    saved = json.loads(book.snapshots.get_snapshot("ses_book", sid))
    assert saved["kind"] == "round"
    assert [m["message_id"] for m in saved["messages"]] == [book.transcript[i].message_id for i in r.indices]


def test_a_used_large_output_is_cleared_however_recent() -> None:
    config = CompactionConfig(clear_after_rounds=5, tool_result_min_tokens=300)
    msgs = [Message.user("Read the log."), *tool_round("c0", make_text(3000, seed=3)), Message.assistant("Read it.")]
    msgs += [Message.user("Now summarize it.")]
    book = make_book(msgs, config=config)
    change = clear.run(book, 0, config, protected=book.protected(1))
    assert change.items == 1 and book.rounds[1].state == "cleared"


@pytest.mark.parametrize("limit", [40, 120, 400])
def test_a_preview_cut_fits_its_limit(limit: int) -> None:
    book = tool_book(1, size=6000)
    r = book.rounds[2]
    saved = clear.clear_round(book, r, CONFIG, reason="offloaded", cut=clear.Cut(mode="preview", limit=limit))
    assert saved > 0
    assert r.shown is not None and r.shown[1].message_id.endswith("~p")
    preview = r.shown[1]
    # within the limit, or (when even a short head does not fit) the snapshot reference alone
    assert book.accountant.count_message(preview) <= limit or "\n" not in preview.text


def test_small_outputs_are_not_worth_clearing() -> None:
    book = tool_book(6, size=100)
    change = clear.run(book, 0, CONFIG, protected=set())
    assert change.items == 0 and change.saved == 0
    assert all(r.state == "full" for r in book.rounds)
