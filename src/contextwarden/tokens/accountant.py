"""Message-level token accounting: provider framing, images, tool schemas and a count cache.

`TokenAccountant.count_message` tokenizes each message once; the count is cached under
``(counter.name, framing.name, message.content_hash)``, so preparing the view on turn *n* costs
only the messages that are new since turn *n - 1*.
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, assert_never

from ..exceptions import ConfigError, MessageError
from ..messages import ImagePart, Message, TextPart, ThinkingPart, ToolCall
from ._images import image_size
from .base import TokenCounter, require_text
from .calibration import Calibration
from .lines import LineCounts
from .tiktoken import TiktokenCounter

__all__ = [
    "ANTHROPIC_FRAMING",
    "GEMINI_FRAMING",
    "OPENAI_FRAMING",
    "CacheStats",
    "CountCache",
    "Framing",
    "TokenAccountant",
    "image_tokens",
]


@dataclass(frozen=True, kw_only=True)
class Framing:
    """The tokens a provider adds around content when it renders a request.

    Providers do not publish most of these; the built-in values are estimates (see each constant)
    and `Calibration` corrects the remainder from reported usage.
    """

    name: str
    """Stable id, part of the count-cache key."""
    per_message: int
    """Role markers and separators of every message."""
    per_name: int
    """Added when a non-tool message carries a ``name`` (the name's own tokens are counted too)."""
    per_tool_call: int
    """Wrapper of each tool call, on top of its name and arguments."""
    reply_priming: int
    """Tokens that start the assistant's reply, once per request."""
    image: Literal["openai", "anthropic", "gemini"]
    """Which provider formula prices images (`image_tokens`)."""
    tools_overhead: int = 0
    """Fixed cost of a request that declares tools (a provider's tool-use system prompt)."""
    tools_format: Literal["typescript", "json"] = "json"
    """How tool schemas are rendered for counting (see `TokenAccountant.count_tools`)."""

    def __post_init__(self) -> None:
        for key in ("per_message", "per_name", "per_tool_call", "reply_priming", "tools_overhead"):
            value = getattr(self, key)
            if not isinstance(value, int) or value < 0:
                raise ConfigError(f"Framing {self.name!r}: `{key}` must be an int >= 0, got {value!r}.", key=key)


OPENAI_FRAMING = Framing(
    name="openai",
    per_message=4,
    per_name=1,
    per_tool_call=3,
    reply_priming=3,
    image="openai",
    tools_format="typescript",
)
"""OpenAI chat models, as the reference harness counts them: 4 per message + content, each tool
call 3 + name + arguments, 3 to prime the reply, 1 per ``name`` of a non-tool message. (OpenAI's
cookbook uses 3 per message for current chat models, so this is about one token per message high:
the safe direction.) The tool message's ``name`` and ``tool_call_id`` are not counted."""

ANTHROPIC_FRAMING = Framing(
    name="anthropic",
    per_message=3,
    per_name=0,
    per_tool_call=8,
    reply_priming=1,
    image="anthropic",
    tools_overhead=346,
    tools_format="json",
)
"""Anthropic Messages API. The 346-token tool-use system prompt is Anthropic's published figure
for recent models with ``tool_choice`` auto; the per-message and per-block figures are estimates."""

GEMINI_FRAMING = Framing(
    name="gemini",
    per_message=4,
    per_name=0,
    per_tool_call=5,
    reply_priming=0,
    image="gemini",
    tools_format="json",
)
"""Google Gemini ``generateContent``: turn markers per content; tool calls as JSON parts. Estimates."""


# --- images --------------------------------------------------------------------------------------

_OPENAI_UNKNOWN_HIGH = 1445
"""OpenAI high detail, unknown size: the maximum (8 tiles of 512 px after resizing), 85 + 170 * 8."""
_ANTHROPIC_MAX = 1600
"""Anthropic: images are resized to at most ~1.15 megapixels, about 1,600 tokens; unknown sizes cost this."""
_GEMINI_TILE = 258
_GEMINI_UNKNOWN = 4 * _GEMINI_TILE
"""Gemini: unknown sizes are priced as four 768 px tiles (a 1536x1536 image)."""


def image_tokens(
    width: int | None,
    height: int | None,
    *,
    provider: Literal["openai", "anthropic", "gemini"],
    detail: Literal["auto", "low", "high"] = "auto",
) -> int:
    """Input tokens of one image under a provider's published formula.

    * OpenAI (GPT-4o family): ``low`` = 85. ``high``/``auto``: fit in 2048x2048, scale the short
      side down to 768, then 85 + 170 per 512 px tile. Unknown size: 1,445 (the maximum).
    * Anthropic: resize so the long side is at most 1568 px and the area at most ~1.15 MP, then
      ``width * height / 750``. Unknown size: 1,600.
    * Gemini: 258 when both sides are at most 384 px, else 258 per 768x768 tile. Unknown: 1,032.
    """
    known = bool(width and height and width > 0 and height > 0)
    if provider == "openai":
        if detail == "low":
            return 85
        if not known:
            return _OPENAI_UNKNOWN_HIGH
        w, h = float(width or 0), float(height or 0)
        scale = min(1.0, 2048 / max(w, h))
        w, h = w * scale, h * scale
        scale = min(1.0, 768 / min(w, h))
        w, h = w * scale, h * scale
        return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)
    if provider == "anthropic":
        if not known:
            return _ANTHROPIC_MAX
        w, h = float(width or 0), float(height or 0)
        scale = min(1.0, 1568 / max(w, h), math.sqrt(1_150_000 / (w * h)))
        return max(1, min(_ANTHROPIC_MAX, math.ceil(w * scale * h * scale / 750)))
    if provider == "gemini":
        if not known:
            return _GEMINI_UNKNOWN
        w, h = width or 0, height or 0
        if w <= 384 and h <= 384:
            return _GEMINI_TILE
        return _GEMINI_TILE * math.ceil(w / 768) * math.ceil(h / 768)
    assert_never(provider)


# --- cache -----------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CacheStats:
    """A snapshot of a `CountCache`'s counters."""

    hits: int
    misses: int
    evictions: int
    size: int
    maxsize: int

    @property
    def hit_rate(self) -> float:
        """Hits over lookups (0.0 before any lookup)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class CountCache:
    """A bounded LRU map from ``(counter name, framing name, content hash)`` to a token count.

    Safe to share between threads and between accountants: the key names the counter, so two
    tokenizers never read each other's counts.
    """

    def __init__(self, maxsize: int = 100_000) -> None:
        """Create an empty cache holding at most ``maxsize`` counts."""
        if not isinstance(maxsize, int) or maxsize < 1:
            raise ConfigError(f"CountCache `maxsize` must be an int >= 1, got {maxsize!r}.", key="maxsize")
        self.maxsize = maxsize
        self._data: OrderedDict[tuple[str, str, str], int] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def get(self, key: tuple[str, str, str]) -> int | None:
        """The cached count, marking it recently used; None on a miss."""
        with self._lock:
            value = self._data.get(key)
            if value is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: tuple[str, str, str], value: int) -> None:
        """Store a count, evicting the least recently used entry when full."""
        with self._lock:
            data = self._data
            data[key] = value
            data.move_to_end(key)
            if len(data) > self.maxsize:
                data.popitem(last=False)
                self.evictions += 1

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def clear(self) -> None:
        """Drop every entry and reset the statistics."""
        with self._lock:
            self._data.clear()
            self.hits = self.misses = self.evictions = 0

    def stats(self) -> CacheStats:
        """Current hits, misses, evictions and size."""
        with self._lock:
            return CacheStats(
                hits=self.hits, misses=self.misses, evictions=self.evictions, size=len(self._data), maxsize=self.maxsize
            )


# --- accountant ------------------------------------------------------------------------------------


class TokenAccountant:
    """Counts what a provider bills for messages and tool schemas, with a per-message cache."""

    def __init__(
        self,
        counter: TokenCounter,
        *,
        framing: Framing = OPENAI_FRAMING,
        cache: CountCache | None = None,
        calibration: Calibration | None = None,
    ) -> None:
        """Create an accountant.

        Args:
            counter: the tokenizer (e.g. ``get_counter("tiktoken:cl100k_base")``).
            framing: the provider's framing; `OPENAI_FRAMING` by default.
            cache: a cache to share between accountants; a private one (100,000 entries) by default.
            calibration: where reported usage is recorded; a fresh `Calibration` by default. Counts
                returned by this class are raw estimates: apply ``calibration.correct(n)`` where a
                corrected figure is wanted.
        """
        self.counter = counter
        self.framing = framing
        self.cache = cache if cache is not None else CountCache()
        self.calibration = calibration if calibration is not None else Calibration()
        # Read once: both are part of every cache key.
        self._counter_name = counter.name
        self._framing_name = framing.name
        self._memo_key = (counter.name, framing.name)
        self._count = counter.count_text
        self._lines = LineCounts(
            counter.count_text,
            additive=isinstance(counter, TiktokenCounter) and counter.pieces_end_at_line_breaks,
        )

    def count_text(self, text: str) -> int:
        """Tokens of a bare text (no framing, not cached)."""
        return self._count(require_text(text))

    def count_message(self, message: Message, *, shared: bool = True) -> int:
        """Tokens of one message including its framing; cached by content hash.

        ``shared=False`` skips the shared cache, and hashing the content, for a message unlikely to
        recur in another object (a fresh tool output: hashing it costs about what a hit would save);
        the count is remembered on the message itself, so counting that object again is a lookup.

        Counted: every text part, tool call (name + arguments + ``per_tool_call``), thinking part
        (its text; for redacted thinking the opaque data), image (`image_tokens`), the ``name`` of
        non-tool messages (+ ``per_name``), and ``per_message``.

        Raises:
            MessageError: a part whose text is not a string, or an unknown part type.
        """
        try:
            remembered = message.remembered_count(self._memo_key)
        except AttributeError:  # not a `Message`: `_count_shared` names what it is
            remembered = None
        if remembered is not None:
            return remembered
        if not shared and isinstance(message, Message):
            n = self._count_uncached(message, self._count)
            message.remember_count(self._memo_key, n)
            return n
        return self._count_shared(message, self._count)

    def count_rendered(self, message: Message) -> int:
        """`count_message` for a message rendered again and again with most lines unchanged (the context block).

        The same count, found by counting each distinct line once (`contextwarden.tokens.lines`)
        where the counter allows it.
        """
        return self._count_shared(message, self._lines.count)

    def _count_shared(self, message: Message, count: Callable[[str], int]) -> int:
        """The message's count from the shared cache, else counted with ``count`` and stored there."""
        try:
            digest = message.content_hash
        except (AttributeError, TypeError):
            if not isinstance(message, Message):
                raise MessageError(
                    f"expected a `Message`, got {type(message).__name__} ({message!r:.60}); convert provider "
                    "dicts with the message adapters before counting.",
                    field="message",
                ) from None
            # A part with a non-string field cannot be hashed; counting it names the field.
            self._count_uncached(message, count)
            raise
        key = (self._counter_name, self._framing_name, digest)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        n = self._count_uncached(message, count)
        self.cache.put(key, n)
        return n

    def _count_uncached(self, message: Message, count: Callable[[str], int]) -> int:
        framing = self.framing
        n = framing.per_message
        parts = message.parts
        # most messages: one text part, and a name only where it is not counted (a tool result's)
        if len(parts) == 1 and parts[0].__class__ is TextPart and (not message.name or message.role == "tool"):
            text = parts[0].text
            if text.__class__ is str:
                return n + count(text)
        for j, part in enumerate(parts):
            if isinstance(part, TextPart):
                text = part.text
                if text.__class__ is not str:
                    require_text(text, field=f"parts[{j}].text")
                n += count(text)
            elif isinstance(part, ToolCall):
                name, args = part.name, part.arguments
                if name.__class__ is not str or args.__class__ is not str:
                    require_text(name, field=f"parts[{j}].name")
                    require_text(args, field=f"parts[{j}].arguments")
                n += framing.per_tool_call + count(name) + count(args)
            elif isinstance(part, ThinkingPart):
                n += count(require_text(part.text, field=f"parts[{j}].text"))
            elif isinstance(part, ImagePart):
                width, height = part.width, part.height
                if not (width and height):
                    width, height = image_size(part.url) or (None, None)
                n += image_tokens(width, height, provider=framing.image, detail=part.detail)
            else:
                raise MessageError(
                    f"`parts[{j}]` has unsupported type {type(part).__name__}; "
                    "use TextPart, ImagePart, ThinkingPart or ToolCall.",
                    field=f"parts[{j}]",
                )
        if message.name and message.role != "tool":
            n += framing.per_name + count(require_text(message.name, field="name"))
        return n

    def count_messages(self, messages: Iterable[Message]) -> int:
        """Tokens of a whole request's messages: the sum of `count_message` plus ``reply_priming``.

        Raises:
            MessageError: as `count_message`, with the index of the offending message.
        """
        total = self.framing.reply_priming
        count_message = self.count_message
        for i, message in enumerate(messages):
            try:
                total += count_message(message)
            except MessageError as exc:
                if exc.index is not None:
                    raise
                raise MessageError(f"message {i}: {exc}", index=i, field=exc.field) from None
        return total

    def count_tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        """Approximate tokens of tool schemas declared in a request.

        Accepts OpenAI Chat Completions tools (``{"type": "function", "function": {...}}``), OpenAI
        Responses / bare function objects (``{"name", "description", "parameters"}``) and Anthropic
        tools (``{"name", "description", "input_schema"}``).

        Providers render tool schemas into a hidden system text whose exact form is not published.
        The approximation renders that text and counts it with this accountant's tokenizer:

        * ``typescript`` (OpenAI): a ``namespace functions { ... }`` block in which each tool is
          ``// description`` + ``type name = (_: { // field description \\n field?: type, ... }) => any;``,
          the form OpenAI models are known to see. Not checked against provider-reported usage here;
          deeply nested schemas are the roughest part. `Calibration` absorbs the remainder.
        * ``json`` (Anthropic, Gemini): each tool as compact JSON of its name, description and schema.

        A ``namespace`` tool (a group of functions under one name, as Codex sends MCP servers) counts
        each nested function under the namespace's name; a hosted tool with no name
        (``{"type": "web_search", ...}``) is named by its type, and whatever configures it beyond a
        name, description and schema (a custom tool's grammar, a hosted tool's options) counts as JSON.
        ``framing.tools_overhead`` is added once when ``tools`` is not empty.

        Raises:
            MessageError: a tool that is not a mapping, or has neither a string ``name`` nor a ``type``.
        """
        if not tools:
            return 0
        specs = [spec for i, tool in enumerate(tools) for spec in _tool_specs(tool, index=i)]
        if self.framing.tools_format == "typescript":
            text = _render_typescript(specs)
        else:
            text = "\n".join(
                json.dumps({"name": n, "description": d, "input_schema": p}, ensure_ascii=False, separators=(",", ":"))
                for n, d, p in specs
            )
        return self.framing.tools_overhead + self._count(text)

    def __repr__(self) -> str:
        return f"TokenAccountant(counter={self._counter_name!r}, framing={self._framing_name!r})"


_SCHEMA_KEYS = frozenset({"type", "name", "description", "parameters", "input_schema", "function", "strict"})
"""Keys of a tool that the rendered schema already shows; any other key is configuration counted as JSON."""


def _tool_specs(tool: object, *, index: int, prefix: str = "") -> list[tuple[str, str, Mapping[str, Any]]]:
    """The (name, description, parameters) of each function a tool declares (several for a namespace)."""
    if not isinstance(tool, Mapping):
        raise MessageError(
            f"tools[{index}] must be a mapping (an OpenAI or Anthropic tool schema), got {type(tool).__name__}.",
            field=f"tools[{index}]",
        )
    nested = tool.get("tools", tool.get("functions"))
    if tool.get("type") == "namespace" and isinstance(nested, Sequence) and not isinstance(nested, str):
        group = tool.get("name")
        inner = f"{prefix}{group}." if isinstance(group, str) and group else prefix
        specs: list[tuple[str, str, Mapping[str, Any]]] = []
        if isinstance(tool.get("description"), str) and tool["description"]:
            specs.append((inner.rstrip(".") or "namespace", tool["description"], {}))
        for member in nested:
            specs.extend(_tool_specs(member, index=index, prefix=inner))
        return specs
    fn = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
    assert isinstance(fn, Mapping)
    name = fn.get("name")
    if not isinstance(name, str):
        name = tool.get("type")  # a hosted tool (web_search, file_search...) is named by its type
        if not isinstance(name, str) or not name:
            raise MessageError(
                f"tools[{index}] has no string `name` or `type` ({fn.get('name')!r}); give every tool a name.",
                field=f"tools[{index}].name",
            )
    description = str(fn.get("description") or "")
    options = {k: v for k, v in tool.items() if k not in _SCHEMA_KEYS}
    if options:
        config = json.dumps(options, ensure_ascii=False, separators=(",", ":"), sort_keys=True, default=str)
        description = f"{description}\n{config}" if description else config
    params = fn.get("parameters", fn.get("input_schema")) or {}
    return [(prefix + name, description, params if isinstance(params, Mapping) else {})]


def _ts_type(schema: Mapping[str, Any], indent: str) -> str:
    if "enum" in schema and isinstance(schema["enum"], list):
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"]) or "any"
    for combo in ("anyOf", "oneOf"):
        if isinstance(schema.get(combo), list):
            return " | ".join(_ts_type(s, indent) for s in schema[combo] if isinstance(s, Mapping)) or "any"
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(str(k) for k in kind)
    if kind == "array":
        items = schema.get("items")
        return (_ts_type(items, indent) if isinstance(items, Mapping) else "any") + "[]"
    if kind == "object" or "properties" in schema:
        return _ts_object(schema, indent + "  ")
    if kind == "integer":
        return "number"
    return str(kind) if isinstance(kind, str) else "any"


def _ts_object(schema: Mapping[str, Any], indent: str) -> str:
    props = schema.get("properties")
    if not isinstance(props, Mapping) or not props:
        return "object"
    required = set(schema.get("required") or ())
    lines = ["{"]
    for key, sub in props.items():
        sub = sub if isinstance(sub, Mapping) else {}
        if sub.get("description"):
            lines.append(f"{indent}// {sub['description']}")
        opt = "" if key in required else "?"
        lines.append(f"{indent}{key}{opt}: {_ts_type(sub, indent)},")
    lines.append(indent[:-2] + "}")
    return "\n".join(lines)


def _render_typescript(specs: list[tuple[str, str, Mapping[str, Any]]]) -> str:
    out = ["# Tools", "", "## functions", "", "namespace functions {", ""]
    for name, description, params in specs:
        if description:
            out.append(f"// {description}")
        body = _ts_object(params, "")
        out.append(f"type {name} = () => any;" if body == "object" else f"type {name} = (_: {body}) => any;")
        out.append("")
    out.append("} // namespace functions")
    return "\n".join(out)
