"""The locomo benchmark: evidence recall of long-term memory on LoCoMo conversations, no LLM.

Each conversation is one session: its turns go into a `LongTermMemory` in order, with the session's
day ("8 May 2023", searched and rendered as the header of its turns) and the dialogue id as
metadata, each searchable (and embedded) with the words of the turns beside it in its session
(`with_neighbour_context`), which are not rendered. For each question,
the context is assembled from the question text alone (recall, then packing into B tokens of
cl100k), and scored:

- evidence recall: share of the evidence turns whose text occurs in the context;
- all-evidence rate: share of questions with every evidence turn in the context;
- answer containment: share of questions (with an answer) whose normalized answer occurs in it.

Evidence ids are repaired where the intent is clear and dropped otherwise: ``D:11:26`` is read as
``D11:26``, ``D30:05`` as ``D30:5``, a packed ``"D8:6; D9:17"`` as two ids; an id that names no
turn of the conversation (``"D"``) is dropped, and a question left without evidence is not
counted in evidence recall.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._json import BadJSON, loads as bounded_loads
from ..exceptions import ConfigError
from ..memory.chunking import with_neighbour_context
from ..memory.embedders import Embedder
from ..memory.longterm import LongTermMemory
from ..memory.records import Hit, MemoryRecord
from ..memory.render import pack_hits, render_hits
from ..memory.scoring import ScoreWeights
from ..tokens.base import TokenCounter

__all__ = ["ABLATIONS", "CATEGORIES", "CachedEmbedder", "Variant", "repair_evidence", "run_locomo", "select_samples"]

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One retrieval configuration of the ablation."""

    name: str
    dense: bool
    neighbours: int
    weights: ScoreWeights


_NO_PRIOR = ScoreWeights(recency=0.0, importance=0.0)
ABLATIONS = (
    Variant(name="keyword", dense=False, neighbours=0, weights=_NO_PRIOR),
    Variant(name="+dense", dense=True, neighbours=0, weights=_NO_PRIOR),
    Variant(name="+neighbours", dense=True, neighbours=1, weights=_NO_PRIOR),
    Variant(name="+recency/importance", dense=True, neighbours=1, weights=ScoreWeights()),
)
"""Each step adds one part; the last is the library's default configuration."""


class CachedEmbedder:
    """Wraps an embedder so that each distinct text is embedded once across the ablation's variants."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self._cache: dict[str, list[float]] = {}

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            self._cache.update(zip(missing, self.inner.embed(missing), strict=True))
        return [self._cache[t] for t in texts]


class _CachedCounter:
    """Counts each distinct line once: the same turns are packed for every question and budget."""

    def __init__(self, inner: TokenCounter) -> None:
        self.inner = inner
        self._cache: dict[str, int] = {}

    def count_text(self, text: str) -> int:
        value = self._cache.get(text)
        if value is None:
            value = self._cache[text] = self.inner.count_text(text)
        return value

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


_ID = re.compile(r"D:?(\d+):0*(\d+)")


def repair_evidence(raw: Sequence[str], known: set[str]) -> list[str]:
    """The evidence ids of ``raw`` that name turns in ``known``, repaired (see the module docstring)."""
    out: list[str] = []
    for item in raw:
        for match in _ID.finditer(str(item)):
            dia_id = f"D{int(match.group(1))}:{int(match.group(2))}"
            if dia_id in known and dia_id not in out:
                out.append(dia_id)
    return out


def _normalize(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.casefold()).split())


def _parse_date(text: str) -> float:
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y"):
        try:
            return dt.datetime.strptime(text.strip(), fmt).replace(tzinfo=dt.UTC).timestamp()
        except ValueError:
            continue
    return 0.0


def _day(date: str, start: float) -> str:
    # The day alone ("8 May 2023"): questions ask for dates, and the time of day would cost five
    # tokens in every header of the context.
    return dt.datetime.fromtimestamp(start, tz=dt.UTC).strftime("%-d %B %Y") if start else date


def _turn_keywords(turn: dict[str, Any]) -> dict[str, str]:
    # A shared photo's caption is searchable but not rendered: it costs tokens in every context.
    caption = turn.get("blip_caption")
    return {"keywords": f"photo of {caption}"} if caption else {}


def conversation_records(sample: dict[str, Any]) -> list[MemoryRecord]:
    """The turns of one LoCoMo conversation as memories, in order."""
    conv = sample["conversation"]
    speaker_a = conv.get("speaker_a")
    sessions = sorted(
        (int(k.split("_")[1]), v) for k, v in conv.items() if re.fullmatch(r"session_\d+", k) and isinstance(v, list)
    )
    records: list[MemoryRecord] = []
    for number, turns in sessions:
        date = str(conv.get(f"session_{number}_date_time", ""))
        start = _parse_date(date)
        for i, turn in enumerate(turns):
            records.append(
                MemoryRecord(
                    text=str(turn.get("text", "")),
                    memory_id=str(turn["dia_id"]),
                    session_id=str(sample.get("sample_id", "conversation")),
                    message_ids=(str(turn["dia_id"]),),
                    created_at=start + i,
                    role="user" if turn.get("speaker") == speaker_a else "assistant",
                    speaker=str(turn.get("speaker", "")),
                    position=len(records),
                    group=f"session {number}",
                    metadata={"date": _day(date, start), "dia_id": str(turn["dia_id"]), **_turn_keywords(turn)},
                )
            )
    # a reply is found by the words of the question it answers (and the turn after it), not rendered
    return with_neighbour_context(records)


def _empty() -> dict[str, float]:
    return {"evidence_found": 0, "evidence_total": 0, "all": 0, "answered": 0, "with_answer": 0, "questions": 0}


def _summary(acc: dict[str, float]) -> dict[str, Any]:
    return {
        "evidence_recall": acc["evidence_found"] / acc["evidence_total"] if acc["evidence_total"] else 0.0,
        "all_evidence": acc["all"] / acc["questions"] if acc["questions"] else 0.0,
        "answer_containment": acc["answered"] / acc["with_answer"] if acc["with_answer"] else 0.0,
        "questions": int(acc["questions"]),
    }


def load_samples(path: Path) -> list[dict[str, Any]]:
    """The conversations of a LoCoMo JSON file (a list of ``{conversation, qa}`` objects).

    Raises:
        ConfigError: the file is not JSON (or nests too deep) or not of that shape, naming what is wrong.
    """
    try:
        samples = bounded_loads(path.read_bytes())
    except BadJSON as exc:
        raise ConfigError(f"{path}: the file {exc.problem}; expected LoCoMo's JSON list of conversations.") from None
    if not isinstance(samples, list) or not samples:
        raise ConfigError(f"{path}: expected a non-empty JSON list of LoCoMo conversations.")
    for n, sample in enumerate(samples):
        conversation = sample.get("conversation") if isinstance(sample, dict) else None
        qa = sample.get("qa") if isinstance(sample, dict) else None
        turns_ok = isinstance(conversation, dict) and all(
            isinstance(t, dict) and "dia_id" in t
            for k, v in conversation.items()
            if re.fullmatch(r"session_\d+", k) and isinstance(v, list)
            for t in v
        )
        if not (turns_ok and isinstance(qa, list) and all(isinstance(q, dict) for q in qa)):
            raise ConfigError(
                f"{path}: conversation {n} is not a LoCoMo sample: expected {{conversation: {{session_N: [{{dia_id, "
                "text, speaker}]}}, qa: [{question, answer, evidence}]}"
            )
    return samples


def select_samples(samples: list[dict[str, Any]], ids: Sequence[str] | None) -> list[dict[str, Any]]:
    """The samples whose ``sample_id`` is in ``ids``, in the file's order (all of them when ``ids`` is None).

    Raises:
        ConfigError: an id names no sample of the file (the error lists the ids it has).
    """
    if ids is None:
        return samples
    have = [str(s.get("sample_id", "")) for s in samples]
    unknown = [i for i in ids if i not in have]
    if unknown or not ids:
        raise ConfigError(
            f"conversations {', '.join(unknown) or '(none)'}: not in the file; give some of {', '.join(have)}."
        )
    return [s for s, name in zip(samples, have, strict=True) if name in ids]


def run_locomo(
    data: Path,
    budgets: Sequence[int],
    *,
    counter: TokenCounter,
    embedder: Embedder | None,
    variants: Sequence[Variant] = ABLATIONS,
    progress: Callable[[int, int], None] | None = None,
    conversations: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Run every variant over the conversations of ``data`` (those named in ``conversations``, else all);
    the last variant's figures head the result."""
    samples = select_samples(load_samples(data), conversations)
    counter = _CachedCounter(counter)
    cached = CachedEmbedder(embedder) if embedder is not None else None
    usable = [v for v in variants if not v.dense or cached is not None]
    total = sum(len(s["qa"]) for s in samples) * len(usable)
    done = 0
    results: dict[str, dict[int, dict[int | str, dict[str, float]]]] = {}
    per_conversation: dict[int, dict[str, dict[str, float]]] = {}
    started = time.perf_counter()
    for variant in usable:
        per_budget: dict[int, dict[int | str, dict[str, float]]] = {b: {"all": _empty()} for b in budgets}
        # each conversation's own figures (of the last variant): a change that lifts the total but
        # lowers half the conversations does not generalize
        per_conversation = {b: {} for b in budgets}
        for sample in samples:
            name = str(sample.get("sample_id", f"conversation {len(per_conversation[budgets[0]]) + 1}"))
            records = conversation_records(sample)
            memory = LongTermMemory(
                embedder=cached if variant.dense else None,
                weights=variant.weights,
                neighbours=variant.neighbours,
                candidates=len(records),
                tenant=str(sample.get("sample_id", "conversation")),
            )
            memory.add_many(records)
            texts = {r.memory_id: r.text for r in records}
            now = max(r.created_at for r in records) + 86400
            for qa in sample["qa"]:
                hits = memory.recall(str(qa["question"]), limit=len(records), now=now, touch=False)
                evidence = repair_evidence(qa.get("evidence", []), set(texts))
                answer = qa.get("answer")
                for budget in budgets:
                    context = render_hits(pack_hits(hits, budget_tokens=budget, counter=counter))
                    _score(per_budget[budget], qa.get("category"), context, evidence, texts, answer)
                    own = per_conversation[budget].setdefault(name, _empty())
                    _score({"all": own}, None, context, evidence, texts, answer, categories=False)
                done += 1
                if progress is not None:
                    progress(done, total)
        results[variant.name] = per_budget
    final = results[usable[-1].name]
    return {
        "dataset": str(data),
        "conversations": [str(s.get("sample_id", "")) for s in samples],
        "counter": "tiktoken:cl100k_base",
        "embedder": embedder.name if embedder is not None else None,
        "variant": usable[-1].name,
        "budgets": {str(b): _budget_result(final[b]) for b in budgets},
        "by_conversation": {
            str(b): {name: _summary(acc) for name, acc in per_conversation[b].items()} for b in budgets
        },
        "spread": {
            str(b): _spread([_summary(acc)["evidence_recall"] for acc in per_conversation[b].values()]) for b in budgets
        },
        "ablation": {name: {str(b): _summary(per[b]["all"]) for b in budgets} for name, per in results.items()},
        "seconds": round(time.perf_counter() - started, 2),
    }


def _budget_result(per: dict[int | str, dict[str, float]]) -> dict[str, Any]:
    out = _summary(per["all"])
    out["by_category"] = {
        f"{key} {CATEGORIES.get(key, '?')}": _summary(acc)
        for key, acc in sorted((k, v) for k, v in per.items() if isinstance(k, int))
    }
    return out


def _spread(values: list[float]) -> dict[str, float]:
    """The lowest, highest and middle of the conversations' evidence recall, and their spread."""
    if not values:
        return {"min": 0.0, "median": 0.0, "max": 0.0, "range": 0.0}
    ordered = sorted(values)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return {"min": ordered[0], "median": median, "max": ordered[-1], "range": ordered[-1] - ordered[0]}


def _score(
    per: dict[int | str, dict[str, float]],
    category: object,
    context: str,
    evidence: list[str],
    texts: dict[str, str],
    answer: object,
    *,
    categories: bool = True,
) -> None:
    key = category if isinstance(category, int) else 0
    normalized = _normalize(context)
    for acc in (per["all"], per.setdefault(key, _empty())) if categories else (per["all"],):
        acc["questions"] += 1
        found = sum(1 for e in evidence if texts[e] in context)
        acc["evidence_found"] += found
        acc["evidence_total"] += len(evidence)
        acc["all"] += 1 if evidence and found == len(evidence) else 0
        if answer is not None and _normalize(str(answer)):
            acc["with_answer"] += 1
            acc["answered"] += 1 if _normalize(str(answer)) in normalized else 0


def hits_context(hits: Sequence[Hit], budget: int, counter: TokenCounter) -> str:
    """The context a budget gets from ranked hits (what the benchmark scores)."""
    return render_hits(pack_hits(hits, budget_tokens=budget, counter=counter))
