"""The seeded session generator."""

from __future__ import annotations

import json
import re

from contextwarden.adapters import to_messages
from contextwarden.demo import generate_session
from contextwarden.tokens import get_counter
from contextwarden.toolpairs import validate


def test_same_seed_same_session_other_seed_other_session() -> None:
    a, b, c = generate_session(seed=5, turns=40), generate_session(seed=5, turns=40), generate_session(seed=6, turns=40)
    assert json.dumps(a.turns) == json.dumps(b.turns) and a.facts == b.facts
    assert json.dumps(a.turns) != json.dumps(c.turns)
    assert [f.value for f in a.facts] != [f.value for f in c.facts]


def test_full_session_is_long_realistic_and_valid() -> None:
    demo = generate_session(seed=7, turns=300)
    assert len(demo.turns) == 300
    messages = [demo.system] + [m for turn in demo.turns for m in turn]
    converted = to_messages(messages, format="openai")
    assert validate(converted) == []
    counter = get_counter("tiktoken:cl100k_base")
    tokens = sum(counter.count_text(m.get("content") or "") for m in messages)
    assert 250_000 < tokens < 600_000
    tools = [m["content"] for m in messages if m["role"] == "tool"]
    sizes = [counter.count_text(t) for t in tools]
    assert min(sizes) < 100 and max(sizes) > 2500
    text = "\n".join(m.get("content") or "" for m in messages)
    assert "Traceback (most recent call last):" in text
    assert re.search(r"=+ \d+ failed, \d+ passed in [\d.]+s =+", text)
    assert re.search(r"[\u4e00-\u9fff]{10}", text), "some Chinese text"
    names = {c["function"]["name"] for m in messages for c in m.get("tool_calls") or ()}
    assert names == {"read_file", "grep", "run_tests", "bash", "edit_file"}
    assert demo.turns[-1][-1]["role"] == "user"


def test_facts_are_planted_early_and_never_repeated() -> None:
    demo = generate_session(seed=7, turns=300)
    kinds = {f.kind for f in demo.facts}
    assert kinds == {"ticket", "error", "path", "function", "commit", "constraint", "test", "config", "customer", "url"}
    assert max(f.turn for f in demo.facts) <= 12
    for fact in demo.facts:
        where = [i for i, turn in enumerate(demo.turns, 1) if fact.value in json.dumps(turn, ensure_ascii=False)]
        assert where and where[0] == fact.turn, fact
        assert max(where) <= 24, f"{fact.kind} repeated late: turns {where}"
    question = demo.turns[-1][-1]["content"]
    assert not any(f.value in question for f in demo.facts)
