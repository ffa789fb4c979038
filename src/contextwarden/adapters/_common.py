"""Machinery shared by the format adapters: exact round trips through hints kept in `Message.extra`.

Every adapter renders a `Message` *generically* from its parts (what a message built in code
would look like in that format). When a message is read from a provider dict, the adapter renders
it generically once and records the difference between the source and that rendering as a short
list of patch operations in ``extra[<format>]``; writing the message back replays the patch, so
``from_messages(to_messages(x)) == x`` for every field, including keys contextwarden does not know.

The hints of a message (``extra[<format>]``):

``keep``
    patch operations on keys the model has no field for (``refusal``, ``cache_control``,
    ``status``...); always replayed.
``ops``
    patch operations on the keys the parts are rendered into; replayed only while the message's
    content is unchanged (``fp`` matches), so a compaction that rewrites a message never brings
    the old content back.
``fp``
    content fingerprint the ``ops`` and ``raw`` entries were taken against.
``raw``
    ``[position, block]`` pairs: content blocks of a type the model has no part for (audio,
    files, server tool blocks). They ride along unchanged while the content is unchanged.
``shape``
    ``"list"`` or ``"absent"`` when the source wrote its content in a non-default shape.
``id``
    true when the source carried its own id (the message id is that id).

A patch operation is ``["set", path, value]`` or ``["del", path]``; paths hold dict keys and list
indices, so hints stay JSON-serializable and survive a trip through a session store.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from .. import _json
from ..exceptions import MessageError
from ..messages import Message, ThinkingPart

JSONDict = dict[str, Any]
Op = list[Any]
Render = Callable[[Message, "Mapping[str, Any] | None", bool], JSONDict]
"""``render(message, hints, exact)``: hints is None for a message from another source; exact is
true when the message content still matches the hints' fingerprint."""


# --- copies and patches -----------------------------------------------------------------------
def copy_json(value: Any) -> Any:
    """Copy the containers of a JSON-like value so output never aliases input or the hints."""
    if isinstance(value, dict):
        return {k: copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_json(v) for v in value]
    return value


def diff(src: Any, gen: Any) -> list[Op]:
    """Patch operations that turn ``gen`` (a fresh rendering) into ``src`` (the source)."""
    ops: list[Op] = []
    _diff(src, gen, [], ops)
    return ops


def _diff(src: Any, gen: Any, path: list[Any], ops: list[Op]) -> None:
    kind = type(src)
    if kind is str or kind is int or kind is float or kind is bool or src is None:
        # a JSON scalar (the common leaf), compared as the last branch below compares it, without its ABC checks
        if kind is not type(gen) or src != gen:
            ops.append(["set", path, src])
        return
    if (kind is dict or isinstance(src, Mapping)) and isinstance(gen, dict):
        for key, value in src.items():
            if key in gen:
                _diff(value, gen[key], [*path, key], ops)
            else:
                ops.append(["set", [*path, key], copy_json(value)])
        for key in gen:
            if key not in src:
                ops.append(["del", [*path, key]])
    elif isinstance(src, list) and isinstance(gen, list) and len(src) == len(gen):
        for j, (a, b) in enumerate(zip(src, gen, strict=True)):
            _diff(a, b, [*path, j], ops)
    # Types are compared too: True == 1 and 1 == 1.0 in Python, not in the source JSON.
    elif type(src) is not type(gen) or src != gen:
        ops.append(["set", path, copy_json(src)])


def apply(target: Any, ops: Sequence[Op]) -> None:
    """Replay patch operations on a fresh rendering (in place).

    Raises:
        LookupError, TypeError: the rendering does not have the shape the patch was taken on.
    """
    for op in ops:
        path = op[1]
        if not path:
            raise TypeError("a patch never replaces the whole item")
        node = target
        for key in path[:-1]:
            node = node[key]
        if op[0] == "set":
            node[path[-1]] = copy_json(op[2])
        else:
            del node[path[-1]]


# --- hints ------------------------------------------------------------------------------------
def fingerprint(message: Message) -> str:
    """What the ``ops``/``raw`` hints depend on: the counted content plus the error flag."""
    return message.content_hash + ("!" if message.is_error else "")


def hints_of(message: Message, fmt: str) -> Mapping[str, Any] | None:
    """The hints ``fmt`` left on ``message``, or None for a message from elsewhere."""
    hints = message.extra.get(fmt)
    return hints if isinstance(hints, Mapping) else None


def is_exact(message: Message, hints: Mapping[str, Any] | None) -> bool:
    """True when the message content is what the hints were taken against."""
    return hints is not None and ("fp" not in hints or hints["fp"] == fingerprint(message))


def record(
    message: Message, src: Mapping[str, Any], hints: JSONDict, fmt: str, render: Render, mapped: frozenset[str]
) -> Message:
    """Attach to ``message`` (just built by the adapter) the hints that make ``render`` reproduce ``src``."""
    gen = render(message, hints, True)
    keep: list[Op] = []
    ops: list[Op] = []
    for op in diff(src, gen):
        (ops if op[1][0] in mapped else keep).append(op)
    if keep:
        hints["keep"] = keep
    if ops:
        hints["ops"] = ops
    if ops or hints.get("raw"):
        hints["fp"] = fingerprint(message)
    return attach_fresh(message, fmt, hints)


def attach(message: Message, fmt: str, hints: JSONDict) -> Message:
    """``message`` with ``hints`` under ``extra[fmt]`` (unchanged when there is nothing to keep)."""
    if not hints and not any(isinstance(p, ThinkingPart) for p in message.parts):
        return message
    # A message with thinking keeps an (empty) hint namespace: it marks the thinking as this
    # provider's, the only one that can verify its signature.
    return replace(message, extra={**message.extra, fmt: hints})


def attach_fresh(message: Message, fmt: str, hints: JSONDict) -> Message:
    """`attach` for a message the adapter has just built and nobody else has seen.

    Setting the field in place skips a copy of every hinted message; it is safe only because
    the object has not left the adapter yet.
    """
    if not hints and not any(isinstance(p, ThinkingPart) for p in message.parts):
        return message
    object.__setattr__(message, "extra", {**message.extra, fmt: hints})
    return message


def render(message: Message, fmt: str, render_fn: Render) -> JSONDict:
    """Render ``message`` with its hints replayed (the inverse of `record`)."""
    hints = hints_of(message, fmt)
    exact = is_exact(message, hints)
    out = render_fn(message, hints, exact)
    if hints is None:
        return out
    try:
        if exact and hints.get("ops"):
            apply(out, hints["ops"])
        if hints.get("keep"):
            apply(out, hints["keep"])
    except (LookupError, TypeError):
        # Hints from another version of an adapter: the generic rendering is still correct.
        out = render_fn(message, hints, False)
    return out


def insert_raw(blocks: list[Any], raw: Any) -> None:
    """Put unknown source blocks back at their positions."""
    for pos, block in raw:
        blocks.insert(pos, copy_json(block))


def has_opaque_content(message: Message) -> bool:
    """True when the message carries source blocks the model has no part for."""
    for hints in message.extra.values():
        if isinstance(hints, Mapping):
            if hints.get("raw"):
                return True
            items = hints.get("items")
            if isinstance(items, list) and any(isinstance(d, Mapping) and d.get("raw") for d in items):
                return True
    return False


# --- bad input ----------------------------------------------------------------------------------
def where(index: int | None) -> str:
    """How an error names the offending item."""
    return f"item {index}" if index is not None else "system"


def bad(index: int | None, field: str, problem: str, fix: str) -> MessageError:
    """A `MessageError` naming the item, the field, what is wrong and the fix."""
    return MessageError(f"{where(index)}: `{field}` {problem}; {fix}.", index=index, field=field)


def show(value: Any) -> str:
    """``repr(value)`` for an error message, short and never failing.

    A value nested thousands deep is shown to a few levels, an integer with more digits than
    Python prints by its size, an object whose ``repr`` raises by its type.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"<int of about {int(value.bit_length() * 0.30103) + 1:,} digits>"
    try:
        text = _SHORT_REPR.repr(value)
    except Exception:  # a hostile object's __repr__ (or __len__) may raise anything
        return f"<unprintable {type(value).__name__}>"
    return f"{text[:60]}{'...' if len(text) > 60 else ''}"


def describe(value: Any) -> str:
    """A short description of a bad value for an error message: its type and `show` of it."""
    return f"{type(value).__name__} {show(value)}"


_SHORT_REPR = reprlib.Repr()
"""Reprs that stop at three levels of nesting: a 5,000-deep list prints without recursing."""
_SHORT_REPR.maxlevel = 3
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = _SHORT_REPR.maxlong = 80


def require_mapping(item: Any, index: int, what: str, example: str) -> Mapping[str, Any]:
    """The item as a mapping, or a `MessageError` saying what was expected (or that it nests too deep)."""
    if isinstance(item, Mapping):
        check_depth(item, index)
        return item
    raise MessageError(
        f"{where(index)}: expected {what} (a dict like {example}), got {describe(item)}; "
        "pass dicts (for SDK objects call `.model_dump(exclude_unset=True)`), or choose the right `format=`.",
        index=index,
        field="(item)",
    )


def check_depth(item: Any, index: int | None) -> None:
    """A `MessageError` when the item's dicts and lists nest deeper than `_json.MAX_DEPTH` levels."""
    if _json.nests_deeper(item, _json.MAX_DEPTH):
        raise bad(
            index,
            "(item)",
            f"nests dicts or lists deeper than {_json.MAX_DEPTH} levels",
            "flatten the data (or send it as text)",
        )


def check_text(value: Any, index: int | None, field: str) -> str:
    """``value`` if it is a string without lone surrogates, else a `MessageError`."""
    if not isinstance(value, str):
        raise bad(index, field, f"must be a string, got {describe(value)}", "convert it to text (json.dumps for data)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise bad(
            index,
            field,
            f"contains a lone surrogate at character {exc.start}",
            "decode the source bytes with errors='replace' or fix the string",
        ) from None
    return value


def check_id(value: Any, index: int | None, field: str) -> str:
    """A non-empty id string, else a `MessageError`."""
    if not isinstance(value, str) or not value:
        raise bad(index, field, f"must be a non-empty string, got {describe(value)}", "set it to the call's id")
    return value


def check_arguments(value: Any, index: int | None, field: str) -> str:
    """Tool-call arguments: a JSON text (bounded in depth), else a `MessageError`."""
    text = check_text(value, index, field)
    if text:
        try:
            _json.loads(text)
        except _json.BadJSON as exc:
            raise bad(
                index,
                field,
                f"{exc.problem}: {text[:60]!r}",
                f"pass the arguments as a JSON text (json.dumps them), at most {_json.MAX_DEPTH} levels deep",
            ) from None
    return text


def dump_arguments(value: Any, index: int | None, field: str) -> str:
    """Structured tool input (Anthropic ``input``, LangChain ``args``) as the JSON text of the model."""
    if _json.nests_deeper(value, _json.MAX_DEPTH):
        raise bad(index, field, f"nests deeper than {_json.MAX_DEPTH} levels", "flatten the input")
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise bad(
            index, field, f"is not JSON-serializable ({exc})", "pass plain dicts, lists, str and numbers"
        ) from None
    return check_text(text, index, field)


def load_arguments(arguments: str) -> Any:
    """The model's JSON argument text as structured input (``{}`` for an empty text).

    Raises:
        ValueError: the text is not JSON or nests too deep (`contextwarden._json.BadJSON`).
    """
    return _json.loads(arguments) if arguments else {}
