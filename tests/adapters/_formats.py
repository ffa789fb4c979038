"""Hypothesis strategies for provider-format message lists, with the odd keys real clients send."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
WORDS = st.sampled_from(["", "hello", "读取文件", "line\nbreak", "  ", "🙂 ok"])
TEXTS = st.one_of(WORDS, TEXT)
IDS = st.sampled_from(["c0", "c1", "c2", "call_0"])
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False, allow_infinity=False), TEXT),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)
ARGS = st.dictionaries(st.sampled_from(["path", "q", "n"]), JSON_VALUES, max_size=3)
UNKNOWN = st.dictionaries(st.sampled_from(["x_custom", "metadata", "cache_control"]), JSON_VALUES, max_size=2)


def _with(base: dict[str, Any], optional: dict[str, Any], present: list[bool]) -> dict[str, Any]:
    out = dict(base)
    for (key, value), keep in zip(optional.items(), present, strict=True):
        if keep:
            out[key] = value
    return out


@st.composite
def _maybe(draw: st.DrawFn, base: dict[str, Any], **optional: Any) -> dict[str, Any]:
    return _with(base, optional, [draw(st.booleans()) for _ in optional])


def _json_text(draw: st.DrawFn) -> str:
    args = draw(ARGS)
    style = draw(st.sampled_from(["compact", "spaced", "empty"]))
    if style == "empty":
        return ""
    return json.dumps(args, separators=(",", ":")) if style == "compact" else json.dumps(args, ensure_ascii=False)


# --- OpenAI Chat Completions -----------------------------------------------------------------------
@st.composite
def openai_part(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["text", "text", "image", "audio"]))
    if kind == "text":
        return draw(_maybe({"type": "text", "text": draw(TEXTS)}, cache_control={"type": "ephemeral"}))
    if kind == "image":
        detail = draw(st.sampled_from([None, "auto", "low", "high", "original"]))
        image = {"url": draw(st.sampled_from(["https://x/a.png", "data:image/png;base64,AAAA"]))}
        if detail is not None:
            image["detail"] = detail
        return {"type": "image_url", "image_url": image}
    return {"type": "input_audio", "input_audio": {"data": "AAA", "format": "wav"}}


@st.composite
def openai_call(draw: st.DrawFn) -> dict[str, Any]:
    cid, name, arguments = draw(IDS), draw(st.sampled_from(["grep", "read"])), _json_text(draw)
    if draw(st.integers(0, 4)) == 0:
        return {"id": cid, "name": name, "arguments": arguments}  # the flat form some frameworks use
    call = draw(_maybe({"id": cid, "function": {"name": name, "arguments": arguments}}, type="function"))
    return call | draw(UNKNOWN.map(lambda d: {k: v for k, v in d.items() if k == "x_custom"}))


@st.composite
def openai_message(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["system", "developer", "user", "assistant", "assistant", "tool"]))
    content_kind = draw(st.sampled_from(["str", "str", "list", "none", "absent"]))
    msg: dict[str, Any] = {"role": role}
    if content_kind == "str":
        msg["content"] = draw(TEXTS)
    elif content_kind == "list":
        msg["content"] = draw(st.lists(openai_part(), max_size=3))
    elif content_kind == "none":
        msg["content"] = None
    if role == "assistant":
        calls = draw(st.sampled_from(["absent", "none", "empty", "some", "some"]))
        if calls == "none":
            msg["tool_calls"] = None
        elif calls == "empty":
            msg["tool_calls"] = []
        elif calls == "some":
            msg["tool_calls"] = draw(st.lists(openai_call(), min_size=1, max_size=3))
        msg |= draw(_maybe({}, refusal=draw(st.one_of(st.none(), TEXT)), audio=None, function_call=None))
    if role == "tool":
        msg["tool_call_id"] = draw(IDS)
    msg |= draw(_maybe({}, name=draw(st.sampled_from(["bob", "grep"])), id=draw(st.sampled_from(["m1", "m2"]))))
    return msg | draw(UNKNOWN)


openai_messages = st.lists(openai_message(), max_size=8)


# --- OpenAI Responses -----------------------------------------------------------------------------
@st.composite
def responses_part(draw: st.DrawFn, *, assistant: bool) -> dict[str, Any]:
    if assistant:
        return draw(
            st.sampled_from(["text", "text", "refusal"]).flatmap(
                lambda k: (
                    st.just({"type": "refusal", "refusal": "no"})
                    if k == "refusal"
                    else _maybe({"type": "output_text", "text": draw(TEXTS)}, annotations=[], logprobs=[])
                )
            )
        )
    kind = draw(st.sampled_from(["text", "text", "image", "file", "image_by_file"]))
    if kind == "text":
        return {"type": "input_text", "text": draw(TEXTS)}
    if kind == "image":
        return draw(
            _maybe(
                {"type": "input_image", "image_url": "https://x/a.png"},
                detail=draw(st.sampled_from(["auto", "low", "high"])),
            )
        )
    if kind == "image_by_file":
        return {"type": "input_image", "file_id": "file_1", "detail": "auto"}
    return {"type": "input_file", "file_id": "file_2"}


@st.composite
def responses_item(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["message", "message", "function_call", "function_call_output", "reasoning"]))
    if kind == "message":
        role = draw(st.sampled_from(["user", "system", "developer", "assistant", "assistant"]))
        content: Any = (
            draw(TEXTS)
            if draw(st.booleans())
            else draw(st.lists(responses_part(assistant=role == "assistant"), max_size=3))
        )
        item = draw(
            _maybe(
                {"role": role, "content": content},
                type="message",
                id=draw(st.sampled_from(["msg_1", "msg_2"])),
                status="completed",
            )
        )
        return item
    if kind == "function_call":
        return draw(
            _maybe(
                {"type": "function_call", "call_id": draw(IDS), "name": "grep", "arguments": _json_text(draw)},
                id=draw(st.sampled_from(["fc_1", "fc_2"])),
                status="completed",
            )
        )
    if kind == "function_call_output":
        output: Any = (
            draw(TEXTS) if draw(st.booleans()) else draw(st.lists(responses_part(assistant=False), max_size=2))
        )
        return draw(
            _maybe(
                {"type": "function_call_output", "call_id": draw(IDS), "output": output}, id="fco_1", status="completed"
            )
        )
    summary = [{"type": "summary_text", "text": t} for t in draw(st.lists(TEXTS, max_size=2))]
    return draw(
        _maybe(
            {"type": "reasoning", "summary": summary},
            id=draw(st.sampled_from(["rs_1", "rs_2"])),
            encrypted_content=draw(st.one_of(st.none(), st.just("gAAAA=="))),
            content=[{"type": "reasoning_text", "text": "raw"}],
        )
    )


responses_items = st.lists(responses_item(), max_size=8)


# --- Anthropic ------------------------------------------------------------------------------------
@st.composite
def anthropic_image(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        source = {
            "type": "base64",
            "media_type": draw(st.sampled_from(["image/png", "image/jpeg"])),
            "data": "iVBORw0KGgo=",
        }
    else:
        source = {"type": "url", "url": "https://x/a.png"}
    return draw(_maybe({"type": "image", "source": source}, cache_control={"type": "ephemeral"}))


@st.composite
def anthropic_text(draw: st.DrawFn) -> dict[str, Any]:
    return draw(
        _maybe(
            {"type": "text", "text": draw(TEXTS)},
            cache_control={"type": "ephemeral"},
            citations=[{"type": "char_location", "cited_text": "x"}],
        )
    )


@st.composite
def anthropic_result(draw: st.DrawFn) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": draw(IDS)}
    content = draw(st.sampled_from(["str", "list", "absent"]))
    if content == "str":
        block["content"] = draw(TEXTS)
    elif content == "list":
        block["content"] = draw(
            st.lists(
                st.one_of(
                    anthropic_text(),
                    anthropic_image(),
                    st.just({"type": "search_result", "source": "s", "title": "t", "content": []}),
                ),
                max_size=3,
            )
        )
    return draw(_maybe(block, is_error=draw(st.booleans()), cache_control={"type": "ephemeral"}))


@st.composite
def anthropic_message(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["user", "user", "assistant"]))
    if draw(st.integers(0, 3)) == 0:
        return {"role": role, "content": draw(TEXTS)}
    if role == "user":
        block = st.one_of(
            anthropic_text(),
            anthropic_image(),
            anthropic_result(),
            anthropic_result(),
            st.just({"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "d"}}),
        )
    else:
        block = st.one_of(
            anthropic_text(),
            st.builds(lambda cid, args: {"type": "tool_use", "id": cid, "name": "grep", "input": args}, IDS, ARGS),
            st.builds(lambda t: {"type": "thinking", "thinking": t, "signature": "EqQB"}, TEXTS),
            st.just({"type": "redacted_thinking", "data": "EmwKAhgB"}),
            st.just({"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"query": "q"}}),
        )
    msg = {"role": role, "content": draw(st.lists(block, max_size=4))}
    return msg | draw(_maybe({}, id="m1"))


@st.composite
def anthropic_system(draw: st.DrawFn) -> Any:
    return draw(st.one_of(st.none(), TEXTS, st.lists(anthropic_text(), min_size=1, max_size=2)))


anthropic_messages = st.lists(anthropic_message(), max_size=7)


# --- LangChain ------------------------------------------------------------------------------------
@st.composite
def langchain_message(draw: st.DrawFn) -> Any:
    from langchain_core import messages as lc

    def content() -> Any:
        if draw(st.booleans()):
            return draw(TEXTS)
        block = st.one_of(
            TEXTS,
            st.builds(lambda t: {"type": "text", "text": t}, TEXTS),
            st.just({"type": "image_url", "image_url": {"url": "https://x/a.png"}}),
            st.just({"type": "image", "url": "https://x/b.png"}),
            st.just({"type": "tool_use", "id": "c0", "name": "grep", "input": {}}),
        )
        return draw(st.lists(block, max_size=3))

    kind = draw(st.sampled_from(["system", "developer", "human", "ai", "ai", "tool", "chunk", "chat"]))
    common = draw(_maybe({}, id=draw(st.sampled_from(["run-1", "run-2"])), name="bob"))
    extra = draw(_maybe({}, additional_kwargs={"x": 1}, response_metadata={"model": "m"}))
    if kind == "system":
        return lc.SystemMessage(content=content(), **common, **extra)
    if kind == "developer":
        return lc.SystemMessage(content=content(), additional_kwargs={"__openai_role__": "developer"}, **common)
    if kind == "human":
        return lc.HumanMessage(content=content(), **common, **extra)
    if kind == "chat":
        return lc.ChatMessage(role=draw(st.sampled_from(["user", "assistant", "system"])), content=content(), **common)
    if kind == "tool":
        more = draw(_maybe({}, status="error", artifact={"rows": [1, 2]}))
        return lc.ToolMessage(content=content(), tool_call_id=draw(IDS), **common, **extra, **more)
    calls = [
        {"name": "grep", "args": draw(ARGS), "id": cid, "type": "tool_call"} for cid in draw(st.lists(IDS, max_size=2))
    ]
    usage = draw(_maybe({}, usage_metadata={"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}))
    cls = lc.AIMessageChunk if kind == "chunk" else lc.AIMessage
    return cls(content=content(), tool_calls=calls, **common, **extra, **usage)


langchain_messages = st.lists(langchain_message(), max_size=6)
