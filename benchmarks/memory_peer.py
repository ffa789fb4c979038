"""contextwarden with long-term memory as a peer of ../shared/bench/peers_bench.py (the trim workload).

    PYTHONPATH=. .venv/bin/python ../shared/bench/peers_bench.py \\
        --adapter benchmarks.peers_adapter:ContextWardenPeer --adapter benchmarks.memory_peer:ContextWardenMemoryPeer \\
        --peers floor-hysteresis,contextwarden,contextwarden-memory --sizes 1000 --window 32000 --json OUT

The same session as `ContextWardenPeer` with ``memory=True``: what compaction removes is written
to an in-process keyword memory and every request (the workload has a new user message each
round) recalls into a block before it. The figure to read is ``prefix_reuse`` beside the peer
without memory: what recalled blocks cost a provider's prompt cache.
"""

from __future__ import annotations

from typing import Any

from benchmarks.peers_adapter import ContextWardenPeer, _to_canonical
from contextwarden.session import Session
from contextwarden.tokens import get_counter


class ContextWardenMemoryPeer(ContextWardenPeer):
    """`ContextWardenPeer` with long-term memory recalled into the view."""

    name = "contextwarden-memory"
    description = "contextwarden Session with long-term memory (memory=True), default pipeline otherwise"

    def setup(self, window: int, enc: Any) -> None:
        self.session = Session(
            "bench",
            window=window,
            reserved_output=0,
            counter=get_counter("tiktoken:cl100k_base"),
            format="openai",
            memory=True,
        )
        self._synth: dict[str, dict[str, Any]] = {}

    def step(self, native_round: list[Any]) -> list[Any]:
        self.session.add(native_round)
        view = self.session.prepare(format="internal").view
        out: list[Any] = []
        for m in view:
            if m.snapshot_id is None and not m.source_ids and not m.extra.get("contextwarden"):
                out.append(m)  # a transcript message, returned as the same object
                continue
            d = self._synth.get(m.message_id)
            if d is None:
                d = self._synth[m.message_id] = _to_canonical(m)
            out.append(d)
        return out
