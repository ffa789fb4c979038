"""Regression tests for bugs the issue-3 test suite found (each failed before its fix)."""

from __future__ import annotations

import re

import pytest

from contextwarden.compaction import context_block
from contextwarden.compaction.config import CompactionConfig
from contextwarden.exceptions import SnapshotError
from contextwarden.keyinfo import extract_identifiers, salient_facts
from contextwarden.messages import Message
from contextwarden.snapshots import MemorySnapshotStore, safe_session_dir
from contextwarden.summarize.base import SummaryRequest

from ._helpers import evicted, fetch, filler, is_context_block, make_text, session, tool_round


# 1 ---------------------------------------------------------------------------------------------
def test_ledger_step_numbers_are_unique_and_resolve_to_their_step() -> None:
    """A note from on_turn_end takes step = next_step; evicted rounds take step = round ordinal.
    Both end up as '#7' (actual: '#7 ✓ second note' and '#7 ✓ lookup(q=item-5)'), and
    read_context('#1') returns round 1 (the user request), not the note listed as '#1'."""
    s, _ = session(3000, config=CompactionConfig(keep_recent_rounds=2))
    s.add([Message.system("sys"), Message.user("Find order ORD-1")])
    s.on_turn_end(step="planned the search")
    for i in range(8):
        s.add(tool_round(f"c{i}", make_text(1500, seed=i), q=f"item-{i}"))
        s.prepare()
    s.on_turn_end(step="second note")
    for i in range(8, 14):
        s.add(tool_round(f"c{i}", make_text(1500, seed=i), q=f"item-{i}"))
        pv = s.prepare(format="internal")
    steps = [e.step for e in s.ledger.entries]
    assert len(steps) == len(set(steps)), steps
    block = next(m for m in pv.view if is_context_block(m))
    listed = re.findall(r"^#(\d+) ", block.text, flags=re.M)
    assert len(listed) == len(set(listed)), listed
    first_note = next(e for e in s.ledger.entries if e.kind == "note")
    # a note's number is not a step: '#-1' names no round (it never counts rounds from the end)
    with pytest.raises(SnapshotError, match="unknown step reference"):
        s.read_context(f"#{first_note.step}")


# 2 ---------------------------------------------------------------------------------------------
def test_facts_are_whole_identifiers_never_cut_at_the_scan_limit() -> None:
    """salient_facts(text, scan_chars=n) scans text[:n] and returns the token cut at the boundary:
    'total $248.66 due' with scan_chars=10 gives ['$248'] (a wrong amount). In sessions this puts
    false facts into stand-ins and the ledger ('ORD-642' for ORD-6425, '/srv/app/mod_8' for
    /srv/app/mod_89.py, '/s')."""
    assert salient_facts("total $248.66 due", scan_chars=10) in ([], ["$248.66"])
    text = make_text(3000, seed=2)
    whole = set(extract_identifiers(text))
    for n in (100, 333, 600, 1000):
        for fact in salient_facts(text, scan_chars=n):
            assert fact in whole, (n, fact)


def test_cleared_stand_ins_list_only_identifiers_of_their_output() -> None:
    """Same cause, seen in a session: the 'ids:' line of a stand-in holds cut identifiers."""
    config = CompactionConfig(
        high_water=0.9, low_water=0.2, reactive_low_water=0.2, min_low_water=0.1, layers=("clear",)
    )
    s, _ = session(5000, config=config)
    s.add([Message.system("sys"), Message.user("go")])
    outs = [make_text(2500, seed=i) for i in range(9)]
    for i, out in enumerate(outs):
        s.add(tool_round(f"c{i}", out))
    pv = s.prepare(format="internal")
    for m in pv.view:
        if m.role == "tool" and m.snapshot_id:
            original = outs[int(m.tool_call_id[1:])]  # type: ignore[index]
            ids_line = next(line for line in m.text.splitlines() if line.startswith("ids: "))
            for ident in ids_line[5:].split(" · "):
                assert ident in extract_identifiers(original), ident


# 3 ---------------------------------------------------------------------------------------------
def test_amounts_with_thousands_separators_stay_whole() -> None:
    """'$1,234.56' is split into '$1' and '234.56'; 'SEA->LIS' yields 'SEA-'. Stand-ins keep
    these fragments as 'verbatim' facts."""
    ids = extract_identifiers("Invoice total $1,234.56 for flight SEA->LIS")
    assert "$1" not in ids
    assert "$1,234.56" in ids
    assert "SEA-" not in ids


# 4 ---------------------------------------------------------------------------------------------
def test_status_before_the_first_prepare_accounts_the_messages_added() -> None:
    """Before the first prepare (and after any change that makes the view dirty) status() and
    on_turn_start() return used=0 with a negative 'history' (e.g. -503) while 'tool_results' is 493."""
    s, _ = session(5000)
    s.add([Message.system("You are a billing agent."), Message.user("Reconcile the March invoices.")])
    s.add(tool_round("c1", make_text(2000, seed=1)))
    st = s.status()
    assert all(v >= 0 for v in st.breakdown.values()), st.breakdown
    assert sum(st.breakdown.values()) == st.used
    assert st.used == s.accountant.count_messages(s.transcript)
    assert s.on_turn_start().used == st.used


# 5 ---------------------------------------------------------------------------------------------
def test_priority_weighs_tool_rounds_by_the_tool_source_weight() -> None:
    """source_weights has a 'tool' key (default 0.5) but a round's weight is taken from the role of
    its FIRST message, which for a tool round is always 'assistant': the tool weight never applies.
    With tool=0.05 and assistant=1.0, tool rounds should leave before assistant text rounds."""
    rounds = [fetch(0)]
    for i in range(1, 10):
        rounds.append([Message.assistant(f"Interim note {i}: {filler(i + 50, 900)}")] if i % 2 else fetch(i))
    weights = {"user": 1.0, "assistant": 1.0, "tool": 0.05, "system": 1.0}
    gone = evicted("priority", rounds, source_weights=weights)
    tool_rounds = [0, 2, 4, 6, 8]
    assert set(gone) == set(tool_rounds[: len(gone)]), gone


# 6 ---------------------------------------------------------------------------------------------
def test_session_directories_cannot_collide() -> None:
    """safe_session_dir keeps ids matching [A-Za-z0-9_-]{1,64} as they are and hashes others to
    's_<hex>'. A session named exactly that hash shares the directory of the other session:
    safe_session_dir('a/b') == safe_session_dir('s_575aa62220a2c597f5def8d269b6acac')."""
    hashed = safe_session_dir("a/b")
    assert safe_session_dir(hashed) != hashed


# 7 ---------------------------------------------------------------------------------------------
def test_snapshot_id_with_a_trailing_newline_is_rejected() -> None:
    """_SNAPSHOT_ID_RE.match with '$' accepts 'snap_' + 24 hex + '\\n' (also written to disk as a
    file name containing a newline)."""
    store = MemorySnapshotStore()
    try:
        store.put_snapshot("s", "snap_" + "0" * 24 + "\n", b"{}")
    except SnapshotError:
        return
    raise AssertionError("a snapshot id with a trailing newline was accepted")


# 8 ---------------------------------------------------------------------------------------------
def test_offloaded_oversized_item_keeps_head_and_tail() -> None:
    """Issue: an item larger than the budget is 'replaced by a preview (head + tail + key lines)'.
    Actual: the shrink layer first uses the cleared stand-in (120-char head, no tail); the
    preview_head_chars/preview_tail_chars settings are not used for it."""
    s, _ = session(3000)
    s.add([Message.system("sys"), Message.user("go")])
    huge = "BEGIN-MARKER\n" + make_text(60_000, seed=3) + "\nFATAL: disk /dev/sda1 full\nlast line END-MARKER"
    s.add(tool_round("big", huge, path="/var/log/syslog"))
    pv = s.prepare(format="internal")
    stand_in = next(m for m in pv.view if m.role == "tool")
    assert "BEGIN-MARKER" in stand_in.text
    assert "END-MARKER" in stand_in.text


# 9 ---------------------------------------------------------------------------------------------
def test_compaction_reaches_low_water_when_the_protected_set_is_small() -> None:
    """Window 12000, rounds of ~200 tokens full of identifiers: the compaction at turn 55 ends at
    ~6,390 > 0.5 × 12000 with a 1,655-token context block (eviction reserved 64 + 48 per evicted
    round for it). Protected set here: system, request and the newest 3 rounds, ~650 tokens."""
    s, rec = session(12000)
    s.add([Message.system("sys"), Message.user("go")])
    for i in range(70):
        s.add(tool_round(f"c{i}", make_text(800, seed=i), q=f"ORD-{i}"))
        mark = rec.mark()
        pv = s.prepare(format="internal")
        if rec.since(mark, "compaction.started"):
            assert pv.status.used <= 0.5 * s.budget.effective, (i, pv.status.used, pv.status.breakdown)


def test_reactive_compaction_reaches_reactive_low_water() -> None:
    """on_context_overflow targets 0.35 × 6000 = 2100 and ends at 2135 (context block 581 tokens
    against a reserve of 448); the last 2 rounds + system + request take ~800 tokens."""
    s, _ = session(6000)
    s.add([Message.system("sys"), Message.user("go")])
    for i in range(12):
        s.add(tool_round(f"c{i}", make_text(1500, seed=i)))
        s.prepare()
    pv = s.on_context_overflow(format="internal")
    assert pv.status.used <= 0.35 * s.budget.effective, pv.status


def test_compaction_does_not_cut_far_below_low_water() -> None:
    """Over-eviction: eviction reserves 64 + 48 tokens per evicted round for the ledger (up to the
    ledger cap) while a short ledger line costs ~8, so each later compaction cuts deeper: with
    identifier-free 600-token rounds at window 8000 (low water 4000) the cuts are
    [3791, 3435, 2732, 2193, ...]: two to three rounds more than needed are dropped."""
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]

    def plain(seed: int) -> str:
        return " ".join(words[(seed * 7 + k * 3) % 8] for k in range(400))

    s, rec = session(8000, config=CompactionConfig(keep_recent_rounds=2))
    s.add([Message.system("sys"), Message.user("go")])
    cuts = []
    for i in range(60):
        s.add(tool_round(f"c{i}", plain(i), q=f"q{i}"))
        mark = rec.mark()
        pv = s.prepare(format="internal")
        if rec.since(mark, "compaction.started"):
            cuts.append(pv.status.used)
    round_tokens = s.accountant.count_messages(tool_round("x", plain(1), q="q1"))
    assert all(c >= 4000 - 2 * round_tokens for c in cuts), (cuts, round_tokens)


# 10 --------------------------------------------------------------------------------------------
def test_thrashing_never_leads_to_compacting_on_every_turn() -> None:
    """Rounds of ~1,500 tokens in a 6,000 budget: the newest 3 rounds (protected as
    keep_recent_rounds) fill 75%, so from turn 3 on EVERY prepare compacts; thrashing alerts fire
    every 3 turns and deepen the target to 0.4, 0.3, 0.2, but the deeper targets never cut into the
    newest rounds, so the view stays at ~5,000 and compaction runs every turn forever."""
    s, rec = session(6000)
    s.add([Message.system("sys"), Message.user("go")])
    compacted = []
    for i in range(16):
        s.add(tool_round(f"c{i}", make_text(6000, seed=i), q=f"ORD-{i}"))
        mark = rec.mark()
        s.prepare()
        compacted.append(bool(rec.since(mark, "compaction.started")))
    alerts = [e for e in rec.of("alert") if e.alert == "thrashing"]
    assert alerts
    runs = "".join("x" if c else "." for c in compacted)
    assert "xxxxx" not in runs, runs  # the first compaction + 3 refills make the alert; then it stops


def test_after_a_thrashing_alert_the_deeper_target_is_reached() -> None:
    """keep_recent_rounds=1, ~840-token rounds, window 4000: after the alert the target is 1600
    but the view ends at ~2230 because the ledger block has grown to its cap
    (ledger_share 0.35 × 4000 = 1400 tokens) and is never shrunk to meet the target."""
    s, rec = session(4000, config=CompactionConfig(keep_recent_rounds=1))
    s.add([Message.system("sys"), Message.user("go")])
    for i in range(40):
        s.add(tool_round(f"c{i}", make_text(3300, seed=i), q=f"ORD-{i}"))
        mark = rec.mark()
        pv = s.prepare(format="internal")
        if [e for e in rec.since(mark, "alert") if e.alert == "thrashing"]:
            target = rec.since(mark, "compaction.started")[0].target
            # the user's own words come on top of a deeper cut (they are few, and nothing stands in for them)
            words = s.engine.book.room.user_need + context_block.SECTION_HEADER
            assert pv.status.used <= target + words, (i, pv.status.used, target, words, pv.status.breakdown)
            return
    raise AssertionError("no thrashing alert")


# 11 --------------------------------------------------------------------------------------------
def test_status_of_the_prepare_counts_its_own_subscriber_errors() -> None:
    """The status returned by prepare() is built before the final context.status event is
    delivered, so a subscriber failing on it shows only in the NEXT status (0 here, then 1...)."""
    s, _ = session(3000)
    s.add([Message.system("sys"), Message.user("go")])

    def broken(_: object) -> None:
        raise RuntimeError("subscriber bug")

    s.subscribe(broken)
    pv = s.prepare(format="internal")
    assert pv.status.subscriber_errors == s.status().subscriber_errors


# 12 --------------------------------------------------------------------------------------------
def test_ledger_is_rendered_after_any_compaction() -> None:
    """Issue: the ledger is 'rendered into every view' (changing only when a compaction runs).
    Actual: the context block is rendered only once a round was evicted; after a clear-only
    compaction the steps recorded with on_turn_end(step=...) are nowhere in the view."""
    config = CompactionConfig(high_water=0.9, low_water=0.6, keep_recent_rounds=1, clear_after_rounds=2)
    s, _ = session(5000, config=config)
    s.add([Message.system("sys"), Message.user("go")])
    s.on_turn_end(step="PLANNED-NOTE-XYZ")
    for i in range(8):
        s.add(tool_round(f"c{i}", make_text(2500, seed=i)))
    pv = s.prepare(format="internal")
    assert pv.status.layer == "clear"
    assert any("PLANNED-NOTE-XYZ" in m.text for m in pv.view)


# 13 --------------------------------------------------------------------------------------------
class ForgetfulSummarizer:
    """A fluent summary that drops every identifier it was given."""

    def __init__(self) -> None:
        self.calls = 0

    def summarize(self, request: SummaryRequest) -> str:
        self.calls += 1
        return "The agent looked up several records and everything went fine; work continues as planned."


def test_summary_that_loses_the_identifiers_is_rejected() -> None:
    """ARCHITECTURE.md §5: 'A summary that carries an error text, or loses the identifiers it was
    given, is rejected.' check_summary only rejects empty and error-looking texts."""
    summ = ForgetfulSummarizer()
    s, _ = session(3000, summarizer=summ, config=CompactionConfig(keep_recent_rounds=1))
    s.add([Message.system("sys"), Message.user("Audit accounts ACC-1 to ACC-9.")])
    for i in range(8):
        s.add(tool_round(f"c{i}", f"account ACC-{i} balance ${i}00.00 ref TX-{i}{i}{i}\n" + make_text(1500, seed=i)))
        pv = s.prepare(format="internal")
    assert summ.calls >= 1
    assert pv.status.layer != "summarize"
    assert "everything went fine" not in next(m for m in pv.view if is_context_block(m)).text


# 14 --------------------------------------------------------------------------------------------
def test_pinning_an_evicted_message_brings_it_back_or_fails_loudly() -> None:
    """Session.pin() on a message whose round was already evicted marks the round pinned but
    leaves it evicted: the view then lacks a pinned message, silently (found by the property test:
    User, tool round with a huge output, prepare, pin the first user message, two more users)."""
    s, _ = session(3000, config=CompactionConfig(keep_recent_rounds=1))
    first = Message.user("Customer id CUST-4411; remember it.")
    s.add([Message.system("sys"), first, Message.assistant("ok")])
    s.add(Message.user("Now look things up."))
    for i in range(10):
        s.add(tool_round(f"c{i}", make_text(1500, seed=i)))
        pv = s.prepare(format="internal")
    assert first.message_id not in {m.message_id for m in pv.view}  # evicted by now
    try:
        s.pin(first.message_id)
    except Exception:
        return  # a clear error is acceptable
    pv = s.prepare(format="internal")
    assert first.message_id in {m.message_id for m in pv.view}


# 15 --------------------------------------------------------------------------------------------
def test_read_tool_with_malformed_model_arguments_raises_a_typed_error() -> None:
    """handle_tool_call() passes the model's arguments through json.loads/int(): bad arguments
    raise JSONDecodeError, ValueError or AttributeError instead of a ContextWardenError (or a
    tool-result text the model can read)."""
    from contextwarden.exceptions import ContextWardenError
    from contextwarden.session import Session

    s = Session(window=3000, counter="heuristic")
    for args in ['{"ref": "snap_x", "page": "two"}', "not json", "[1, 2]"]:
        try:
            s.handle_tool_call("read_context", args)
        except ContextWardenError:
            continue
        except Exception as exc:
            raise AssertionError(f"{args!r} raised untyped {type(exc).__name__}: {exc}") from None


# 16 --------------------------------------------------------------------------------------------
def test_on_turn_end_with_usage_before_the_first_prepare() -> None:
    """on_turn_end({'prompt_tokens': N}) before any prepare() raises UsageError('Calibration.record
    needs positive token counts, got estimated=0'): the hook compares with status().used, which is
    0 until the first prepare (see test_status_before_the_first_prepare...)."""
    s, _ = session(3000)
    s.add([Message.system("sys"), Message.user("go")])
    s.on_turn_end({"prompt_tokens": 40}, step="answered")
    assert s.ledger.entries[-1].intention == "answered"


# 17 --------------------------------------------------------------------------------------------
class DenseSummarizer:
    """Uses all of request.max_tokens, in identifier-dense text (~2 characters per token)."""

    def __init__(self, count: object) -> None:
        self.count = count

    def summarize(self, request: SummaryRequest) -> str:
        ids = [f for m in request.messages for f in salient_facts(m.text, scan_chars=4000)]
        text = "Done so far; ids: "
        i = 0
        while self.count(text) < request.max_tokens - 10:  # type: ignore[operator]
            text += f"{ids[i % len(ids)]} k{i}=v{i}; "
            i += 1
        return text


def test_a_summary_within_max_tokens_is_shown_with_the_ledger() -> None:
    """_render_context cuts a summary longer than its room to (room - 64) * 3 characters, which for
    identifier-dense text is still more tokens than the room; the block then falls back to the
    bare header: summary AND ledger disappear from the view although the summary was accepted
    (status.layer == 'summarize')."""
    from contextwarden.tokens import get_counter

    summ = DenseSummarizer(get_counter("tiktoken:cl100k_base").count_text)
    # this test is about rendering; the filler-heavy summary would fail the identifier check
    config = CompactionConfig(keep_recent_rounds=1, summary_min_identifiers=0.0)
    s, _ = session(3000, summarizer=summ, config=config)
    s.add([Message.system("sys"), Message.user("Audit every shard.")])
    for i in range(8):
        s.add(tool_round(f"c{i}", make_text(1500, seed=i), q=f"q{i}"))
        pv = s.prepare(format="internal")
    assert pv.status.layer == "summarize"
    block = next(m for m in pv.view if is_context_block(m)).text
    assert "Summary of messages" in block
    assert "Progress ledger" in block


def test_last_resort_previews_fit_the_room_the_protected_round_has() -> None:
    """A pinned ~1,650-token request, a current tool round with two large error outputs and two
    developer notes in a 2,000-token budget (found by the property test): the head+tail previews
    were sized to a fixed share of the budget, so the view ended a few tokens over and prepare()
    raised BudgetExceeded although the protected set fits."""
    from ._program import Developer, Prepare, Text, Tools, User, build_messages

    program = [
        User(Text("small", 7, False), False),
        User(Text("large", 3451, False), True),
        Prepare(),
        Tools((Text("medium", 0, True), Text("large", 0, False)), errors=(True, True), reuse_ids=False, in_flight=None),
        Prepare(),
        Developer(0),
        Developer(0),
    ]
    for _ in range(10):  # message ids (and so snapshot ids) are random: try several
        s, _ = session(2000, config=CompactionConfig(keep_recent_rounds=1, clear_after_rounds=1))
        s.add(Message.system("You are a careful agent."))
        for batch in build_messages(program, 2000):
            if batch is None:
                pv = s.prepare(format="internal")
                assert pv.status.used <= s.budget.effective
            else:
                s.add(batch)  # type: ignore[arg-type]
