"""Counting a text line by line gives exactly the tokenizer's count of the whole text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from contextwarden import Message, TextPart
from contextwarden.exceptions import MessageError
from contextwarden.session import Session
from contextwarden.tokens import TokenAccountant, get_counter
from contextwarden.tokens.lines import LineCounts
from contextwarden.tokens.tiktoken import _R50K_PAT, TiktokenCounter

tiktoken = pytest.importorskip("tiktoken")

# characters around line breaks that decide where a pre-tokenizer piece ends: letters, marks,
# digits, CJK, punctuation, the contraction quote, "/" and every kind of whitespace
_ALPHABET = [
    "a", "Z", "é", "中", "文", "\u0301", "1", "23", " ", "  ", "\n", "\n\n", "\r", "\r\n", "\t", "/", ".", "-",
    "'", "'s", "(", ")", "_", "!", "#", "\u00a0", "\u0085", "\u2028", "\u3000", "\x0b", "\x0c", "\x1c", "ab",
]  # fmt: skip
_texts = st.lists(st.sampled_from(_ALPHABET), max_size=60).map("".join)


@pytest.fixture(scope="module")
def cl100k() -> TiktokenCounter:
    counter = get_counter("tiktoken:cl100k_base")
    assert isinstance(counter, TiktokenCounter)
    return counter


def test_cl100k_pieces_end_at_line_breaks(cl100k):
    assert cl100k.pieces_end_at_line_breaks is True


@settings(max_examples=400, deadline=None)
@given(texts=st.lists(_texts, min_size=1, max_size=3))
def test_line_counts_equal_the_whole_count_for_cl100k(cl100k, texts):
    lines = LineCounts(cl100k.count_text, additive=True)
    for text in texts:  # later texts reuse lines counted for earlier ones
        assert lines.count(text) == cl100k.count_text(text), text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n",
        "a\n",
        "\nb",
        "x.\n/usr/bin",
        "a  \nb",
        "a\n\n\nb",
        "a\n b",
        "it's\n's",
        "中文\n中文",
        "x\r\ny",
        "- #12 read a.py\n- #13 ran pytest\nFiles:\n- src/x.py (edited 2×)\n",
    ],
)
def test_line_counts_on_the_breaks_that_matter(cl100k, text):
    assert LineCounts(cl100k.count_text, additive=True).count(text) == cl100k.count_text(text)


def test_lines_are_counted_once_and_forgotten_together_when_full(cl100k):
    calls: list[str] = []

    def count(text: str) -> int:
        calls.append(text)
        return cl100k.count_text(text)

    lines = LineCounts(count, additive=True, max_parts=3)
    lines.count("one\ntwo\n")
    assert calls == ["one\n", "two\n"]
    calls.clear()
    assert lines.count("one\ntwo\nthree\n") == cl100k.count_text("one\ntwo\nthree\n")
    assert calls == ["three\n"] and len(lines) == 3
    lines.count("four\n")  # the fourth distinct line: the remembered ones are dropped first
    assert len(lines) == 1


def test_another_pattern_counts_whole_texts(cl100k):
    gpt2_pattern = tiktoken.Encoding(
        name="cl100k_ranks_gpt2_pattern",
        pat_str=_R50K_PAT,
        mergeable_ranks=cl100k.encoding._mergeable_ranks,
        special_tokens={},
    )
    counter = TiktokenCounter(gpt2_pattern)
    assert counter.pieces_end_at_line_breaks is False
    # with GPT-2's pattern a run of spaces before a break ends differently at the end of a text,
    # so a cut there would change the count; whole texts are counted instead
    calls: list[str] = []

    def count(text: str) -> int:
        calls.append(text)
        return counter.count_text(text)

    lines = LineCounts(count, additive=False)
    assert lines.count("a  \nb\nc") == counter.count_text("a  \nb\nc")
    assert calls == ["a  \nb\nc"]


@settings(max_examples=150, deadline=None)
@given(text=_texts)
def test_count_rendered_is_count_message(cl100k, text):
    message = Message.user(text)
    assert TokenAccountant(cl100k).count_rendered(message) == TokenAccountant(cl100k).count_message(message)


def test_count_rendered_of_other_messages_is_count_message(cl100k):
    accountant = TokenAccountant(cl100k)
    named = Message(role="user", parts=(TextPart(text="a\nb"),), name="ops")
    two_parts = Message(role="user", parts=(TextPart(text="a\n"), TextPart(text="b")))
    for message in (named, two_parts):
        assert accountant.count_rendered(message) == TokenAccountant(cl100k).count_message(message)
    not_text = Message(role="user", parts=(TextPart(text=b"a\nb"),))  # type: ignore[arg-type]
    with pytest.raises(MessageError, match="parts"):
        accountant.count_rendered(not_text)


def test_every_context_block_counts_as_the_tokenizer_counts_it(cl100k):
    session = Session("blocks", window=3_000, reserved_output=0, counter=cl100k, format="openai")
    fresh = TokenAccountant(cl100k)
    blocks = 0
    for i in range(60):
        session.add(Message.user(f"step {i}: open src/pkg/module_{i}.py and fix test_{i}"))
        call = f"call_{i}"
        arguments = f'{{"cmd": "cat src/pkg/module_{i}.py"}}'
        call_part = {"id": call, "type": "function", "function": {"name": "bash", "arguments": arguments}}
        session.add({"role": "assistant", "content": "", "tool_calls": [call_part]})
        output = f"line {i}\n" * 80 + f"Error: E{i} in module_{i}"
        session.add({"role": "tool", "tool_call_id": call, "content": output})
        session.prepare()
        book = session.engine.book
        if book.context is not None:
            blocks += 1
            assert book.context_tokens == fresh.count_message(book.context)
    assert blocks > 0
