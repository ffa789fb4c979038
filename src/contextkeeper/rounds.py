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

Results are matched to calls as in `contextkeeper.toolpairs` (the most recent unanswered call
with that id). O(n).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .messages import Message
from .toolpairs import _pair

__all__ = ["Round", "RoundKind", "group_rounds"]

RoundKind = Literal["system", "tool-call", "exchange", "message"]


@dataclass(frozen=True, slots=True)
class Round:
    """A run ``messages[start:end]`` that is kept or dropped as one piece."""

    start: int
    end: int
    """Exclusive."""
    kind: RoundKind
    call_ids: tuple[str, ...] = ()
    """The tool calls made in the round, in order."""
    pending: tuple[str, ...] = ()
    """The calls of the round with no result in the history (yet)."""

    def __len__(self) -> int:
        return self.end - self.start

    @property
    def indices(self) -> range:
        """The message indices of the round."""
        return range(self.start, self.end)


def group_rounds(messages: Sequence[Message]) -> list[Round]:
    """Cut ``messages`` into rounds (see the module docstring); they cover the list exactly, in order."""
    n = len(messages)
    pairing = _pair(messages)
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
        elif role in ("system", "developer"):
            rounds.append(Round(i, i + 1, "system"))
            i += 1
        elif role == "user" and i + 1 < n and messages[i + 1].role == "assistant" and (i + 1) not in calls:
            rounds.append(Round(i, i + 2, "exchange"))
            i += 2
        else:
            rounds.append(Round(i, i + 1, "message"))
            i += 1
    return rounds
