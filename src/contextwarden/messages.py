"""The one internal message type every format is converted to and from.

A `Message` is immutable and carries a stable ``message_id``. Its content is a tuple of parts
(text, image, thinking, tool call); a tool result is a message with ``role="tool"`` and the
``tool_call_id`` of the call it answers. Provider-specific fields that have no place in the
model ride along in ``extra`` so that adapters convert back losslessly.
"""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, TypeAdapter

from . import _json
from .exceptions import MessageError

__all__ = [
    "ROLES",
    "ImagePart",
    "Message",
    "MessagesAdapter",
    "Part",
    "Role",
    "TextPart",
    "ThinkingPart",
    "ToolCall",
    "check_message",
    "new_message_id",
    "same_content",
]

Role = Literal["system", "developer", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset(get_args(Role))
INSTRUCTION_ROLES: frozenset[str] = frozenset({"system", "developer"})
"""Roles whose messages are instructions: they open a ``"system"`` round and are never compacted."""


def new_message_id() -> str:
    """A fresh, URL-safe, sortable-enough message id."""
    return "msg_" + uuid.uuid4().hex


@dataclass(frozen=True, kw_only=True, slots=True)
class TextPart:
    """Plain text."""

    text: str
    kind: Literal["text"] = "text"


@dataclass(frozen=True, kw_only=True, slots=True)
class ImagePart:
    """An image given by URL (``data:`` URLs included)."""

    url: str
    """Where the image is; a ``data:`` URL carries it inline."""
    detail: Literal["auto", "low", "high"] = "auto"
    """OpenAI's detail level; it decides how the image is billed."""
    width: int | None = None
    """Pixel width when known; unknown sizes are billed at the provider's maximum."""
    height: int | None = None
    """Pixel height when known."""
    media_type: str | None = None
    """MIME type, when the source format gives one (Anthropic base64 sources do)."""
    kind: Literal["image"] = "image"


@dataclass(frozen=True, kw_only=True, slots=True)
class ThinkingPart:
    """Model reasoning (Anthropic thinking blocks, OpenAI Responses reasoning items)."""

    text: str
    signature: str | None = None
    """Provider signature that must be sent back unchanged."""
    redacted: bool = False
    """True for redacted thinking, whose ``text`` is the opaque provider data."""
    kind: Literal["thinking"] = "thinking"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCall:
    """A call the assistant asks the caller to run."""

    call_id: str
    name: str
    arguments: str
    """The arguments as a JSON text, exactly as the model produced them."""
    kind: Literal["tool-call"] = "tool-call"

    def parsed_arguments(self) -> Any:
        """The arguments decoded from JSON (within `contextwarden._json.MAX_DEPTH` levels).

        Raises:
            ValueError: the arguments are not JSON or nest too deep (`add()` refuses both).
        """
        return _json.loads(self.arguments) if self.arguments else {}


Part = Annotated[TextPart | ImagePart | ThinkingPart | ToolCall, Field(discriminator="kind")]


MEMO_KEYS = ("_tool_calls", "_content_hash", "_ck_count")
"""Attributes a `Message` computes once and keeps (see `Message.__post_init__`)."""


@dataclass(frozen=True, kw_only=True)
class Message:
    """One message of a conversation, in any role."""

    role: Role
    parts: tuple[Part, ...] = ()
    message_id: str = field(default_factory=new_message_id)
    """Stable id; the transcript is idempotent by it."""
    tool_call_id: str | None = None
    """For ``role="tool"``: the id of the call this message answers."""
    name: str | None = None
    """Tool name for tool results; participant name otherwise."""
    is_error: bool = False
    """For tool results: the tool reported a failure."""
    pinned: bool = False
    """Pinned messages are never evicted or shortened by compaction."""
    turn: int | None = None
    """Agent turn the message was added in."""
    created_at: float | None = None
    """Unix time the message entered the transcript."""
    snapshot_id: str | None = None
    """For a shortened message in a view: the snapshot holding the full original."""
    source_ids: tuple[str, ...] = ()
    """For messages compaction wrote (summary, preview): the transcript ids they stand for."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Provider-specific fields kept for lossless conversion back; JSON-serializable."""

    def __post_init__(self) -> None:
        # The values computed on first use (tool calls, content hash, a token count) get their
        # keys now, in one order for every message: an instance dict that gains keys in another
        # order than its class's other instances stops sharing their key table and takes about
        # 400 bytes more, which a long session pays for every message it keeps.
        for key in MEMO_KEYS:
            object.__setattr__(self, key, None)

    # --- constructors ---------------------------------------------------------------------
    @classmethod
    def system(cls, text: str, **kwargs: Any) -> Message:
        """A system message."""
        return cls(role="system", parts=(TextPart(text=text),), **kwargs)

    @classmethod
    def user(cls, text: str, **kwargs: Any) -> Message:
        """A user message."""
        return cls(role="user", parts=(TextPart(text=text),), **kwargs)

    @classmethod
    def assistant(cls, text: str = "", *, tool_calls: Sequence[ToolCall] = (), **kwargs: Any) -> Message:
        """An assistant message, optionally with tool calls."""
        parts: tuple[Part, ...] = ((TextPart(text=text),) if text else ()) + tuple(tool_calls)
        return cls(role="assistant", parts=parts, **kwargs)

    @classmethod
    def tool_result(cls, call_id: str, text: str, *, name: str | None = None, **kwargs: Any) -> Message:
        """The result of the tool call ``call_id``."""
        return cls(role="tool", parts=(TextPart(text=text),), tool_call_id=call_id, name=name, **kwargs)

    # --- derived views --------------------------------------------------------------------
    @property
    def text(self) -> str:
        """All text parts joined by newlines."""
        texts = [p.text for p in self.parts if isinstance(p, TextPart)]
        return texts[0] if len(texts) == 1 else "\n".join(texts)

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The tool calls this message makes (assistant messages only); cached on the instance."""
        cached: tuple[ToolCall, ...] | None = self.__dict__.get("_tool_calls")
        if cached is None:
            cached = tuple(p for p in self.parts if isinstance(p, ToolCall))
            object.__setattr__(self, "_tool_calls", cached)
        return cached

    @property
    def content_hash(self) -> str:
        """A digest of everything a token counter sees; cached on the instance."""
        cached = self.__dict__.get("_content_hash")
        if cached is None:
            h = hashlib.blake2b(digest_size=16)
            h.update(f"{self.role}\x00{self.name or ''}\x00{self.tool_call_id or ''}".encode())
            for p in self.parts:
                h.update(b"\x01" + p.kind.encode() + b"\x00")
                if isinstance(p, TextPart):
                    h.update(p.text.encode("utf-8", "surrogatepass"))
                elif isinstance(p, ToolCall):
                    h.update(f"{p.call_id}\x00{p.name}\x00{p.arguments}".encode("utf-8", "surrogatepass"))
                elif isinstance(p, ThinkingPart):
                    h.update(f"{p.redacted}\x00{p.text}".encode("utf-8", "surrogatepass"))
                else:
                    h.update(f"{p.url}\x00{p.detail}\x00{p.width}\x00{p.height}".encode("utf-8", "surrogatepass"))
            cached = h.hexdigest()
            object.__setattr__(self, "_content_hash", cached)
        return cached

    def remembered_count(self, key: object) -> int | None:
        """The token count `remember_count` kept on this message under ``key``, else None."""
        memo: tuple[object, int] | None = self.__dict__["_ck_count"]
        return memo[1] if memo is not None and memo[0] == key else None

    def remember_count(self, key: object, count: int) -> None:
        """Keep one token count on the message under ``key`` (a token accountant's counter and framing).

        Like the tool calls and the content hash, a value computed from the message and kept with
        it: equality, ``repr`` and serialization ignore it, and a later count under another key
        replaces it.
        """
        object.__setattr__(self, "_ck_count", (key, count))

    def with_text(self, text: str, **changes: Any) -> Message:
        """A copy whose text parts are replaced by one text part (tool calls and images kept)."""
        kept = tuple(p for p in self.parts if not isinstance(p, TextPart | ThinkingPart))
        return replace(self, parts=(TextPart(text=text), *kept), **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the storage format)."""
        out: dict[str, Any] = MessagesAdapter.dump_python([self], mode="json")[0]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        """Inverse of `to_dict`."""
        return MessagesAdapter.validate_python([data])[0]


MessagesAdapter: TypeAdapter[list[Message]] = TypeAdapter(list[Message])
"""Serializes message lists to and from JSON; stores persist this, never pickle."""


def _where(message: Message, index: int | None) -> str:
    """How an error names a message: its index in the call and its id."""
    mid = message.message_id
    named = f" ({mid!r:.60})" if isinstance(mid, str) and mid else ""
    return (f"message {index}" if index is not None else "message") + named


def _check_text(value: object, *, index: int | None, field_name: str, where: str | None = None) -> None:
    where = where or (f"message {index}" if index is not None else "message")
    if not isinstance(value, str):
        raise MessageError(
            f"{where}: `{field_name}` must be a string, got {type(value).__name__} ({value!r:.60}); "
            "convert it to text (json.dumps for structured data) before adding it.",
            index=index,
            field=field_name,
        )
    if value.isascii():  # the common case, checked in C without encoding the text
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise MessageError(
            f"{where}: `{field_name}` contains a lone surrogate at character {exc.start} "
            f"({value[exc.start : exc.start + 1]!r}); decode the source bytes with errors='replace' "
            "or fix the string before adding it.",
            index=index,
            field=field_name,
        ) from None


def _check_optional_text(value: object, *, index: int | None, field_name: str, where: str) -> None:
    if value is not None:
        _check_text(value, index=index, field_name=field_name, where=where)


def _check_arguments(call: ToolCall, *, index: int | None, field_name: str, where: str) -> None:
    """Tool-call arguments: a JSON text, nested at most `MAX_DEPTH` levels, with no escaped lone surrogate."""
    _check_text(call.arguments, index=index, field_name=field_name, where=where)
    if not call.arguments:
        return
    try:
        value = _json.loads(call.arguments)
    except _json.BadJSON as exc:
        raise MessageError(
            f"{where}: tool call {call.call_id!r} ({call.name}) has arguments that {exc.problem}: "
            f"{call.arguments!r:.80}; pass the arguments as a JSON text (json.dumps of a dict, at most "
            f"{_json.MAX_DEPTH} levels deep).",
            index=index,
            field=field_name,
        ) from None
    if _json.may_decode_to_surrogate(call.arguments):
        path = _json.lone_surrogate_path(value)
        if path is not None:
            raise MessageError(
                f"{where}: tool call {call.call_id!r} ({call.name}) has arguments whose value at {path} decodes "
                "to a lone surrogate (a \\uD800-\\uDFFF escape without its pair), which no store can keep; "
                "send the whole character (both halves of the pair) or drop it.",
                index=index,
                field=field_name,
            )


def check_message(message: Message, *, index: int | None = None) -> Message:
    """Check one message for what every provider or store rejects; return it unchanged.

    Raises:
        MessageError: an unknown role, non-text content, a lone surrogate (raw, or as a JSON
            escape in tool-call arguments), a tool result without ``tool_call_id``, tool-call
            arguments that are not valid JSON or nest deeper than `contextwarden._json.MAX_DEPTH`
            levels, an empty or non-string id, or ``extra`` that is not storable JSON.
    """
    if _is_common(message):
        return message
    mid = message.message_id
    where = _where(message, index)
    _check_bookkeeping(message, index=index, where=where)
    if message.role not in ROLES:
        raise MessageError(
            f"{where}: unknown role {message.role!r}; use one of {sorted(ROLES)}.", index=index, field="role"
        )
    if message.role == "tool" and not message.tool_call_id:
        raise MessageError(
            f"{where}: a tool result needs `tool_call_id`; set it to the id of the call it answers.",
            index=index,
            field="tool_call_id",
        )
    if not isinstance(mid, str) or not mid:
        raise MessageError(
            f"{where}: `message_id` must be a non-empty string, got {type(mid).__name__} ({mid!r:.60}); "
            "leave it out to get a fresh id.",
            index=index,
            field="message_id",
        )
    _check_text(mid, index=index, field_name="message_id", where=where)
    _check_optional_text(message.tool_call_id, index=index, field_name="tool_call_id", where=where)
    _check_optional_text(message.name, index=index, field_name="name", where=where)
    for j, part in enumerate(message.parts):
        if isinstance(part, TextPart):
            _check_text(part.text, index=index, field_name=f"parts[{j}].text", where=where)
        elif isinstance(part, ThinkingPart):
            _check_text(part.text, index=index, field_name=f"parts[{j}].text", where=where)
            _check_optional_text(part.signature, index=index, field_name=f"parts[{j}].signature", where=where)
        elif isinstance(part, ToolCall):
            if message.role != "assistant":
                raise MessageError(
                    f"{where}: only assistant messages make tool calls (role={message.role!r}); "
                    "move the call to an assistant message.",
                    index=index,
                    field=f"parts[{j}]",
                )
            _check_text(part.call_id, index=index, field_name=f"parts[{j}].call_id", where=where)
            _check_text(part.name, index=index, field_name=f"parts[{j}].name", where=where)
            _check_arguments(part, index=index, field_name=f"parts[{j}].arguments", where=where)
        elif isinstance(part, ImagePart):
            _check_text(part.url, index=index, field_name=f"parts[{j}].url", where=where)
            _check_optional_text(part.media_type, index=index, field_name=f"parts[{j}].media_type", where=where)
        else:
            raise MessageError(
                f"{where}: part {j} has unsupported type {type(part).__name__}; "
                "use TextPart, ImagePart, ThinkingPart or ToolCall.",
                index=index,
                field=f"parts[{j}]",
            )
    if message.extra:
        if not isinstance(message.extra, Mapping):
            raise MessageError(
                f"{where}: `extra` must be a dict, got {type(message.extra).__name__}; pass a dict of JSON values.",
                index=index,
                field="extra",
            )
        problem = _json.metadata_problem(dict(message.extra))
        if problem is not None:
            path, what = problem
            raise MessageError(
                f"{where}: `extra.{path}` {what}; stores keep `extra` as UTF-8 JSON: use dicts with string keys, "
                "lists, strings, finite numbers, booleans and None (at most "
                f"{_json.MAX_DEPTH} levels deep).",
                index=index,
                field=f"extra.{path}" if path else "extra",
            )
    return message


def _is_common(message: Message) -> bool:
    """The common message, checked without the general walk (which finds and names any problem):
    text without lone surrogates and ASCII tool calls in a known role, with none of the optional
    fields set."""
    role, mid, tcid, name = message.role, message.message_id, message.tool_call_id, message.name
    if not (
        role in ROLES
        and (tcid is None and role != "tool" or tcid.__class__ is str and tcid and tcid.isascii())
        and mid.__class__ is str
        and mid
        and mid.isascii()
        and (name is None or name.__class__ is str and name.isascii())
        and not message.extra
        and message.is_error.__class__ is bool
        and message.pinned.__class__ is bool
        and (message.turn is None or message.turn.__class__ is int)
        and message.created_at is None
        and message.snapshot_id is None
        and not message.source_ids
    ):
        return False
    for part in message.parts:
        if type(part) is TextPart:
            text = part.text
            if not (text.__class__ is str and (text.isascii() or _utf8_encodable(text))):
                return False
        elif type(part) is not ToolCall or role != "assistant" or not _is_common_call(part):
            return False
    return True


def _utf8_encodable(text: str) -> bool:
    """No lone surrogate: the text encodes to UTF-8 (one pass in C, a copy when the string already
    holds its UTF-8 form, as it does once a tokenizer has read it)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_common_call(call: ToolCall) -> bool:
    """ASCII id, name and arguments, the arguments JSON within the depth limit and without surrogate escapes."""
    cid, name, arguments = call.call_id, call.name, call.arguments
    if not (
        cid.__class__ is str
        and cid.isascii()
        and name.__class__ is str
        and name.isascii()
        and arguments.__class__ is str
        and arguments.isascii()
    ):
        return False
    if not arguments:
        return True
    return _json.is_json(arguments) and not _json.may_decode_to_surrogate(arguments)


def _check_bookkeeping(message: Message, *, index: int | None, where: str) -> None:
    """Flags, turn, time and provenance: the types a store writes and reads back."""
    for name in ("is_error", "pinned"):
        value = getattr(message, name)
        if value.__class__ is not bool:
            raise MessageError(
                f"{where}: `{name}` must be True or False, got {_kind(value)}; leave it out for False.",
                index=index,
                field=name,
            )
    turn = message.turn
    if turn is not None and (turn.__class__ is bool or not isinstance(turn, int)):
        raise MessageError(
            f"{where}: `turn` must be an integer or None, got {_kind(turn)}; leave it out when unknown.",
            index=index,
            field="turn",
        )
    created = message.created_at
    if created is not None and (
        created.__class__ is bool or not isinstance(created, int | float) or not math.isfinite(created)
    ):
        raise MessageError(
            f"{where}: `created_at` must be a Unix time in seconds (a finite number) or None, got {_kind(created)}.",
            index=index,
            field="created_at",
        )
    _check_optional_text(message.snapshot_id, index=index, field_name="snapshot_id", where=where)
    if not isinstance(message.source_ids, tuple | list):
        raise MessageError(
            f"{where}: `source_ids` must be a tuple of message ids, got {type(message.source_ids).__name__}.",
            index=index,
            field="source_ids",
        )
    for k, source in enumerate(message.source_ids):
        _check_text(source, index=index, field_name=f"source_ids[{k}]", where=where)


def _kind(value: object) -> str:
    """What a bad value is, without its repr (a hostile value's repr may not even be computable)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"a value of type {type(value).__name__}"


def same_content(a: Message, b: Message) -> bool:
    """True when two messages say the same thing (role, name, call id, parts, error flag).

    Bookkeeping fields (pinned, turn, timestamps, provider hints in ``extra``) are not content:
    the same message added again through another format or after a pin is the same message.
    """
    return a.content_hash == b.content_hash and a.is_error == b.is_error
