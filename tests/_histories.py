"""Hypothesis strategies for message histories (valid ones, and arbitrary ones)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from contextwarden.messages import Message, ToolCall

TOOLS = ("read_file", "grep", "run_tests")


@st.composite
def valid_histories(draw: st.DrawFn, *, pending_tail: bool = True, reuse_ids: bool | None = None) -> list[Message]:
    """System?, then turns: user, 0-3 tool steps (0-3 parallel calls, results in any order), reply?

    With ``reuse_ids`` (drawn when None) call ids restart at ``call_0`` in every assistant message,
    as some models do. With ``pending_tail`` the history may end with calls still waiting.
    """
    reuse = draw(st.booleans()) if reuse_ids is None else reuse_ids
    counter = iter(range(10**6))
    msgs: list[Message] = []
    if draw(st.booleans()):
        msgs.append(Message.system("You are a careful agent."))

    def calls(k: int) -> list[ToolCall]:
        ids = [f"call_{j}" for j in range(k)] if reuse else [f"call_{next(counter)}" for _ in range(k)]
        return [
            ToolCall(call_id=cid, name=draw(st.sampled_from(TOOLS)), arguments=f'{{"n": {j}}}')
            for j, cid in enumerate(ids)
        ]

    turns = draw(st.integers(0, 5))
    for t in range(turns):
        msgs.append(Message.user(f"request {t}"))
        if draw(st.integers(0, 5)) == 0:
            msgs.append(Message(role="developer", parts=Message.user(f"note {t}").parts))
        for s in range(draw(st.integers(0, 3))):
            k = draw(st.integers(0, 3))
            text = draw(st.sampled_from(["", f"step {t}.{s}"]))
            if k == 0:
                msgs.append(Message.assistant(f"thinking aloud {t}.{s}"))
                continue
            made = calls(k)
            msgs.append(Message.assistant(text, tool_calls=made))
            for call in draw(st.permutations(made)):
                msgs.append(Message.tool_result(call.call_id, f"result of {call.call_id}", name=call.name))
        if draw(st.booleans()):
            msgs.append(Message.assistant(f"answer {t}"))
    if pending_tail and turns and draw(st.booleans()):
        made = calls(draw(st.integers(1, 3)))
        msgs.append(Message.assistant("", tool_calls=made))
        answered = draw(st.integers(0, len(made) - 1))
        for call in made[:answered]:
            msgs.append(Message.tool_result(call.call_id, "partial", name=call.name))
    return msgs


@st.composite
def cut_histories(draw: st.DrawFn) -> list[Message]:
    """A valid history cut at any point: a prefix, a suffix, or with any slice removed."""
    msgs = draw(valid_histories())
    n = len(msgs)
    a = draw(st.integers(0, n))
    b = draw(st.integers(a, n))
    how = draw(st.sampled_from(["prefix", "suffix", "slice"]))
    if how == "prefix":
        return msgs[:a]
    if how == "suffix":
        return msgs[a:]
    return msgs[:a] + msgs[b:]


@st.composite
def arbitrary_histories(draw: st.DrawFn) -> list[Message]:
    """Messages of every role in any order, with call ids drawn from a small pool (so orphans,
    duplicates, displaced results, reused ids and missing results all occur)."""
    ids = st.sampled_from(["c0", "c1", "c2", "c3"])
    message = st.one_of(
        st.builds(lambda: Message.system("sys")),
        st.builds(lambda t: Message.user(t), st.sampled_from(["hi", "", "  "])),
        st.builds(
            lambda t, cs: Message.assistant(t, tool_calls=[ToolCall(call_id=c, name="f", arguments="{}") for c in cs]),
            st.sampled_from(["", "ok"]),
            st.lists(ids, max_size=3),
        ),
        st.builds(lambda c: Message.tool_result(c, "r"), ids),
    )
    return draw(st.lists(message, max_size=14))


def reference_pairs_ok(messages: list[Message], *, allow_pending_tail: bool) -> bool:
    """An independent statement of the validity rule (the trim benchmark's ``check_context``)."""
    open_calls: set[Any] = set()
    for m in messages:
        if m.role == "tool":
            if m.tool_call_id not in open_calls:
                return False
            open_calls.discard(m.tool_call_id)
        else:
            if open_calls:
                return False
            open_calls = {c.call_id for c in m.tool_calls}
    # Calls still open at the end belong to the last assistant message: they are pending.
    return not open_calls or allow_pending_tail
