"""Shared builders and checks for the compaction-engine suites.

Texts are generated deterministically from a seed (so hypothesis only draws sizes and seeds,
never megabytes of characters); `check_view` asserts the invariants every prepared view must
keep, independently of the engine's own bookkeeping.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from contextwarden import toolpairs
from contextwarden.compaction.base import Room
from contextwarden.compaction.book import RoundBook
from contextwarden.compaction.config import CompactionConfig
from contextwarden.events import Event, EventBus
from contextwarden.keyinfo import key_lines, preview, salient_facts
from contextwarden.messages import Message, ToolCall
from contextwarden.session import PreparedView, Session
from contextwarden.snapshots import MemorySnapshotStore, make_snapshot_id
from contextwarden.tokens import get_counter
from contextwarden.tokens.accountant import TokenAccountant

COUNTER = "tiktoken:cl100k_base"

_WORDS = (
    "the service returned rows for the query and the worker updated its cache while the "
    "scheduler retried pending jobs across every region before the nightly report finished"
).split()
_CHINESE = (
    "数据库连接失败，请检查配置文件。",
    "用户订单已经成功创建并发送确认邮件。",
    "系统正在重新加载模块，请稍候。",
    "上海仓库的库存数量已更新。",
)


def make_text(n_chars: int, *, seed: int, chinese: bool = False, error: bool = False) -> str:
    """About ``n_chars`` characters of log-like text with identifiers (paths, ids, dates, amounts)."""
    rng = random.Random(seed)
    lines: list[str] = []
    if error:
        lines.append(f"Error: connection to db-{seed % 97}.internal refused (errno 111)")
    size = sum(len(x) + 1 for x in lines)
    while size < n_chars:
        if chinese and rng.random() < 0.6:
            line = rng.choice(_CHINESE) + f" 订单 ORD-{rng.randint(1000, 9999)}"
        else:
            words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 10)))
            ident = rng.choice(
                [
                    f"/srv/app/mod_{rng.randint(1, 99)}.py",
                    f"ORD-{rng.randint(1000, 9999)}",
                    f"2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
                    f"${rng.randint(1, 999)}.{rng.randint(10, 99)}",
                    f"user_{rng.randint(1, 500)}",
                ]
            )
            line = f"{words} {ident}"
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)[: max(n_chars, 1)]


def call(call_id: str, name: str = "lookup", **arguments: Any) -> ToolCall:
    """A tool call with JSON arguments."""
    return ToolCall(call_id=call_id, name=name, arguments=json.dumps(arguments))


def tool_round(
    call_id: str, output: str, *, name: str = "lookup", is_error: bool = False, **arguments: Any
) -> list[Message]:
    """An assistant message making one call, and its result."""
    return [
        Message.assistant("", tool_calls=[call(call_id, name, **arguments)]),
        Message.tool_result(call_id, output, name=name, is_error=is_error),
    ]


@dataclass
class Recorder:
    """Collects every event a session emits."""

    events: list[Event] = field(default_factory=list)

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.kind == kind]

    def mark(self) -> int:
        return len(self.events)

    def since(self, mark: int, kind: str | None = None) -> list[Any]:
        return [e for e in self.events[mark:] if kind is None or e.kind == kind]


def session(window: int, **kwargs: Any) -> tuple[Session, Recorder]:
    """A tiktoken-counted session with a recorder subscribed; its budget is the whole window.

    These tests describe the engine at a given budget, so no reply reserve is taken from the window
    unless a test asks for one.
    """
    kwargs.setdefault("counter", COUNTER)
    kwargs.setdefault("reserved_output", 0)
    s = Session(window=window, **kwargs)
    rec = Recorder()
    s.subscribe(rec)
    return s, rec


def transcript_index(transcript: Sequence[Message]) -> dict[str, int]:
    return {m.message_id: i for i, m in enumerate(transcript)}


def source_of(m: Message, ids: dict[str, int]) -> int | None:
    """Transcript index a view message stands for (itself, or the original of a stand-in)."""
    if m.message_id in ids:
        return ids[m.message_id]
    if len(m.source_ids) == 1 and m.source_ids[0] in ids and m.role == "tool":
        return ids[m.source_ids[0]]
    return None


def is_context_block(m: Message) -> bool:
    """The block compaction writes (header, summary, ledger): a user message with a ``cw_context_`` id."""
    extra = m.extra if isinstance(m.extra, dict) else {}
    return m.role == "user" and (extra.get("contextwarden") == "context" or m.message_id.startswith("cw_context_"))


def is_abandoned_stand_in(m: Message) -> bool:
    """The stand-in result a view shows for a call abandoned without its result."""
    extra = m.extra if isinstance(m.extra, dict) else {}
    return m.role == "tool" and extra.get("contextwarden") == "abandoned"


def pending_tail(transcript: Sequence[Message]) -> tuple[Message | None, list[Message]]:
    """The last assistant message whose calls are not all answered, and the results it has so far."""
    for i in range(len(transcript) - 1, -1, -1):
        m = transcript[i]
        if m.role == "tool":
            continue
        if m.role != "assistant" or not m.tool_calls:
            return None, []
        results = [r for r in transcript[i + 1 :] if r.role == "tool"]
        if len(results) < len({c.call_id for c in m.tool_calls}):
            return m, results
        return None, []
    return None, []


def check_view(s: Session, pv: PreparedView, added: Sequence[Message]) -> None:
    """Every invariant of a prepared view (see the issue): fits, pairs, protected set, transcript."""
    view, status = pv.view, pv.status
    budget = s.budget.effective  # in the counter's tokens: calibration lowers it, never the counts
    # fits, by the session's own accountant, recounted from scratch
    assert status.budget == s.budget.calibrated_effective and status.calibration == s.budget.scale
    assert status.used == s.budget.calibrated(status.used_raw)
    assert status.used_raw <= budget, (status.used_raw, budget)
    recount = TokenAccountant(s.accountant.counter, framing=s.accountant.framing).count_messages(view)
    assert recount <= budget, (recount, budget)
    assert recount == status.used_raw, f"status.used_raw={status.used_raw} but the view counts {recount} tokens"
    # tool pairs intact (a pending tail allowed)
    assert toolpairs.validate(view) == [], toolpairs.validate(view)
    # the transcript is exactly what was added: same objects, same order
    transcript = s.transcript
    assert len(transcript) == len(added)
    assert all(a is b for a, b in zip(transcript, added, strict=True))
    # no duplicates; originals in transcript order (stand-ins at their original's place)
    assert len({m.message_id for m in view}) == len(view)
    ids = transcript_index(transcript)
    # Tool results sit in their call's round (toolpairs checked that above), after it: a result that
    # came late (after later messages) is ordered by its call, then by its own place; the stand-in
    # result of an abandoned call comes last in its round.
    keys: list[tuple[int, float]] = []
    call_at = -1
    for m in view:
        idx = source_of(m, ids)
        if is_abandoned_stand_in(m):
            keys.append((call_at, float("inf")))
            continue
        assert idx is not None or is_context_block(m), f"view message {m.message_id} comes from nowhere"
        if idx is None:
            continue
        if m.role == "tool":
            keys.append((call_at, float(idx)))
        else:
            call_at = idx
            keys.append((idx, -1.0))
    assert keys == sorted(keys), "view messages out of transcript order"
    # starts with the leading system message(s), and every system/developer message is kept as is
    lead = []
    for m in transcript:
        if m.role not in ("system", "developer"):
            break
        lead.append(m)
    assert all(a is b for a, b in zip(view[: len(lead)], lead, strict=True))
    in_view = {id(m) for m in view}
    for m in transcript:
        if m.role in ("system", "developer"):
            assert id(m) in in_view, f"system message {m.message_id} left the view"
        if m.pinned and m.role != "tool":
            assert id(m) in in_view, f"pinned message {m.message_id} left the view"
    last_user = next((m for m in reversed(transcript) if m.role == "user"), None)
    if last_user is not None:
        assert id(last_user) in in_view, "the current user message left the view"
    caller, results = pending_tail(transcript)
    if caller is not None:
        assert id(caller) in in_view, "a call in flight left the view"
        by_source = {source_of(m, ids) for m in view}
        for r in results:
            assert ids[r.message_id] in by_source, f"result {r.message_id} of a call in flight left the view"
    # first message after the system prompt is a user message (require_user_first, the default)
    rest = [m for m in view if m.role not in ("system", "developer")]
    first_user = next((m for m in transcript if m.role not in ("system", "developer")), None)
    if rest and first_user is not None and first_user.role == "user" and s.config.require_user_first:
        assert rest[0].role == "user", f"view starts with a {rest[0].role} message after the system prompt"


def current_round(transcript: Sequence[Message]) -> list[Message]:
    """The newest conversation round (system and developer messages are not rounds of the conversation):
    the last assistant message with calls and its results, a request with its reply, or the last message."""
    convo = [m for m in transcript if m.role not in ("system", "developer")]
    if not convo:
        return []
    transcript = convo
    i = len(transcript) - 1
    while i > 0 and transcript[i].role == "tool":
        i -= 1
    if transcript[i].role == "assistant" and transcript[i].tool_calls:
        return list(transcript[i:])
    if transcript[i].role == "assistant" and i > 0 and transcript[i - 1].role == "user":
        return list(transcript[i - 1 :])  # a request and its reply are one round
    return [transcript[-1]]


def stand_in_floor(s: Session, m: Message) -> int:
    """The fewest tokens a tool output can shrink to: the smaller of its cleared stand-in (short head)
    and its preview (head + tail), each with its header, key lines and identifiers (the issue's stand-in)."""
    acc, cfg = s.accountant, s.config
    text = m.text
    snap = make_snapshot_id(s.session_id, m.message_id)
    header = f'[output shortened from {acc.count_message(m)} tokens; full text: read_context("{snap}")]'
    best = acc.count_message(m)
    for small in (
        preview(text, head_chars=cfg.cleared_head_chars),
        preview(text, head_chars=cfg.preview_head_chars, tail_chars=cfg.preview_tail_chars),
    ):
        keys = [k for k in key_lines(text, limit=3, max_line_chars=160) if k not in small]
        found = salient_facts(text, limit=cfg.cleared_max_facts * 3, scan_chars=cfg.scan_chars)
        facts = [f for f in found if f not in small][: cfg.cleared_max_facts]
        body = "\n".join(
            [
                header,
                small,
                *(["key lines: " + " | ".join(keys)] if keys else []),
                *(["ids: " + " · ".join(facts)] if facts else []),
            ]
        )
        best = min(best, acc.count_message(m.with_text(body)))
    return best


def protected_floor(s: Session) -> int:
    """A lower bound on the tokens of what may never leave the view: system and pinned messages, the
    current request, the current round and calls in flight, tool outputs counted at their smallest
    stand-in. A request's reply counts with it (a request and its reply are one atomic round)."""
    acc = s.accountant
    transcript = s.transcript
    must: dict[int, Message] = {}

    def keep_request(i: int) -> None:  # a request and its reply are one round: both stay
        must[id(transcript[i])] = transcript[i]
        reply = transcript[i + 1 : i + 2]
        if reply and reply[0].role == "assistant" and not reply[0].tool_calls:
            must[id(reply[0])] = reply[0]

    for i, m in enumerate(transcript):
        if m.role in ("system", "developer"):
            must[id(m)] = m
        elif m.pinned and m.role == "user":
            keep_request(i)
        elif m.pinned and m.role != "tool":
            must[id(m)] = m
    last_user_at = max((i for i, m in enumerate(transcript) if m.role == "user"), default=None)
    if last_user_at is not None:
        keep_request(last_user_at)
    for m in current_round(transcript):
        must[id(m)] = m
    total = acc.framing.reply_priming
    for m in must.values():
        total += stand_in_floor(s, m) if m.role == "tool" else acc.count_message(m)
    return total


def make_book(
    messages: Sequence[Message] = (),
    *,
    effective: int = 4000,
    config: CompactionConfig | None = None,
    events: EventBus | None = None,
    snapshots: MemorySnapshotStore | None = None,
) -> RoundBook:
    """A round book (the layers' shared state) holding ``messages``, counted like `session` counts them."""
    config = config if config is not None else CompactionConfig()
    book = RoundBook(
        session_id="ses_book",
        accountant=TokenAccountant(get_counter(COUNTER)),
        snapshots=snapshots if snapshots is not None else MemorySnapshotStore(),
        events=events if events is not None else EventBus(),
        room=Room.of(effective, config),
        ledger_max_entries=config.ledger_max_entries,
        max_facts=config.cleared_max_facts,
        scan_chars=config.scan_chars,
    )
    book.commit(book.check(list(messages)))
    return book


def book_totals_ok(book: RoundBook) -> bool:
    """The book's running totals equal a walk over its rounds."""
    rounds = book.rounds
    return (
        book.rounds_total == sum(r.view_tokens for r in rounds)
        and book.tool_total == sum(r.view_tool_tokens for r in rounds)
        and book.system_total == sum(r.view_tokens for r in rounds if r.kind == "system")
        and book.n_evicted == sum(r.state == "evicted" for r in rounds)
    )


CLEAR_ONLY = CompactionConfig(
    high_water=0.9,
    low_water=0.2,
    reactive_low_water=0.2,
    min_low_water=0.1,
    layers=("clear",),
    keep_recent_rounds=1,
    clear_after_rounds=2,
    tool_result_min_tokens=10**6,  # age-based clearing alone (clearing once used: test_gates.py)
)
"""The clear layer alone, by age: what the clearing and engine tests compact with."""


# --- eviction scenarios (policies and regressions) -------------------------------------------
def filler(seed: int, n_chars: int = 700) -> str:
    """Made-up lower-case words: no identifiers (rounds share none by accident) and a vocabulary of its
    own per seed (rounds are not near-duplicates by accident)."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 8))) for _ in range(60)]
    return " ".join(rng.choice(vocab) for _ in range(n_chars // 6))


def fetch(i: int, *, record: str | None = None, **arguments: Any) -> list[Message]:
    """A tool round whose output starts with its own record id (inside the scanned head)."""
    rec = record or f"REC-{i:04d}"
    return tool_round(f"c{i}", f"record {rec}: {filler(i)}", name="fetch", **arguments)


def evicted(
    policy: str, rounds: Sequence[list[Message]], *, want: tuple[int, int] = (2, 4), **overrides: Any
) -> list[int]:
    """Indices of the rounds that left the view in the first compaction that evicts ``want`` rounds."""
    for low in (0.97, 0.94, 0.91, 0.88, 0.85, 0.82, 0.79, 0.76, 0.73, 0.7, 0.65, 0.6):
        config = CompactionConfig(
            eviction_policy=policy,  # type: ignore[arg-type]
            layers=("evict",),
            keep_recent_rounds=1,
            low_water=low,
            **overrides,
        )
        probe, _ = session(100_000, config=config)
        probe.add([Message.system("You audit accounts."), Message.user("Please audit the accounts.")])
        for r in rounds:
            probe.add(r)
        total = probe.prepare(format="internal").status.used
        s, _ = session(total - 1, config=config)  # one token over: the next prepare compacts
        s.add([Message.system("You audit accounts."), Message.user("Please audit the accounts.")])
        for r in rounds:
            s.add(r)
        pv = s.prepare(format="internal")
        assert pv.status.layer == "evict"
        kept = {m.message_id for m in pv.view}
        gone = [i for i, r in enumerate(rounds) if r[0].message_id not in kept]
        for i, r in enumerate(rounds):  # a round leaves whole or stays whole
            assert all((m.message_id in kept) == (i not in gone) for m in r)
        if want[0] <= len(gone) <= want[1]:
            return gone
    raise AssertionError(f"no low-water mark evicted {want} rounds")
