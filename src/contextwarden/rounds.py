"""Rounds: the atomic units compaction keeps, clears, summarizes or drops as one piece.

`group_rounds` cuts a history into consecutive, non-overlapping rounds that cover it exactly:

* a system or developer message is a ``"system"`` round of its own;
* an assistant message with tool calls, together with ALL its results, is a ``"tool-call"``
  round; parallel calls are one round. When a result is displaced (other messages between it
  and its call), the round stretches to include it and everything in between, so a call is never
  separated from its results;
* a user message directly followed by an assistant message without tool calls is an
  ``"exchange"`` round;
* anything else (a user message before a tool-call round, a lone assistant reply, an orphan
  result) is a ``"message"`` round.

Results are matched to calls as in `contextwarden.toolpairs` (the most recent unanswered call
with that id). O(n).

This is the one round model: the compaction engine's round book (`compaction.book`) makes the
same rounds one message at a time, with the same kinds and the same rule (`opening_kind`,
`is_reply`). A book cannot stretch a round over rounds it already made, so there a result that
arrives after later messages joins its call as ``late`` instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .messages import INSTRUCTION_ROLES, Message
from .toolpairs import pair_up

__all__ = ["Round", "RoundKind", "group_rounds", "is_reply", "opening_kind"]

RoundKind = Literal["system", "tool-call", "exchange", "message"]


@dataclass(slots=True)
class Round:
    """A run ``messages[start:end]`` (plus ``late`` results) that is kept or dropped as one piece."""

    start: int
    end: int
    """Exclusive."""
    kind: RoundKind
    call_ids: tuple[str, ...] = ()
    """The tool calls made in the round, in order."""
    pending: tuple[str, ...] = ()
    """The calls of the round with no result in the history (yet)."""
    late: tuple[int, ...] = ()
    """Indices past ``end`` that belong to the round: results that arrived after later rounds had
    begun (only a round book, which groups one message at a time, makes them)."""

    def __len__(self) -> int:
        return self.end - self.start + len(self.late)

    @property
    def indices(self) -> range | list[int]:
        """The message indices of the round, in order."""
        if self.late:
            return [*range(self.start, self.end), *self.late]
        return range(self.start, self.end)

    def add_index(self, index: int) -> None:
        """Let message ``index`` (the newest of the history) join the round."""
        if index == self.end and not self.late:
            self.end += 1
        else:
            self.late = (*self.late, index)


def opening_kind(m: Message) -> RoundKind:
    """The kind of the round that ``m`` begins (a lone user message becomes an exchange by `is_reply`)."""
    if m.role in INSTRUCTION_ROLES:
        return "system"
    if m.role == "assistant" and m.tool_calls:
        return "tool-call"
    return "message"


def is_reply(m: Message) -> bool:
    """Whether ``m``, right after a lone user message, joins it as its reply (an ``"exchange"`` round)."""
    return m.role == "assistant" and not m.tool_calls


def group_rounds(messages: Sequence[Message]) -> list[Round]:
    """Cut ``messages`` into rounds (see the module docstring); they cover the list exactly, in order."""
    n = len(messages)
    pairing = pair_up(messages)
    calls, results = pairing.calls, pairing.results
    rounds: list[Round] = []
    i = 0
    while i < n:
        role = messages[i].role
        made = calls.get(i)
        if made is not None:
            found = results[i]
            last = found[-1] if found else i
            if last == i + len(found):
                # The usual case: the call's results follow it directly.
                if len(found) == len(made):
                    rounds.append(Round(i, last + 1, "tool-call", made))
                else:
                    done = {messages[r].tool_call_id for r in found}
                    rounds.append(Round(i, last + 1, "tool-call", made, tuple(c for c in made if c not in done)))
                i = last + 1
                continue
            j = i + 1
            while j <= last:  # a displaced result pulls in whatever sits before it
                more = results.get(j)
                if more:
                    last = max(last, more[-1])
                j += 1
            call_ids: list[str] = []
            pending: list[str] = []
            for a in range(i, last + 1):
                if a in calls:
                    done = {messages[r].tool_call_id for r in results[a]}
                    call_ids.extend(calls[a])
                    pending.extend(cid for cid in calls[a] if cid not in done)
            rounds.append(Round(i, last + 1, "tool-call", tuple(call_ids), tuple(pending)))
            i = last + 1
        elif role in INSTRUCTION_ROLES:
            rounds.append(Round(i, i + 1, "system"))
            i += 1
        elif role == "user" and i + 1 < n and (i + 1) not in calls and is_reply(messages[i + 1]):
            rounds.append(Round(i, i + 2, "exchange"))
            i += 2
        else:
            rounds.append(Round(i, i + 1, "message"))
            i += 1
    return rounds
