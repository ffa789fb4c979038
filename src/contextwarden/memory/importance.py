"""Importance of a memory, 0..1: a heuristic scorer by default, an LLM scorer on request."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from ..exceptions import ContextWardenError
from ..llm.base import Model
from ..messages import Message

__all__ = ["HeuristicImportance", "ImportanceScorer", "LLMImportance"]


class ImportanceScorer(Protocol):
    """Rates how much a piece of text matters later, from 0 (chit-chat) to 1 (must not be lost)."""

    def __call__(self, text: str, *, role: str | None = None) -> float:
        """The importance of ``text`` said by ``role``."""
        ...


_CONSTRAINT = re.compile(
    r"\b(must|must not|never|always|do not|don't|required?|requirement|only|at most|at least|deadline|"
    r"no later than|should not|shouldn't|make sure|constraint|limit)\b",
    re.I,
)
_DECISION = re.compile(
    r"\b(decided|decision|we will|we'll|let's|agreed|chose|choose|going with|plan is|switch to)\b", re.I
)
_ERROR = re.compile(r"\b(error|exception|traceback|failed|failure|fails|crash|bug|broken|denied|timeout|fatal)\b", re.I)
_IDENTIFIER = re.compile(
    r"(\b[A-Z]{2,}-\d+\b|\b[0-9a-f]{7,40}\b|https?://\S+|(?<![\w.-])(?:[\w.-]++/)+[\w.-]+|\b\w+\.\w{1,4}\b|"
    r"\b[a-z]+_[a-z_]+\b|\b[a-z]+[A-Z]\w+\b|\b\w+\(\)|#\d+|\b\d{3,}\b)"
)
_CHITCHAT = re.compile(
    r"^\s*(hi|hello|hey|thanks|thank you|ok(ay)?|sure|great|cool|nice|lol|bye|good (morning|night)|sounds good)"
    r"\b[\s!.,]*$",
    re.I,
)


class HeuristicImportance:
    """Scores by cues: user constraints, decisions, errors and identifiers high; chit-chat low.

    Args:
        base: The score of text with no cue.
    """

    def __init__(self, *, base: float = 0.3) -> None:
        self.base = base

    def __call__(self, text: str, *, role: str | None = None) -> float:
        if not text.strip() or _CHITCHAT.match(text):
            return 0.05
        score = self.base
        if _CONSTRAINT.search(text):
            score += 0.3 if role in ("user", "system", None) else 0.15
        if _DECISION.search(text):
            score += 0.2
        if _ERROR.search(text):
            score += 0.2
        identifiers = len(_IDENTIFIER.findall(text))
        score += min(0.3, 0.1 * identifiers)
        if len(text) < 25 and identifiers == 0:
            score -= 0.1
        return max(0.0, min(1.0, score))


_PROMPT = (
    "Rate how important the following text is to remember for the rest of a long task, from 0 (chit-chat) "
    "to 10 (a user constraint, a decision, an error or an exact identifier that must not be lost). "
    "Answer with the number only.\n\nText:\n{text}"
)


class LLMImportance:
    """Asks a model (any `contextwarden.llm` client) for a 0..10 rating; falls back to a heuristic.

    Args:
        model: The client to ask.
        fallback: Used when the model fails or answers something that is not a number.
    """

    def __init__(self, model: Model, *, fallback: ImportanceScorer | None = None) -> None:
        self.model = model
        self.fallback: ImportanceScorer = fallback or HeuristicImportance()

    def __call__(self, text: str, *, role: str | None = None) -> float:
        messages: Sequence[Message] = [Message.user(_PROMPT.format(text=text[:4000]))]
        try:
            reply = self.model.request(list(messages)).text
        except ContextWardenError:
            # A failing scorer must never fail the write: the heuristic answers instead.
            return self.fallback(text, role=role)
        match = re.search(r"\d+(?:\.\d+)?", reply)
        if match is None:
            return self.fallback(text, role=role)
        return max(0.0, min(1.0, float(match.group()) / 10))
