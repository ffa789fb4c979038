"""The embedded default summarizer: a structured summary extracted from the messages, no LLM.

`ExtractiveSummarizer` reads the messages that leave the view (and the previous running summary)
and writes the sections Task, Completed steps, Current state, Key data, User constraints, Errors
and fixes, Open items and Next step within the request's token budget. Nothing is paraphrased:
identifiers (ids, paths, numbers, dates, URLs, function names, error strings) and the sentences
in which the user set constraints are copied verbatim, ranked with `keyinfo.fact_rank`. The
output depends on the input only, so the same history always gives the same summary (and the
provider's prompt cache sees the same prefix).

The previous summary is parsed back into its sections, whoever wrote it (this summarizer or the
LLM summarizer, which asks its model for the same headings), and folded in: the task and the
constraints stay, steps and errors accumulate (the oldest steps roll up into a count when room
runs out), and open items that the new messages settled are dropped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from ..keyinfo import extract_identifiers, fact_rank, key_lines, salient_facts
from ..ledger_entries import describe_call, request_facts
from ..messages import INSTRUCTION_ROLES, Message
from ..provenance import admit, admitted
from ..tokens import TokenCounter, get_counter
from ._sections import Sections, clip, compose, parse_summary
from .base import SummaryRequest

__all__ = [
    "AsyncExtractiveSummarizer",
    "ExtractiveSummarizer",
    "condense",
    "constraint_sentences",
    "fit_summary",
    "message_identifiers",
]

# Words by which a user states a requirement, a limit or a preference. Matching sentences are
# kept verbatim: a paraphrase of "never use the gift card" is how agents end up using it.
_CONSTRAINT_RE = re.compile(
    r"\b(?:must(?:n't)?|should(?:n't)?|don't|do not|doesn't|does not|never|only|needs?|needed|require[sd]?"
    r"|required|deadline|budget|at (?:most|least|the latest)|no (?:more|later|less) than|not (?:more|later) than"
    r"|maximum|minimum|prefer(?:red|ably)?|avoid|without|can't|cannot|won't|make sure|ensure|always"
    r"|not allowed|limit(?:ed)?|before|until|by (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday"
    r"|tomorrow|tonight|noon|midnight|eod|the end|end of|\d))\b",
    re.IGNORECASE,
)
# What an assistant says it will do next, and what it says is still to do: the summary's next step
# and open items, and the fidelity check's open items.
INTENT_RE = re.compile(
    r"\b(?:I will|I'll|I am going to|I'm going to|next,? I|next step|let me|I need to|we need to|then I|I plan to"
    r"|I'm about to|now I)\b",
    re.IGNORECASE,
)
TODO_RE = re.compile(r"\b(?:TODO|FIXME|still need to|remaining:|not yet done|left to do)\b", re.IGNORECASE)
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9])|\n+")

_SCAN_CHARS = 20000
"""Characters of a non-JSON tool output scanned for identifiers (bounds the cost of huge logs)."""
_GENERIC = frozenset({"Error", "ERROR", "Exception", "Warning", "WARNING", "Traceback", "FAILED", "PASSED"})
"""Words the identifier scan catches that name no particular thing."""
_HEAD_FACTS = 24
"""Identifiers of one tool output that rank as its head; the rest rank one step lower."""
_SAID_CHARS = 100_000
"""Characters of user and assistant text searched for references to tool-output facts (cost bound)."""


def _rank(scored: dict[str, tuple[int, int]], tool_only: set[str], said: str) -> list[str]:
    """Identifiers best first: `fact_rank`, adjusted by who mentioned them, then first appearance.

    A fact the user or the agent wrote (or referred to, for a tool output's value) keeps its rank;
    one seen only in tool outputs ranks one step lower, two for a bare number (prices, counts and
    line numbers in an output are rarely what the agent needs again).
    """
    keyed: list[tuple[int, int, str]] = []
    for f, (rank, order) in scored.items():
        if f in tool_only:
            if f.lower() in said:
                rank = max(0, rank - 1)  # a value the conversation refers to
            else:
                rank += 2 if not any(ch.isalpha() for ch in f) else 1
        keyed.append((rank, order, f))
    keyed.sort()
    return [f for _, _, f in keyed]


def split_sentences(text: str) -> list[str]:
    """``text`` as sentences, whitespace collapsed (the fidelity check reads open items with it too)."""
    return [s for s in (" ".join(p.split()) for p in _SENTENCE_RE.split(text)) if s]


def constraint_sentences(text: str, *, max_chars: int = 400) -> list[str]:
    """Sentences of ``text`` that state a requirement, limit, deadline or preference, verbatim.

    Sentences longer than ``max_chars`` are skipped (they are prose, not a constraint).
    """
    return [s for s in split_sentences(text) if len(s) <= max_chars and _CONSTRAINT_RE.search(s)]


def message_identifiers(message: Message, *, scan_chars: int = _SCAN_CHARS) -> list[str]:
    """The identifiers of one message worth keeping, best first (`keyinfo.fact_rank`).

    User text gives its identifiers and proper names; assistant text and tool-call arguments
    their identifiers; tool outputs their identifiers (a JSON output's short values), scanning
    at most ``scan_chars`` characters of a non-JSON output.
    """
    text = message.text
    found: list[str] = []
    if message.role == "user":
        found += request_facts(text)
        if len(text) > 1200:
            found += extract_identifiers(text[1200:scan_chars])
    elif message.role == "tool":
        found += admitted(salient_facts(text, scan_chars=scan_chars))
    elif message.role == "assistant":
        if text:
            found += salient_facts(text, scan_chars=scan_chars)
        for call in message.tool_calls:
            found += salient_facts(call.arguments, scan_chars=scan_chars)
    # markdown emphasis around an id ("**JG7FMM**") is not part of it
    cleaned = (" ".join(f.split()).strip("*`~") for f in found)
    ranked = [f for f in dict.fromkeys(cleaned) if len(f) > 1 and f not in _GENERIC and fact_rank(f) < 5]
    return sorted(ranked, key=fact_rank)


# JSON keys whose values name a thing: records are looked up again by these (ids, names, paths...).
_KEY_RE = re.compile(
    r"(?:^|_)(?:id|ids|name|names|path|paths|file|filename|url|uri|email|code|number|date|error)$",
    re.IGNORECASE,
)


def _keyed(value: object, key: str = "", depth: int = 0) -> Iterator[str]:
    if depth > 12:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _keyed(v, str(k), depth + 1)
    elif isinstance(value, list):
        for v in value:
            yield from _keyed(v, key, depth + 1)
    elif isinstance(value, str | int) and not isinstance(value, bool) and key and _KEY_RE.search(key):
        text = str(value)
        if 1 < len(text) <= 80:
            yield text


def _keyed_values(text: str) -> set[str]:
    """Values of a JSON document stored under identifier-like keys (``*_id``, ``*name``, ``path``, ``url``...)."""
    stripped = text.lstrip()
    if not stripped or stripped[0] not in "[{" or len(text) > 65536:
        return set()
    try:
        return set(_keyed(json.loads(text)))
    except (ValueError, RecursionError):
        return set()


def failed_result(message: Message) -> bool:
    """Whether a tool result reports a failure (flagged as an error, or its text opens like one)."""
    if message.is_error:
        return True
    head = message.text[:400].lstrip().lower()
    return head.startswith(("error", "traceback", "exception", "fatal")) or '"error"' in head[:40]


_ERROR_NAME_RE = re.compile(r"\b\w*(?:Error|Exception|Failure|Refused|Denied)\b|\berror\b|\bfailed\b", re.IGNORECASE)


def _error_line(message: Message) -> str:
    """The line that says what went wrong: a named error first, not a traceback's header."""
    # a line that gives orders stays in its tool output (provenance): it is never a summary's error line
    lines = admitted(key_lines(message.text, limit=8, max_line_chars=200))
    found = [ln for ln in lines if not ln.startswith("Traceback")]
    named = [ln for ln in found if _ERROR_NAME_RE.search(ln)]
    if named or found:
        return (named or found)[0]
    first = message.text.strip().split("\n", 1)[0][:200]
    return first if admit(first) else "an error (see the step's output)"


@dataclass
class _Step:
    index: int
    names: tuple[str, ...]
    desc: str
    args: frozenset[str] = frozenset()
    """Identifiers in the calls' arguments (a retry of the same call shares them)."""
    results: list[Message] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(failed_result(r) for r in self.results)


class BaseExtractive:
    """The extraction and folding logic shared by the sync and async twins."""

    supports_degraded = True
    checks_identifiers = True
    """This summarizer keeps identifiers by its own rules; the summarize layer's identifier check is skipped."""
    """It never calls a model, so it can answer while the session's summarizer breaker is open."""

    def __init__(self, *, counter: TokenCounter | None = None, facts_share: float = 0.6) -> None:
        self.counter: TokenCounter = counter if counter is not None else get_counter("heuristic")
        """Counts the summary against ``request.max_tokens``."""
        self.facts_share = facts_share
        """Share of the budget identifiers may take when they do not all fit."""

    def take_ready(self, summary: str | None, span: tuple[str, str] | None = None) -> str | None:
        """None: every summary is final when returned (see `SummarizerCapabilities.take_ready`)."""
        return None

    def identifiers(self, request: SummaryRequest) -> list[str]:
        """Every identifier the summary tries to keep, best first (what fits is kept in this order)."""
        return self._build(request).ids

    def render(self, request: SummaryRequest) -> str:
        """The summary text (what ``summarize`` returns)."""
        return compose(
            self._build(request), max_tokens=request.max_tokens, counter=self.counter, facts_share=self.facts_share
        )

    def _build(self, request: SummaryRequest) -> Sections:
        prev = parse_summary(request.previous) if request.previous else Sections()
        messages = [m for m in request.messages if m.role not in INSTRUCTION_ROLES]
        out = Sections(
            task=list(prev.task),
            steps=list(prev.steps),
            earlier_steps=prev.earlier_steps,
            key=list(prev.key),
            constraints=list(prev.constraints),
            errors=list(prev.errors),
            other=list(prev.other),
        )
        # identifiers: (rank + penalty, order); the previous summary's come first at equal rank
        scored: dict[str, tuple[int, int]] = {}
        tool_only: set[str] = set()

        def score(facts: Sequence[str], *, tool: bool = False, keyed: set[str] | None = None) -> None:
            for n, f in enumerate(facts):
                old = scored.get(f)
                if keyed and f in keyed:
                    # a record's id, name, path...: ranks with what the conversation itself mentions
                    rank = min(fact_rank(f), 1)
                    scored[f] = (rank if old is None else min(rank, old[0]), len(scored) if old is None else old[1])
                    tool_only.discard(f)
                elif old is None:
                    # the long tail of one output's values (a listing, a log) ranks below its head
                    scored[f] = (fact_rank(f) + (1 if tool and n >= _HEAD_FACTS else 0), len(scored))
                    if tool:
                        tool_only.add(f)
                elif not tool:
                    tool_only.discard(f)
                    scored[f] = (min(fact_rank(f), old[0]), old[1])

        score(prev.ids)
        prose = "\n".join([*prev.task, *prev.steps, *prev.state, *prev.key, *prev.errors, *prev.open, *prev.other])
        score([f for f in extract_identifiers(prose) if fact_rank(f) < 5])
        said: list[str] = []
        steps: dict[str, _Step] = {}
        ordered: list[_Step | Message] = []
        user_seen = assistant_seen = False
        succeeded: set[str] = set()
        last_text: Message | None = None
        for i, m in enumerate(messages):
            keyed = _keyed_values(m.text) if m.role == "tool" else None
            score(message_identifiers(m), tool=m.role == "tool", keyed=keyed)
            if m.role != "tool":
                said.append(m.text)
                said.extend(c.arguments for c in m.tool_calls)
            if m.role == "user":
                user_seen = True
                text = " ".join(m.text.split())
                if text:
                    out.task.append(text if not out.task else "user: " + text)
                    for sentence in constraint_sentences(m.text):
                        if sentence not in out.constraints:
                            out.constraints.append(sentence)
                    last_text = m
            elif m.role == "assistant":
                assistant_seen = True
                if m.tool_calls:
                    desc = "; ".join(describe_call(c.name, c.arguments, limit=160) for c in m.tool_calls)
                    args = frozenset(f for c in m.tool_calls for f in salient_facts(c.arguments, limit=32))
                    step = _Step(index=i, names=tuple(c.name for c in m.tool_calls), desc=desc, args=args)
                    for c in m.tool_calls:
                        steps[c.call_id] = step
                    ordered.append(step)
                if m.text.strip():
                    ordered.append(m)
                    last_text = m
            elif m.role == "tool":
                owner = steps.get(m.tool_call_id or "")
                if owner is not None:
                    owner.results.append(m)

        for item in ordered:
            if isinstance(item, Message):
                first = split_sentences(item.text)[:1]
                if first:
                    out.steps.append("replied: " + first[0])
                continue
            result = item.results[0].text.strip() if len(item.results) == 1 else ""
            if item.failed:
                out.steps.append(f"{item.desc} → failed")
            elif not item.results:
                out.steps.append(f"{item.desc} → no result")
            elif result and len(result) <= 60 and "\n" not in result and admit(result):
                out.steps.append(f"{item.desc} → {result}")
            else:
                out.steps.append(item.desc)
            if not item.failed and item.results:
                succeeded.update(item.names)
        for item in ordered:
            if isinstance(item, Message) or not item.failed:
                continue
            bad = next(r for r in item.results if failed_result(r))
            line = f"{item.desc}: {_error_line(bad)}"
            later = next(
                (
                    s
                    for s in ordered
                    if isinstance(s, _Step)
                    and s.index > item.index
                    and not s.failed
                    and set(s.names) & set(item.names)
                    and (s.args & item.args or not item.args)
                ),
                None,
            )
            if later is not None:
                line += f" → fixed by {later.desc}"
            else:
                out.open.append(f"unresolved: {item.desc}")
            out.errors.append(line)

        # previous open items the new messages settled are dropped
        kept_open: list[str] = []
        for line in prev.open:
            low = line.lower()
            if low.startswith("awaiting user") and user_seen:
                continue
            if low.startswith("user request pending") and assistant_seen:
                continue
            if low.startswith("unresolved: "):
                name = line[len("unresolved: ") :].split("(", 1)[0].strip()
                if name in succeeded:
                    continue
            kept_open.append(line)
        out.open = [*kept_open, *out.open]

        if last_text is not None and last_text.role == "assistant":
            sentences = split_sentences(last_text.text)
            out.state = ["last reply: " + " ".join(sentences[:3])] if sentences else list(prev.state)
            question = next((s for s in reversed(sentences) if s.endswith("?")), None)
            if question is not None and messages and messages[-1] is last_text:
                out.open.append("awaiting user answer: " + question)
            intent = [s for s in sentences if INTENT_RE.search(s)]
            if intent:
                out.next = [intent[-1]]
            out.open.extend(s for s in sentences if TODO_RE.search(s) and s not in out.open)
        elif last_text is not None:
            out.state = list(prev.state)
            out.open.append("user request pending: " + " ".join(last_text.text.split()))
        else:
            out.state = list(prev.state)
        if ordered and isinstance(ordered[-1], _Step):
            last = ordered[-1]
            out.state.append(f"last action: {last.desc} → {'failed' if last.failed else 'ok'}")
        out.ids = _rank(scored, tool_only, "\n".join(said)[:_SAID_CHARS].lower())
        return out


class ExtractiveSummarizer(BaseExtractive):
    """Deterministic structured summaries without a model (the `Summarizer` the session uses by default).

    Args:
        counter: Counts the summary against ``request.max_tokens`` (default: the heuristic counter);
            pass the session's counter so the budget means the same thing to both.
        facts_share: Share of the budget identifiers may take when they do not all fit beside the
            prose (when they do, all of them are kept).

    Example::

        session = Session(window=32_000, summarizer=ExtractiveSummarizer(counter=get_counter("tiktoken:cl100k_base")))
    """

    def summarize(self, request: SummaryRequest) -> str:
        """The new running summary: ``request.previous`` with ``request.messages`` folded in."""
        return self.render(request)


class AsyncExtractiveSummarizer(BaseExtractive):
    """The async twin of `ExtractiveSummarizer` (an `AsyncSummarizer`; same arguments, same output)."""

    async def summarize(self, request: SummaryRequest) -> str:
        """The new running summary (see `ExtractiveSummarizer.summarize`); runs inline, it is CPU-cheap."""
        return self.render(request)


def fit_summary(text: str, max_tokens: int, *, counter: TokenCounter | None = None) -> str:
    """A structured summary shortened to ``max_tokens`` section by section, identifiers and constraints first.

    For a summary that must shrink after it was written (less room in the view than it was
    written for): unlike a cut at a character count, no section is lost whole and no identifier
    is cut in half. Text that fits is returned unchanged.
    """
    counter = counter if counter is not None else get_counter("heuristic")
    if counter.count_text(text) <= max_tokens:
        return text
    return compose(parse_summary(text), max_tokens=max_tokens, counter=counter, clip_scale=2)


def condense(text: str, max_tokens: int, *, counter: TokenCounter | None = None) -> str:
    """``text`` shortened to ``max_tokens``: whole paragraphs, then the identifiers of the rest.

    Kept first: the first paragraph, the last one (conclusions), and paragraphs that report
    errors or state constraints; then the others in order while they fit; a ``Key data:`` line
    lists the identifiers of the paragraphs left out. Text that fits is returned unchanged.
    """
    counter = counter if counter is not None else get_counter("heuristic")
    if max_tokens <= 0:
        return ""
    if counter.count_text(text) <= max_tokens:
        return text
    paras = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    if len(paras) == 1:
        paras = [p for p in text.splitlines() if p.strip()]
    order = list(range(len(paras)))
    important = [i for i in order if key_lines(paras[i], limit=1) or constraint_sentences(paras[i])]
    priority = list(dict.fromkeys([0, len(paras) - 1, *important, *order]))
    room = max_tokens * 0.75
    chosen: set[int] = set()
    used = 0
    for i in priority:
        cost = counter.count_text(paras[i]) + 1
        if used + cost <= room:
            chosen.add(i)
            used += cost
    if not chosen:
        chosen.add(0)
        paras[0] = clip(paras[0], int(room), counter)

    def render(extra: list[str]) -> str:
        body: list[str] = []
        for i in range(len(paras)):
            if i in chosen:
                body.append(paras[i])
            elif not body or body[-1] != "[…]":
                body.append("[…]")
        if extra:
            body.append("Key data: " + " · ".join(extra))
        return "\n\n".join(body)

    kept_text = "\n".join(paras[i] for i in chosen)
    dropped = "\n".join(paras[i] for i in range(len(paras)) if i not in chosen)
    facts = [f for f in salient_facts(dropped) if f not in kept_text]
    lo, hi = 0, len(facts)
    while lo < hi:  # the most identifiers that fit
        mid = (lo + hi + 1) // 2
        if counter.count_text(render(facts[:mid])) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    out = render(facts[:lo])
    return out if counter.count_text(out) <= max_tokens else clip(out, max_tokens, counter)
