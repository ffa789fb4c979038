from __future__ import annotations

import base64
import importlib.util
import json
import random
import struct
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from contextwarden.exceptions import ConfigError, MessageError
from contextwarden.messages import ImagePart, Message, TextPart, ThinkingPart, ToolCall
from contextwarden.tokens import (
    ANTHROPIC_FRAMING,
    GEMINI_FRAMING,
    OPENAI_FRAMING,
    CacheStats,
    CountCache,
    Framing,
    HeuristicCounter,
    TokenAccountant,
    TokenCounter,
    get_counter,
    image_tokens,
)

pytest.importorskip("tiktoken")
BENCH = Path(__file__).resolve().parents[3] / "shared" / "bench" / "peers_bench.py"


@pytest.fixture(scope="module")
def cl100k():
    return get_counter("tiktoken:cl100k_base")


@pytest.fixture
def acc(cl100k):
    return TokenAccountant(cl100k)


# --- the harness formula -----------------------------------------------------------------------------


def harness_tokens(enc, m: dict) -> int:
    """The reference harness's OpenAI-style count: 4 + content + sum(3 + name + arguments)."""
    n = 4 + len(enc.encode_ordinary(m.get("content") or ""))
    for c in m.get("tool_calls") or ():
        n += 3 + len(enc.encode_ordinary(c["name"])) + len(enc.encode_ordinary(c["arguments"]))
    return n


def to_message(m: dict) -> Message:
    if m["role"] == "assistant":
        calls = [ToolCall(call_id=c["id"], name=c["name"], arguments=c["arguments"]) for c in m.get("tool_calls") or ()]
        return Message.assistant(m.get("content") or "", tool_calls=calls)
    if m["role"] == "tool":
        return Message.tool_result(m["tool_call_id"], m["content"], name=m["name"])
    return Message(role=m["role"], parts=(TextPart(text=m["content"]),))


def generated_conversation(seed: int, rounds: int = 60) -> list[dict]:
    rng = random.Random(seed)
    words = "the agent reads file config error retry 的 一 是 服务 超时 def return {} [] 0x1f 2025-01-01".split()

    def text(lo: int, hi: int) -> str:
        return " ".join(rng.choices(words, k=rng.randint(lo, hi)))

    msgs: list[dict] = [{"role": "system", "content": text(50, 200)}]
    call = 0
    for _ in range(rounds):
        msgs.append({"role": "user", "content": text(1, 80)})
        calls = []
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            call += 1
            args = json.dumps({"path": text(1, 3), "limit": rng.randint(0, 500), "q": text(0, 10)})
            calls.append(
                {"id": f"call_{call}", "name": rng.choice(["read_file", "grep", "http_get"]), "arguments": args}
            )
        msgs.append({"role": "assistant", "content": text(0, 40) if rng.random() < 0.7 else "", "tool_calls": calls})
        for c in calls:
            msgs.append({"role": "tool", "tool_call_id": c["id"], "name": c["name"], "content": text(0, 300)})
    return msgs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_openai_framing_reproduces_the_harness_count_exactly(acc, cl100k, seed):
    enc = cl100k.encoding
    conv = generated_conversation(seed)
    for m in conv:
        assert acc.count_message(to_message(m)) == harness_tokens(enc, m), m
    msgs = [to_message(m) for m in conv]
    assert acc.count_messages(msgs) == sum(harness_tokens(enc, m) for m in conv) + 3


@pytest.mark.skipif(not BENCH.exists(), reason="../shared/bench/peers_bench.py is not beside the checkout")
def test_openai_framing_matches_peers_bench_message_tokens(acc, cl100k):
    spec = importlib.util.spec_from_file_location("peers_bench_for_test", BENCH)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    conv, _ = mod.build_conversation(400, 11)
    enc = cl100k.encoding
    for m in conv:
        assert acc.count_message(to_message(m)) == mod.message_tokens(enc, m)


# --- framing details ------------------------------------------------------------------------------------


def test_name_counts_only_on_non_tool_messages(acc, cl100k):
    plain = Message.user("hello there")
    named = Message.user("hello there", name="alice")
    assert acc.count_message(named) == acc.count_message(plain) + 1 + cl100k.count_text("alice")
    tool = Message.tool_result("c1", "ok", name="read_file")
    assert acc.count_message(tool) == 4 + cl100k.count_text("ok")


def test_multiple_text_parts_thinking_and_framings(cl100k):
    m = Message(
        role="assistant",
        parts=(TextPart(text="first"), ThinkingPart(text="let me think about it"), TextPart(text="second")),
    )
    body = sum(cl100k.count_text(t) for t in ("first", "let me think about it", "second"))
    assert TokenAccountant(cl100k).count_message(m) == 4 + body
    assert TokenAccountant(cl100k, framing=ANTHROPIC_FRAMING).count_message(m) == 3 + body
    assert TokenAccountant(cl100k, framing=GEMINI_FRAMING).count_messages([m]) == 4 + body + 0


def test_framing_validation():
    with pytest.raises(ConfigError, match="per_message"):
        Framing(name="x", per_message=-1, per_name=0, per_tool_call=0, reply_priming=0, image="openai")


def test_count_text_is_the_bare_counter(acc, cl100k):
    assert acc.count_text("abc def") == cl100k.count_text("abc def")


# --- images -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "detail", "expected"),
    [
        ((1024, 1024), "high", 85 + 170 * 4),  # scaled to 768x768 -> 2x2 tiles
        ((2048, 4096), "high", 85 + 170 * 6),  # 1024x2048 -> 768x1536 -> 2x3 tiles
        ((512, 512), "high", 85 + 170 * 1),
        ((4000, 3000), "low", 85),
        ((None, None), "high", 1445),
        ((None, None), "low", 85),
    ],
)
def test_openai_image_formula(size, detail, expected):
    assert image_tokens(*size, provider="openai", detail=detail) == expected


def test_anthropic_and_gemini_image_formulas():
    assert image_tokens(750, 750, provider="anthropic") == 750
    assert image_tokens(200, 200, provider="anthropic") == 54  # ceil(40000/750)
    assert image_tokens(4000, 4000, provider="anthropic") == 1534  # resized to ~1.15 MP
    assert image_tokens(None, None, provider="anthropic") == 1600
    assert image_tokens(300, 300, provider="gemini") == 258
    assert image_tokens(1000, 800, provider="gemini") == 258 * 2 * 2
    assert image_tokens(None, None, provider="gemini") == 1032


def png_data_url(w: int, h: int) -> str:
    header = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", w, h) + b"\x08\x02\x00\x00\x00"
    return "data:image/png;base64," + base64.b64encode(header + b"\x00" * 32).decode()


def jpeg_data_url(w: int, h: int) -> str:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + b"\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof = b"\xff\xc0" + struct.pack(">HBHH", 17, 8, h, w) + b"\x03" + b"\x01\x22\x00\x02\x11\x01\x03\x11\x01"
    return "data:image/jpeg;base64," + base64.b64encode(b"\xff\xd8" + app0 + sof + b"\x00" * 16).decode()


def gif_data_url(w: int, h: int) -> str:
    return "data:image/gif;base64," + base64.b64encode(b"GIF89a" + struct.pack("<HH", w, h) + b"\x00" * 16).decode()


@pytest.mark.parametrize("make", [png_data_url, jpeg_data_url, gif_data_url])
def test_image_size_is_read_from_data_urls(acc, make):
    m = Message(role="user", parts=(ImagePart(url=make(512, 512), detail="high"),))
    assert acc.count_message(m) == 4 + 85 + 170
    unknown = Message(role="user", parts=(ImagePart(url="https://example.com/cat.png"),))
    assert acc.count_message(unknown) == 4 + 1445
    explicit = Message(role="user", parts=(ImagePart(url="https://x/y.png", width=1024, height=1024),))
    assert acc.count_message(explicit) == 4 + 765


# --- cache ----------------------------------------------------------------------------------------------


def test_cache_hits_misses_and_key_includes_counter_and_framing(cl100k):
    cache = CountCache()
    a = TokenAccountant(cl100k, cache=cache)
    m = Message.user("the same text " * 20)
    first = a.count_message(m)
    assert cache.stats().misses == 1 and cache.stats().hits == 0
    assert a.count_message(m) == first
    assert cache.stats().hits == 1
    # An equal message with another id shares the entry (keyed by content, not id).
    assert a.count_message(Message.user("the same text " * 20)) == first
    assert cache.stats().hits == 2
    # Another counter or framing sharing the cache gets its own entries.
    h = TokenAccountant(HeuristicCounter(), cache=cache)
    h.count_message(m)
    TokenAccountant(cl100k, framing=ANTHROPIC_FRAMING, cache=cache).count_message(m)
    assert cache.stats().misses == 3
    assert len(cache) == 3
    assert (cl100k.name, "openai", m.content_hash) in cache
    assert ("heuristic:v1", "openai", m.content_hash) in cache


def test_cache_is_bounded_lru():
    cache = CountCache(maxsize=3)
    for i in range(5):
        cache.put(("c", "f", str(i)), i)
    assert len(cache) == 3
    assert cache.stats().evictions == 2
    assert cache.get(("c", "f", "0")) is None
    assert cache.get(("c", "f", "2")) == 2  # now most recent
    cache.put(("c", "f", "5"), 5)
    assert cache.get(("c", "f", "3")) is None  # 3 was the least recently used
    assert cache.get(("c", "f", "2")) == 2
    s = cache.stats()
    assert (s.size, s.maxsize) == (3, 3)
    assert 0 < s.hit_rate < 1
    cache.clear()
    assert len(cache) == 0 and cache.stats().hits == 0
    with pytest.raises(ConfigError):
        CountCache(maxsize=0)


def test_cache_is_thread_safe_under_concurrent_use(cl100k):
    cache = CountCache(maxsize=50)
    acc = TokenAccountant(cl100k, cache=cache)
    msgs = [Message.user(f"message number {i}") for i in range(200)]
    expected = [4 + cl100k.count_text(m.text) for m in msgs]
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(3):
                assert [acc.count_message(m) for m in msgs] == expected
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(cache) <= 50
    assert cache.stats().hits + cache.stats().misses == 4 * 3 * 200


# --- bad input -------------------------------------------------------------------------------------------


def test_bad_part_text_raises_message_error_with_index_and_nothing_is_cached(acc):
    good = Message.user("fine")
    bad = Message(role="user", parts=(TextPart(text=123),))  # type: ignore[arg-type]
    before = len(acc.cache)
    with pytest.raises(MessageError, match="must be a string") as info:
        acc.count_messages([good, bad])
    assert info.value.index == 1
    assert info.value.field == "parts[0].text"
    assert len(acc.cache) == before + 1  # only the good message
    assert bad.parts[0].text == 123  # not mutated


def test_bad_tool_call_arguments_type(acc):
    m = Message(role="assistant", parts=(ToolCall(call_id="c", name="f", arguments={"a": 1}),))  # type: ignore[arg-type]
    with pytest.raises(MessageError, match="arguments"):
        acc.count_message(m)


def test_non_message_raises_message_error_with_index(acc):
    with pytest.raises(MessageError, match="expected a `Message`") as info:
        acc.count_messages([Message.user("ok"), {"role": "user", "content": "hi"}])  # type: ignore[list-item]
    assert info.value.index == 1


def test_count_text_of_non_string_raises(acc):
    with pytest.raises(MessageError):
        acc.count_text(None)  # type: ignore[arg-type]


def test_message_is_not_mutated_by_counting(acc):
    m = Message.assistant("hi", tool_calls=[ToolCall(call_id="c1", name="f", arguments='{"x": 1}')])
    before = replace(m)
    acc.count_message(m)
    assert m == before


# --- tools ---------------------------------------------------------------------------------------------

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Paris"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "opts": {"type": "object", "properties": {"verbose": {"type": "boolean"}}},
                },
                "required": ["city"],
            },
        },
    },
    {"name": "ping", "description": "Check the service.", "parameters": {"type": "object", "properties": {}}},
]


def test_count_tools_renders_and_counts_schemas(acc, cl100k):
    n = acc.count_tools(TOOLS)
    assert acc.count_tools([]) == 0
    one = acc.count_tools(TOOLS[:1])
    assert 40 < one < 150
    assert n > one
    # The description and every property name contribute.
    longer = json.loads(json.dumps(TOOLS[:1]))
    longer[0]["function"]["description"] += " It also returns humidity, wind and a three-day forecast."
    assert acc.count_tools(longer) > one + 10


def test_count_tools_anthropic_adds_the_tool_system_prompt(cl100k):
    anth = TokenAccountant(cl100k, framing=ANTHROPIC_FRAMING)
    tools = [{"name": "ping", "description": "Check.", "input_schema": {"type": "object", "properties": {}}}]
    assert anth.count_tools(tools) > 346
    assert anth.count_tools([]) == 0


def test_count_tools_rejects_malformed_tools(acc):
    with pytest.raises(MessageError, match=r"tools\[1\]"):
        acc.count_tools([TOOLS[1], {"description": "no name"}])
    with pytest.raises(MessageError, match=r"tools\[0\]"):
        acc.count_tools([{"type": ""}])
    with pytest.raises(MessageError, match="mapping"):
        acc.count_tools(["not a tool"])  # type: ignore[list-item]


def test_count_tools_counts_namespaces_and_hosted_tools(acc):
    functions = [
        {
            "type": "function",
            "name": f"tool_{i}",
            "description": f"Tool number {i}: reads, filters and reports on the files of the workspace.",
            "parameters": {
                "type": "object",
                "properties": {
                    f"arg_{j}": {"type": "string", "description": f"argument {j} of the tool"} for j in range(6)
                },
                "required": ["arg_0"],
            },
        }
        for i in range(12)
    ]
    namespace = {"type": "namespace", "name": "mcp__files", "description": "A file server.", "tools": functions}
    flat = acc.count_tools(functions)
    grouped = acc.count_tools([namespace])
    # the namespace holds the same functions: counted like them, not like one empty tool
    assert grouped >= flat
    assert grouped < flat * 1.2
    hosted = acc.count_tools([{"type": "web_search", "search_context_size": "high"}])
    assert 0 < hosted < 60
    assert (
        acc.count_tools([{"type": "web_search", "search_context_size": "high", "user_location": {"city": "Paris"}}])
        > hosted
    )
    grammar = {
        "type": "custom",
        "name": "apply_patch",
        "format": {"type": "grammar", "definition": "start: " + "x " * 200},
    }
    assert acc.count_tools([grammar]) > 150


def test_openai_framing_constants():
    f = OPENAI_FRAMING
    assert (f.per_message, f.per_name, f.per_tool_call, f.reply_priming, f.image) == (4, 1, 3, 3, "openai")


# --- uncached counting of fresh outputs (count_message(shared=False)) --------------------------------


def _fresh_samples() -> list[Message]:
    """Messages of every kind the engine counts on arrival (new objects on every call)."""
    return [
        Message.user("Book Lisbon for Maria Silva, order ORD-77, by 2024-07-01.", name="maria"),
        Message.assistant("checking", tool_calls=[ToolCall(call_id="c1", name="search", arguments='{"q": "LIS"}')]),
        Message.tool_result("c1", "found 3 flights: TP007 €123.45, TP009 €99.00\n" * 20, name="search"),
        Message.tool_result("c2", "数据库连接失败，请检查配置文件。订单 ORD-4411 " * 10, name="db", is_error=True),
        Message(role="assistant", parts=(ThinkingPart(text="the cheapest is TP009"), TextPart(text="TP009 it is"))),
        Message.system("You are a travel agent."),
    ]


@pytest.mark.parametrize("framing", [OPENAI_FRAMING, ANTHROPIC_FRAMING, GEMINI_FRAMING], ids=lambda f: f.name)
@pytest.mark.parametrize("counter_name", ["tiktoken:cl100k_base", "heuristic"])
def test_unshared_count_equals_the_shared_count(framing: Framing, counter_name: str) -> None:
    counter = get_counter(counter_name)
    for fresh, other in zip(_fresh_samples(), _fresh_samples(), strict=True):
        unshared = TokenAccountant(counter, framing=framing).count_message(fresh, shared=False)
        assert unshared == TokenAccountant(counter, framing=framing).count_message(other)


def test_unshared_count_leaves_the_shared_cache_alone(cl100k: TokenCounter) -> None:
    cache = CountCache()
    acc = TokenAccountant(cl100k, cache=cache)
    for m in _fresh_samples():
        acc.count_message(m, shared=False)
        assert m.content_hash  # (hashing it here, after the count, so the key can be looked up)
        assert (cl100k.name, "openai", m.content_hash) not in cache
    assert cache.stats() == CacheStats(hits=0, misses=0, evictions=0, size=0, maxsize=cache.maxsize)


def test_counting_the_same_object_again_reads_its_memo_not_the_cache(cl100k: TokenCounter) -> None:
    cache = CountCache()
    acc = TokenAccountant(cl100k, cache=cache)
    for m in _fresh_samples():
        n = acc.count_message(m, shared=False)
        assert acc.count_message(m, shared=False) == n
        assert acc.count_message(m) == n  # shared=True: the memo answers first
        assert acc.count_message(m, shared=True) == n
        # an accountant sharing the cache, with the same counter and framing, reads it too
        assert TokenAccountant(cl100k, cache=cache).count_message(m) == n
    assert cache.stats().hits == cache.stats().misses == len(cache) == 0


def test_a_remembered_count_leaves_the_message_value_alone(cl100k: TokenCounter) -> None:
    adapter: TypeAdapter[Message] = TypeAdapter(Message)
    for m in _fresh_samples():
        before = (repr(m), adapter.dump_json(m), hash(m.content_hash))
        acc = TokenAccountant(cl100k)
        n = acc.count_message(m, shared=False)
        assert m.remembered_count((cl100k.name, "openai")) == n
        assert (repr(m), adapter.dump_json(m), hash(m.content_hash)) == before
        assert m == replace(m)  # equality ignores the memo


def test_an_equal_new_object_goes_through_the_shared_cache(cl100k: TokenCounter) -> None:
    cache = CountCache()
    acc = TokenAccountant(cl100k, cache=cache)
    for i, m in enumerate(_fresh_samples()):
        n = acc.count_message(m, shared=False)
        twin = replace(m)  # equal content, another object (no memo)
        assert twin == m and twin is not m
        assert acc.count_message(twin) == n
        assert (cache.stats().misses, cache.stats().hits, len(cache)) == (i + 1, i, i + 1)
        assert (cl100k.name, "openai", twin.content_hash) in cache
        assert acc.count_message(replace(m)) == n  # a third object: a hit
        assert (cache.stats().misses, cache.stats().hits) == (i + 1, i + 1)


def test_another_counter_or_framing_does_not_reuse_the_memo(cl100k: TokenCounter) -> None:
    text = "数据库连接失败，请检查配置文件。ORD-4411 /srv/app/mod_7.py 2024-06-08 " * 8
    m = Message.tool_result("c1", text, name="db")
    tik = TokenAccountant(cl100k)
    heu = TokenAccountant(HeuristicCounter())
    anthropic = TokenAccountant(cl100k, framing=ANTHROPIC_FRAMING)
    expected = {
        acc: TokenAccountant(acc.counter, framing=acc.framing).count_message(Message.tool_result("c1", text, name="db"))
        for acc in (tik, heu, anthropic)
    }
    assert len(set(expected.values())) == 3  # the three really count differently
    assert expected[tik] - expected[anthropic] == OPENAI_FRAMING.per_message - ANTHROPIC_FRAMING.per_message
    # counted in turns on one object, unshared and shared, each gets its own count every time
    for _ in range(2):
        for acc in (tik, heu, anthropic):
            assert acc.count_message(m, shared=False) == expected[acc]
            for other in (tik, heu, anthropic):
                assert other.count_message(m) == expected[other]


def test_unshared_counting_does_not_change_the_message(cl100k: TokenCounter) -> None:
    acc = TokenAccountant(cl100k)
    for m in _fresh_samples():
        before, dumped = replace(m), m.to_dict()
        acc.count_message(m, shared=False)
        assert m == before and m.to_dict() == dumped
        assert Message.from_dict(m.to_dict()) == m


def test_unshared_counting_still_rejects_bad_parts(cl100k: TokenCounter) -> None:
    acc = TokenAccountant(cl100k)
    bad = Message(role="tool", parts=(TextPart(text=123),), tool_call_id="c1")  # type: ignore[arg-type]
    for _ in range(2):  # a failed count leaves nothing behind to return the next time
        with pytest.raises(MessageError, match="must be a string") as info:
            acc.count_message(bad, shared=False)
        assert info.value.field == "parts[0].text"
    assert len(acc.cache) == 0
