"""What a full user section leaves out, and the closing line that names it.

Binding statements (rules, corrections, values) left out are named by step, one by one up to
`LISTED`; the other messages are counted with their range, so nothing leaves the section silently
and the model knows which ``read_context("#<step>")`` call brings each back.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

__all__ = ["LISTED", "LeftOut", "Stepped", "left_out_estimate", "left_out_line"]


class Stepped(Protocol):
    """An entry of the user section: the step it was said at and its leaving priority (0: binding)."""

    @property
    def step(self) -> int: ...

    @property
    def priority(self) -> int: ...


class LeftOut:
    """What a full section leaves out: binding steps one by one, the others by count and range."""

    __slots__ = ("binding", "others", "first", "last")

    def __init__(self) -> None:
        self.binding: list[int] = []
        self.others = 0
        self.first: int | None = None
        self.last: int | None = None

    def __len__(self) -> int:
        return len(self.binding) + self.others

    @property
    def binding_count(self) -> int:
        return len(self.binding)

    def add(self, item: Stepped) -> None:
        if item.priority == 0:
            self.binding.append(item.step)
            return
        self._other(item.step, 1)

    def _other(self, step: int, n: int) -> None:
        self.others += n
        self.first = step if self.first is None else min(self.first, step)
        self.last = step if self.last is None else max(self.last, step)

    def add_unread(
        self,
        items: Sequence[Stepped],
        index: int,
        seen: int,
        newest: Iterator[int],
        members: list[dict[int, None]],
        in_view: set[int],
    ) -> None:
        """``index`` and every older index of its class leave unread (``seen`` newer ones were read or skipped).

        ``newest`` goes on from ``index``; only the binding steps are walked, the others are counted.
        """
        if items[index].priority == 0:  # binding steps are named one by one (there are few)
            self.binding.append(items[index].step)
            self.binding.extend(items[i].step for i in newest if i not in in_view)
            return
        older = sum(len(m) for m in members) - seen - 1
        hidden = sum(1 for i in in_view if i < index and any(i in m for m in members))
        self._other(items[index].step, 1 + older - hidden)
        for m in members:
            oldest = next((i for i in m if i not in in_view), index)  # stops at the first one not in view
            self._other(items[min(oldest, index)].step, 0)


LISTED = 24
"""Binding steps a full section's closing line names one by one (the rest as a count and a range)."""


def _steps(steps: list[int]) -> str:
    if len(steps) <= LISTED:
        return ", ".join(f"#{s}" for s in steps)
    listed = ", ".join(f"#{s}" for s in steps[-LISTED:])
    return f"{listed} and {len(steps) - LISTED} older ones (#{steps[0]}..#{steps[-LISTED - 1]})"


def left_out_estimate(binding: int) -> int:
    """Tokens of `left_out_line` with ``binding`` steps left out, estimated (about three per listed step)."""
    return 40 + 3 * min(binding, LISTED)


def left_out_line(left: LeftOut, max_tokens: int) -> str:
    """The closing line of a full section: binding steps left out by number, the rest counted, and how to read them."""
    binding = sorted(left.binding)
    listed: list[str] = []
    if binding:
        listed.append("rules, corrections and values at " + _steps(binding))
    if left.others:
        listed.append(f"{left.others} other messages (#{left.first}..#{left.last})")
    return (
        f"Not shown (this section is limited to {max_tokens} tokens): {'; '.join(listed)}; "
        'read_context("#<step>") shows each.'
    )
