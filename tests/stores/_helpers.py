"""What the store tests share: ids a store must keep apart safely, and the session scenario the binding
and fault tests run (a small window, large tool outputs, compaction every few rounds)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from compaction._helpers import make_text, tool_round
from contextwarden.compaction.config import CompactionConfig
from contextwarden.messages import Message

NASTY_IDS = [
    "../../etc/passwd",
    "a/b\\c",
    "quote'\"; DROP TABLE cw_sessions; --",
    "{cw:x}:meta",
    "x}",
    "with space",
    "%2F",
    "/",
    "会话-🙂",
    "s" * 200,
]
"""Session ids that look like paths, SQL, key patterns, percent-escapes or are very long."""

OUTPUT_CHARS = 2500
CONFIG = CompactionConfig(keep_recent_rounds=1, clear_after_rounds=2)
"""Clears outputs older than two rounds first (stand-ins with snapshots), then evicts rounds."""
OPTIONS: dict[str, Any] = {
    "window": 3000,
    "reserved_output": 0,
    "counter": "tiktoken:cl100k_base",
    "config": CONFIG,
}
MAX_ROUNDS = 30
"""A scenario that has not compacted as often as it needs by then is broken, not slow."""


def opening() -> list[Message]:
    return [Message.system("You are a test agent."), Message.user("Reconcile the nightly batch.")]


def make_round(tag: str, i: int) -> list[Message]:
    """One tool call and its large output (about 600 tokens: a 3000-token window holds four)."""
    return tool_round(f"{tag}{i}", make_text(OUTPUT_CHARS, seed=1000 * sum(map(ord, tag)) + i), q=f"{tag}-{i}")


def shape(view: Sequence[Message]) -> list[tuple[str, str, str, str | None]]:
    """What the model would see of a view, and where each stand-in's original is kept."""
    return [(m.message_id, m.role, m.text, m.snapshot_id) for m in view]
