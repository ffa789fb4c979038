"""Hostile messages in every input format (OpenAI chat, Responses, Anthropic, LangChain, internal), and
`fuzz_add`: a session must take each batch or refuse it with a typed error, and stay whole.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from hypothesis import given, strategies as st

from contextwarden.messages import ImagePart, Message, TextPart, ThinkingPart, ToolCall

from ._harness import fuzz_settings, probe
from ._sessions import check_after, new_session
from ._strategies import (
    CALL_IDS,
    hostile_any,
    hostile_json_text,
    hostile_json_value,
    hostile_text,
    lenient_dumps,
    mutated,
    shallow_json_value,
    short_text,
)

call_id = st.one_of(st.sampled_from(CALL_IDS), short_text)
tool_name = st.one_of(st.sampled_from(["read_file", "run", "read_context", "write_note"]), short_text)
role = st.one_of(st.sampled_from(["user", "assistant", "system", "developer", "tool"]), short_text)

# --- OpenAI chat ------------------------------------------------------------------------------
openai_call = st.fixed_dictionaries(
    {
        "id": call_id,
        "type": st.just("function"),
        "function": st.fixed_dictionaries({"name": tool_name, "arguments": hostile_json_text}),
    }
)
openai_parts = st.lists(
    st.one_of(
        st.fixed_dictionaries({"type": st.just("text"), "text": hostile_text}),
        st.fixed_dictionaries(
            {
                "type": st.just("image_url"),
                "image_url": st.fixed_dictionaries(
                    {"url": st.one_of(st.just("https://example.com/a.png"), st.just("data:image/png;base64,iVBO"))}
                ),
            }
        ),
    ),
    max_size=3,
)
openai_message = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "developer"]), "content": st.one_of(hostile_text, openai_parts)}
    ),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": st.one_of(st.none(), hostile_text)},
        optional={"tool_calls": st.lists(openai_call, min_size=1, max_size=2)},
    ),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": call_id, "content": hostile_text}),
)

# --- OpenAI Responses -------------------------------------------------------------------------
responses_item = st.one_of(
    st.fixed_dictionaries(
        {
            "type": st.just("message"),
            "role": st.sampled_from(["user", "assistant", "system", "developer"]),
            "content": st.one_of(
                hostile_text,
                st.lists(
                    st.fixed_dictionaries(
                        {"type": st.sampled_from(["input_text", "output_text"]), "text": hostile_text}
                    ),
                    max_size=2,
                ),
            ),
        },
        optional={"id": short_text},
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("function_call"),
            "call_id": call_id,
            "name": tool_name,
            "arguments": hostile_json_text,
        },
        optional={"id": short_text},
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call_output"), "call_id": call_id, "output": st.one_of(hostile_text, hostile_any)}
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("reasoning"),
            "id": short_text,
            "summary": st.lists(
                st.fixed_dictionaries({"type": st.just("summary_text"), "text": hostile_text}), max_size=2
            ),
        },
        optional={"encrypted_content": hostile_text},
    ),
)

# --- Anthropic --------------------------------------------------------------------------------
anthropic_block = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": hostile_text}),
    st.fixed_dictionaries(
        {
            "type": st.just("tool_use"),
            "id": call_id,
            "name": tool_name,
            "input": st.one_of(hostile_json_value, st.just({})),
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("tool_result"),
            "tool_use_id": call_id,
            "content": st.one_of(
                hostile_text,
                st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": hostile_text}), max_size=2),
            ),
        },
        optional={"is_error": st.one_of(st.booleans(), hostile_any)},
    ),
    st.fixed_dictionaries(
        {"type": st.just("thinking"), "thinking": hostile_text, "signature": st.one_of(short_text, st.none())}
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("image"),
            "source": st.fixed_dictionaries(
                {"type": st.just("base64"), "media_type": st.just("image/png"), "data": st.just("iVBORw0KGgo=")}
            ),
        }
    ),
)
anthropic_message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "system"]),
        "content": st.one_of(hostile_text, st.lists(anthropic_block, min_size=1, max_size=3)),
    }
)


# --- LangChain --------------------------------------------------------------------------------
@st.composite
def langchain_message(draw: Callable[..., Any]) -> Any:
    """A LangChain message object; fields the constructor refuses are forced in with ``model_construct``."""
    import langchain_core.messages as lc
    from pydantic import ValidationError

    kind = draw(st.sampled_from(["human", "ai", "system", "tool", "chat"]))
    content = draw(
        st.one_of(
            hostile_text,
            st.lists(
                st.one_of(hostile_text, st.fixed_dictionaries({"type": st.just("text"), "text": hostile_text})),
                max_size=2,
            ),
            hostile_any,
        )
    )
    fields: dict[str, Any] = {"content": content}
    if draw(st.booleans()):
        fields["id"] = draw(st.one_of(short_text, hostile_any))
    cls: Any
    if kind == "human":
        cls = lc.HumanMessage
    elif kind == "system":
        cls = lc.SystemMessage
    elif kind == "chat":
        cls, fields["role"] = lc.ChatMessage, draw(role)
    elif kind == "tool":
        cls, fields["tool_call_id"] = lc.ToolMessage, draw(st.one_of(call_id, hostile_any))
        if draw(st.booleans()):
            fields["status"] = draw(st.one_of(st.sampled_from(["success", "error"]), hostile_any))
    else:
        cls = lc.AIMessage
        calls = draw(
            st.lists(
                st.fixed_dictionaries(
                    {
                        "name": st.one_of(tool_name, hostile_any),
                        "args": st.one_of(hostile_json_value, st.just({})),
                        "id": st.one_of(call_id, st.none(), hostile_any),
                        "type": st.just("tool_call"),
                    }
                ),
                max_size=2,
            )
        )
        if calls:
            fields["tool_calls"] = calls
        if draw(st.booleans()):
            fields["additional_kwargs"] = draw(st.dictionaries(short_text, hostile_any, max_size=2))
    try:
        return cls(**fields)
    except (ValidationError, ValueError, TypeError, RecursionError):
        return cls.model_construct(**fields)


# --- internal Message -------------------------------------------------------------------------
part = st.one_of(
    st.builds(TextPart, text=hostile_text),
    st.builds(ToolCall, call_id=call_id, name=tool_name, arguments=hostile_json_text),
    st.builds(ThinkingPart, text=hostile_text, signature=st.one_of(st.none(), short_text)),
    st.builds(ImagePart, url=st.one_of(st.just("https://example.com/a.png"), short_text)),
    hostile_any,  # not a part at all
)
internal_message = st.builds(
    Message,
    role=role,
    parts=st.lists(part, max_size=3).map(tuple),
    message_id=st.one_of(st.builds(lambda: "msg_" + uuid.uuid4().hex), short_text),
    tool_call_id=st.one_of(st.none(), call_id),
    name=st.one_of(st.none(), short_text),
    extra=st.one_of(st.just({}), st.dictionaries(short_text, hostile_json_value, max_size=2)),
    is_error=st.one_of(st.booleans(), hostile_any),
    pinned=st.booleans(),
)


def _batches(
    message: st.SearchStrategy[Any], rounds: st.SearchStrategy[list[Any]] | None = None
) -> st.SearchStrategy[Any]:
    """A list of 1-3 messages (most often), a tool round (a call and its result), one message
    alone, or any hostile value in place of the list."""
    return st.one_of(
        st.lists(message, min_size=1, max_size=3),
        st.lists(message, min_size=1, max_size=3),
        *([rounds, rounds] if rounds is not None else []),
        message,
        hostile_any,
    )


fresh_id = st.builds(lambda: "call_" + uuid.uuid4().hex[:8])
arguments = st.one_of(st.just("{}"), shallow_json_value.map(lambda v: lenient_dumps({"v": v})), hostile_json_text)


def _openai_round(cid: str, args: str, name: str, output: str) -> list[Any]:
    call = {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": cid, "content": output},
    ]


def _responses_round(cid: str, args: str, name: str, output: str) -> list[Any]:
    return [
        {"type": "function_call", "call_id": cid, "name": name, "arguments": args},
        {"type": "function_call_output", "call_id": cid, "output": output},
    ]


def _anthropic_round(cid: str, args: str, name: str, output: str) -> list[Any]:
    try:
        tool_input = json.loads(args) if args else {}
    except (ValueError, RecursionError):  # not JSON, or nested deeper than Python's parser goes
        tool_input = {"raw": args}
    return [
        {"role": "assistant", "content": [{"type": "tool_use", "id": cid, "name": name, "input": tool_input}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": cid, "content": output}]},
    ]


def _rounds(build: Callable[[str, str, str, str], list[Any]]) -> st.SearchStrategy[list[Any]]:
    return st.builds(build, fresh_id, arguments, tool_name, hostile_text).flatmap(
        lambda r: st.one_of(st.just(r), mutated(st.just(r), max_mutations=1))
    )


def _dicts(message: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Messages as generated (half of them) or mutated at one to three random paths."""
    return st.one_of(message, mutated(message))


INPUTS: dict[str, st.SearchStrategy[Any]] = {
    "internal": _batches(internal_message),
    "openai": _batches(_dicts(openai_message), _rounds(_openai_round)),
    "responses": _batches(_dicts(responses_item), _rounds(_responses_round)),
    "anthropic": _batches(_dicts(anthropic_message), _rounds(_anthropic_round)),
    "langchain": _batches(langchain_message()),
}


def fuzz_add(store: Any, fmt: str, examples: int) -> None:
    """Run ``examples`` hostile inputs of format ``fmt`` through `Session.add` on sessions in ``store``."""
    entry = f"Session.add ({fmt})"
    out_format = "openai" if fmt == "internal" else fmt

    @fuzz_settings(examples)
    @given(items=INPUTS[fmt])
    def run(items: Any) -> None:
        session, before = new_session(store, format=out_format)
        kwargs = {} if fmt == "internal" else {"format": fmt}
        outcome = probe.call(entry, session.add, items, **kwargs)
        if not outcome.ok:  # refused: the session is unchanged
            probe.kept(entry, [m.message_id for m in session.transcript], before, where="a refused add")
        check_after(entry, session, before, format=out_format)

    run()
