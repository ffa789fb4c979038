"""contextwarden as a peer of ../shared/bench/peers_bench.py (the trim workload).

    PYTHONPATH=. .venv/bin/python ../shared/bench/peers_bench.py \\
        --adapter benchmarks.peers_adapter:ContextWardenPeer \\
        --adapter benchmarks.peers_adapter:ContextWardenTiktokenPeer \\
        --peers floor,floor-hysteresis,contextwarden,contextwarden-tiktoken --sizes 1000,5000 \\
        --window 128000,32000 --json OUT

The peer drives the public API with the default pipeline for the window: cl100k counting (with
GitHub's BPE engine when ``bpe-openai`` is installed; `ContextWardenTiktokenPeer` counts with
tiktoken, as the floor does) with OpenAI framing, no reserved output, no tool schemas, no LLM.
Messages are converted to contextwarden `Message` objects before timing (as the harness converts
for every peer); what compaction synthesizes (stand-ins, the context block) goes back as
canonical dicts.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from contextwarden import Message, TextPart, ToolCall
from contextwarden.session import Session
from contextwarden.tokens import TokenCounter, get_counter
from contextwarden.tokens.tiktoken import TiktokenCounter, load_encoding


def _to_message(m: dict[str, Any]) -> Message:
    calls = tuple(
        ToolCall(call_id=c["id"], name=c["name"], arguments=c["arguments"]) for c in m.get("tool_calls") or ()
    )
    text = m.get("content") or ""
    parts = ((TextPart(text=text),) if text else ()) + calls
    return Message(role=m["role"], parts=parts, tool_call_id=m.get("tool_call_id"), name=m.get("name"))


def _to_canonical(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "content": m.text}
    if m.tool_calls:
        out["tool_calls"] = [{"id": c.call_id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls]
    if m.tool_call_id:
        out["tool_call_id"] = m.tool_call_id
        out["name"] = m.name
    return out


class ContextWardenPeer:
    """The harness's Peer interface (convert / setup / step), duck-typed."""

    name = "contextwarden"
    description = "contextwarden Session, default pipeline (clear → evict + ledger), hysteresis 1.0→0.5"
    requires = ("contextwarden", "tiktoken")

    def available(self) -> str | None:
        for mod in self.requires:
            if importlib.util.find_spec(mod) is None:
                return f"module {mod!r} not importable"
        return None

    def convert(self, canon: list[dict[str, Any]]) -> list[tuple[Any, list[int]]]:
        return [(_to_message(m), [i]) for i, m in enumerate(canon)]

    def setup(self, window: int, enc: Any) -> None:
        self.session = Session(
            "bench",
            window=window,
            reserved_output=0,
            counter=self.counter(),
            format="openai",
        )
        self._synth: dict[str, dict[str, Any]] = {}
        self._out: list[Any] = []
        self._generation = -1

    def counter(self) -> TokenCounter:
        """cl100k_base as the default pipeline counts it (GitHub's BPE engine when ``bpe-openai`` is installed)."""
        return get_counter("tiktoken:cl100k_base")

    def step(self, native_round: list[Any]) -> list[Any]:
        self.session.add(native_round)
        view = self.session.prepare(format="internal").view
        generation = self.session.state.view_generation
        if generation == self._generation:
            # the view only appended this round: extend the mapped list instead of re-mapping it
            # (returned as is: the harness reads a turn's list before it asks for the next)
            self._out.extend(view[len(self._out) :])
            return self._out
        # what compaction wrote and the view still shows keeps its dict (the same object each
        # turn); what left the view is dropped, so the adapter holds no more than the view does
        synth, kept = self._synth, {}
        out: list[Any] = []
        for m in view:
            if m.snapshot_id is None and not m.source_ids:
                out.append(m)  # a transcript message, returned as the same object
                continue
            d = synth.get(m.message_id)
            if d is None:
                d = _to_canonical(m)
            kept[m.message_id] = d
            out.append(d)
        self._synth, self._out, self._generation = kept, out, generation
        return out


class ContextWardenTiktokenPeer(ContextWardenPeer):
    """The same session counting with tiktoken alone: the floor's own tokenizer, like for like."""

    name = "contextwarden-tiktoken"
    description = "contextwarden Session, default pipeline, counting with tiktoken (as the floor does)"

    def counter(self) -> TokenCounter:
        return TiktokenCounter(load_encoding("cl100k_base"), engine="tiktoken")
