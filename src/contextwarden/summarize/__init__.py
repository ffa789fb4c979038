"""Summarizers for the summarize layer and the fidelity check.

* `ExtractiveSummarizer` / `AsyncExtractiveSummarizer` — the embedded default: structured
  sections extracted verbatim from the messages, deterministic, no model.
* `LLMSummarizer` / `AsyncLLMSummarizer` — a model writes the same sections; checked, bounded
  (map-reduce), with a deadline and the extractive summary as fallback.
* `BackgroundSummarizer` / `AsyncBackgroundSummarizer` — the extractive summary now, the model's
  summary computed off the hot path and merged on a later compaction.
* `fidelity_report` — what a compaction lost (identifiers, user constraints, open items).
"""

from __future__ import annotations

from .background import AsyncBackgroundSummarizer, BackgroundSummarizer
from .extractive import (
    AsyncExtractiveSummarizer,
    ExtractiveSummarizer,
    condense,
    constraint_sentences,
    fit_summary,
    message_identifiers,
)
from .fidelity import FidelityReport, fidelity_report, open_items, readable_text
from .llm import AsyncLLMSummarizer, FailureKind, LLMSummarizer, SummaryFailure, SummaryResult, SummarySource

__all__ = [
    "AsyncBackgroundSummarizer",
    "AsyncExtractiveSummarizer",
    "AsyncLLMSummarizer",
    "BackgroundSummarizer",
    "ExtractiveSummarizer",
    "FailureKind",
    "FidelityReport",
    "LLMSummarizer",
    "SummaryFailure",
    "SummaryResult",
    "SummarySource",
    "condense",
    "constraint_sentences",
    "fidelity_report",
    "fit_summary",
    "message_identifiers",
    "open_items",
    "readable_text",
]
