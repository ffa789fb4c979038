"""Shared plumbing of the commands: consoles, settings, errors, transcript files, atomic writes."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape as plain

from .. import _json
from ..adapters import FORMATS, Format, anthropic as anthropic_adapter, detect_format, from_messages, to_messages
from ..exceptions import ConfigError, MessageError, UsageError
from ..messages import Message
from ..recall import SessionMemory
from ..session import Session
from ..settings import Settings, load_settings
from ..snapshots import SnapshotStore
from ..stores import SessionStore
from ..stores.export import EXPORT_FORMAT
from ..summarize.base import Summarizer
from ..tokens import Framing, TokenCounter, counter_for_model, framing_for_provider, get_counter

__all__ = [
    "FLAG_OF_KEY",
    "CLIError",
    "Loaded",
    "State",
    "atomic_write",
    "build_session",
    "command_prefix",
    "err",
    "get_settings",
    "load_transcript",
    "out",
    "plain",
    "print_json",
    "quiet_pool_log",
    "render_transcript",
    "settings_from_flags",
    "token_counting",
]


def _console(*, stderr: bool = False) -> Console:
    """A console that wraps at the terminal's width, and not at all when piped (a file or a pipe has no width)."""
    stream = sys.stderr if stderr else sys.stdout
    piped = not (hasattr(stream, "isatty") and stream.isatty()) and "COLUMNS" not in os.environ
    return Console(stderr=stderr, highlight=False, soft_wrap=piped, width=_PIPED_WIDTH if piped else None)


_PIPED_WIDTH = 400
"""Columns of piped output: wide enough that tables and sentences keep whole lines."""
out = _console()
"""Standard output (tables, JSON, views)."""
err = _console(stderr=True)
"""Standard error (summaries, progress, errors)."""


def command_prefix() -> str:
    """How to run ``contextwarden`` again from this shell, as a user can paste it.

    The bare name when ``contextwarden`` on ``PATH`` belongs to this interpreter's installation;
    otherwise this interpreter with ``-m contextwarden`` (a relative path when it lives under the
    working directory, as ``.venv/bin/python`` does after ``make demo``).
    """
    python = Path(sys.executable)
    found = shutil.which("contextwarden")
    if found is not None and Path(found).resolve().parent == python.resolve().parent:
        return "contextwarden"
    try:
        shown = str(python.absolute().relative_to(Path.cwd()))
    except ValueError:
        shown = str(python)
    return f"{shlex.quote(shown)} -m contextwarden"


class CLIError(Exception):
    """A failure reported as one line: ``error: <message>`` with exit code 1 (or 2 for usage)."""

    def __init__(self, message: str, *, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class State:
    """What the top-level options set for the subcommands (``ctx.obj``)."""

    debug: bool = False
    config: Path | None = None
    settings: Settings | None = None
    flags: dict[str, Any] = field(default_factory=dict)


def state(ctx: typer.Context) -> State:
    """The `State` of the invocation (a fresh one when a command is run on its own)."""
    root = ctx.find_root()
    if not isinstance(root.obj, State):
        root.obj = State()
    return root.obj


FLAG_OF_KEY = {
    "store.url": "--store",
    "service.host": "--host",
    "service.port": "--port",
    "service.upstream_url": "--upstream",
    "service.shadow": "--shadow",
}
"""The settings keys that command-line flags set, and their flags."""
_INVALID = re.compile(r"^invalid settings \([^)]*\): (?P<problems>.*); run `contextwarden config validate`")


def settings_from_flags(config: Path | None, **flags: Any) -> Settings:
    """`load_settings` with ``flags``; a value a flag gave that the settings refuse is named by its flag.

    Raises:
        ConfigError: the file or the environment is invalid (as `load_settings` says), or a flag's value is.
    """
    try:
        return load_settings(config, **flags)
    except ConfigError as exc:
        if not flags:
            raise
        load_settings(config)  # the file or the environment is at fault: its error, with its lines
        found = _INVALID.match(str(exc))
        if found is None:
            raise
        problems = found["problems"]
        for key, flag in FLAG_OF_KEY.items():
            problems = problems.replace(f"{key}: ", f"`{flag}`: ")
        raise ConfigError(f"invalid value: {problems}.", key="config") from None


def get_settings(ctx: typer.Context, **flags: Any) -> Settings:
    """The settings of this invocation: file < environment < ``flags`` (None values are ignored)."""
    st = state(ctx)
    given = {k: v for k, v in flags.items() if v is not None and v != {}}
    if st.settings is None or given:
        st.settings = settings_from_flags(st.config, **given)
    return st.settings


@contextlib.contextmanager
def quiet_pool_log() -> Iterator[None]:
    """Silence the Postgres pool's log line per failed connection attempt: the command's one error line says it."""
    pool_log = logging.getLogger("psycopg.pool")
    level = pool_log.level
    pool_log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        pool_log.setLevel(level)


def print_json(data: Any) -> None:
    """Write ``data`` as JSON to stdout (no colour, no wrapping)."""
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


# --- transcript files ---------------------------------------------------------------------------

Shape = Literal["list", "jsonl", "chat-request", "anthropic-request", "responses-request", "export"]


@dataclass(frozen=True, kw_only=True)
class Loaded:
    """A transcript file as read: the messages, their format, and how to write a view back."""

    path: Path
    messages: list[Message]
    format: Format
    shape: Shape
    body: Mapping[str, Any] = field(default_factory=dict)
    """The rest of a request body (model, tools...), written back around the view."""
    tools: list[Mapping[str, Any]] = field(default_factory=list)


def _read_text(path: Path) -> str:
    if not path.exists():
        raise CLIError(f"{path}: no such file; check the path.", exit_code=2)
    if path.is_dir():
        raise CLIError(f"{path}: is a directory; give a transcript file (JSON or JSONL).", exit_code=2)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CLIError(f"{path}: cannot read the file ({exc.strerror or exc}).") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise CLIError(f"{path}: not UTF-8 text (invalid byte at line {line}); save the transcript as UTF-8.") from None


def _json_error(path: Path, exc: json.JSONDecodeError, *, line_offset: int = 0) -> CLIError:
    line = exc.lineno + line_offset
    return CLIError(f"{path}: invalid JSON at line {line}, column {exc.colno}: {exc.msg}.")


def _loads(path: Path, text: str, *, line: int = 1) -> Any:
    """``json.loads`` within `contextwarden._json.MAX_DEPTH` levels; `json.JSONDecodeError` for invalid JSON.

    Raises:
        CLIError: JSON nested deeper than a transcript ever is, or a number Python cannot hold.
    """
    if _json.too_deep(text, _json.MAX_DEPTH):
        raise CLIError(
            f"{path}: the JSON from line {line} on nests deeper than {_json.MAX_DEPTH} levels; a transcript is a "
            "list of messages a few levels deep."
        )
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as exc:  # an integer of more than 4,300 digits; an unclosed deep list
        raise CLIError(f"{path}: the JSON from line {line} on cannot be read ({exc}).") from None


def _parse_document(path: Path, text: str) -> tuple[Any, bool]:
    """(document, is_jsonl): one JSON document, or JSONL (one JSON value per line)."""
    stripped = text.strip()
    if not stripped:
        raise CLIError(f"{path}: the file is empty; expected a JSON list of messages or JSONL.")
    jsonl = path.suffix.lower() == ".jsonl"
    if not jsonl:
        try:
            return _loads(path, stripped), False
        except json.JSONDecodeError as exc:
            first = stripped.splitlines()[0]
            try:
                _loads(path, first)
            except json.JSONDecodeError:
                raise _json_error(path, exc, line_offset=text[: text.index(stripped[0])].count("\n")) from None
            if len(stripped.splitlines()) < 2:
                raise _json_error(path, exc) from None
            jsonl = True
    rows: list[Any] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(_loads(path, line, line=n))
        except json.JSONDecodeError as exc:
            raise _json_error(path, exc, line_offset=n - 1) from None
    return rows, True


def load_transcript(path: Path, *, format: str = "auto") -> Loaded:
    """Read a transcript file: OpenAI chat messages (JSON list, JSONL, or a request body with
    ``messages``), Responses items (list or a body with ``input``), Anthropic messages (list or a
    body with ``system`` and ``messages``), or a ``contextwarden sessions export`` file.

    Raises:
        CLIError: missing or unreadable file, invalid JSON (with its line), a document that holds
            no message list, or messages that are not of the given format.
    """
    if format != "auto" and format not in FORMATS:
        raise CLIError(
            f"--format {format!r} is not a transcript format; use auto or one of {list(FORMATS)}.", exit_code=2
        )
    text = _read_text(path)
    doc, is_jsonl = _parse_document(path, text)
    if is_jsonl and doc and isinstance(doc[0], dict) and doc[0].get("format") == EXPORT_FORMAT:
        return _load_export(path, doc, format=format)
    body: dict[str, Any] = {}
    system: Any = None
    shape: Shape
    items: Any
    if is_jsonl:
        shape, items = "jsonl", doc
    elif isinstance(doc, list):
        shape, items = "list", doc
    elif isinstance(doc, dict) and isinstance(doc.get("messages"), list):
        body = {k: v for k, v in doc.items() if k != "messages"}
        items = doc["messages"]
        anthropic_body = "system" in doc or (format == "anthropic")
        shape = "anthropic-request" if anthropic_body else "chat-request"
        if anthropic_body:
            system = body.pop("system", None)
    elif isinstance(doc, dict) and "input" in doc:
        body = {k: v for k, v in doc.items() if k != "input"}
        items = doc["input"]
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        shape = "responses-request"
    else:
        if isinstance(doc, dict):
            kind = "an object with keys " + ", ".join(sorted(doc)[:6]) if doc else "an empty object"
        else:
            kind = type(doc).__name__
        raise CLIError(
            f"{path}: no message list found (got {kind}); expected a JSON list of messages, JSONL, or a request "
            "body with `messages` (chat, Anthropic) or `input` (Responses)."
        )
    if not isinstance(items, list) or not all(isinstance(m, dict) for m in items):
        raise CLIError(f"{path}: every message must be a JSON object; found {type(items).__name__} items.")
    if not items:
        raise CLIError(f"{path}: the transcript holds no messages.")
    fmt: Format
    if format == "auto":
        fmt = "responses" if shape == "responses-request" else detect_format(items)
        if shape == "anthropic-request":
            fmt = "anthropic"
    else:
        fmt = format  # type: ignore[assignment]
    try:
        if fmt == "anthropic":
            messages = anthropic_adapter.to_messages(items, system=system)
        else:
            messages = to_messages(items, format=fmt)
    except MessageError as exc:
        raise CLIError(f"{path}: not a valid {fmt} transcript: {exc}") from None
    tools = body.get("tools") if isinstance(body.get("tools"), list) else []
    return Loaded(path=path, messages=messages, format=fmt, shape=shape, body=body, tools=list(tools or []))


def _load_export(path: Path, rows: list[Any], *, format: str) -> Loaded:
    """The transcript of a `contextwarden sessions export` file (its message lines, in order).

    Views of it are written as OpenAI chat messages, or in ``format`` when one is given.

    Raises:
        CLIError: a message line that does not hold a valid message, or an export without messages.
    """
    lines = [(n, row) for n, row in enumerate(rows, 1) if isinstance(row, dict) and row.get("type") == "message"]
    lines.sort(key=lambda item: item[1].get("seq", 0) if isinstance(item[1].get("seq"), int) else 0)
    messages: list[Message] = []
    for n, row in lines:
        body = row.get("message")
        try:
            if not isinstance(body, dict):
                raise TypeError(f"`message` is {type(body).__name__}, not an object")
            messages.append(Message.from_dict(body))
        except (ValidationError, TypeError, ValueError) as exc:
            first = str(exc).splitlines()[0]
            problem = f"message line {n} of the session export is not a valid message ({first})"
            raise CLIError(f"{path}: {problem}.") from None
    if not messages:
        raise CLIError(f"{path}: the session export holds no messages.")
    fmt: Format = "openai" if format == "auto" else format  # type: ignore[assignment]
    return Loaded(path=path, messages=messages, format=fmt, shape="export", body={}, tools=[])


def render_transcript(loaded: Loaded, view: Sequence[Message]) -> str:
    """The view in the input's format and shape (a request body keeps its other keys)."""
    if loaded.format == "anthropic":
        system, msgs = anthropic_adapter.from_messages(view)
        if loaded.shape == "anthropic-request":
            doc: Any = dict(loaded.body)
            if system is not None:
                doc["system"] = system
            doc["messages"] = msgs
        else:
            doc = anthropic_adapter.from_messages_inline(view)
    else:
        items = from_messages(view, format=loaded.format)
        if loaded.shape == "chat-request":
            doc = {**loaded.body, "messages": items}
        elif loaded.shape == "responses-request":
            doc = {**loaded.body, "input": items}
        else:
            doc = items
    if loaded.shape == "jsonl" and isinstance(doc, list):
        return "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in doc)
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory and a rename:
    an error leaves no partial file (and an existing file untouched)."""
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise CLIError(f"{path}: directory {directory} does not exist; create it first.")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# --- sessions ------------------------------------------------------------------------------------


def build_session(
    settings: Settings,
    *,
    session_id: str | None = None,
    model: str | None,
    window: int | None,
    budget: int | None = None,
    tools: Sequence[Mapping[str, Any]] = (),
    snapshots: SnapshotStore | None = None,
    summarizer: Summarizer | None = None,
    format: Format = "openai",
    store: SessionStore | None = None,
    memory: SessionMemory | None = None,
    tenant: str | None = None,
) -> Session:
    """A `Session` configured from ``settings`` and the command's flags.

    ``budget`` (tokens for the messages) wins over the model's window: the session then gets a
    window of exactly ``budget`` and no reserved output. Otherwise the window is the flag, the
    ``[agent_context]``/``[models]`` setting, or the registry's.

    Raises:
        CLIError: neither a model, a window nor a budget.
        UnknownModelError: an unknown model and no window (exit code 2).
    """
    model = model or settings.model
    if budget is not None:
        ctx_window, reserved = budget, 0
    else:
        ctx_window_opt = settings.window_for(model, window)
        if model is None and ctx_window_opt is None:
            raise CLIError("give --model (a known model), --window or --budget.", exit_code=2)
        if ctx_window_opt is None:
            from ..models import lookup_model

            ctx_window_opt = lookup_model(model or "").context_window
        ctx_window = ctx_window_opt
        reserved = settings.reserved_output_for(model, ctx_window)
    provider = "openai"
    if model is not None:
        from ..models import lookup_model

        # raises UnknownModelError before anything else runs
        provider = lookup_model(model, window=ctx_window).provider
    counter, framing = token_counting(settings, model, provider)
    effective_guess = max(1, ctx_window - reserved)
    config = settings.compaction_config(effective=effective_guess)
    kwargs: dict[str, Any] = {}
    if snapshots is not None:
        kwargs["snapshots"] = snapshots
    if store is not None:
        kwargs["store"] = store
    if memory is not None:
        kwargs["memory"] = memory
    if tenant is not None:
        kwargs["tenant"] = tenant
    session = Session(
        session_id,
        model=model,
        window=ctx_window,
        reserved_output=reserved,
        tools=tools,
        counter=counter,
        framing=framing,
        config=config,
        summarizer=summarizer,
        format=format,
        thresholds=settings.thresholds(),
        **kwargs,
    )
    return session


DEFAULT_COUNT_MODEL = "gpt-4o"
"""Whose tokenizer counts a transcript when neither ``--model`` nor ``model``/``tokenizer`` is configured."""


def token_counting(settings: Settings, model: str | None, provider: str = "openai") -> tuple[TokenCounter, Framing]:
    """The token counter and framing of ``model``: the same for ``count`` and ``compact``, so their totals agree.

    The counter is the ``tokenizer`` setting, else the model's (`DEFAULT_COUNT_MODEL`'s without a
    model); the framing (per-message overhead) is the provider's.
    """
    counter = get_counter(settings.tokenizer) if settings.tokenizer else counter_for_model(model or DEFAULT_COUNT_MODEL)
    return counter, framing_for_provider(provider)


def exit_code_for(exc: BaseException) -> int:
    """2 for a usage mistake the flags or the configuration can fix, 1 for any other failure."""
    if isinstance(exc, CLIError):
        return exc.exit_code
    if isinstance(exc, MessageError):
        return 1
    if isinstance(exc, ConfigError | UsageError):
        return 2
    return 1


@contextlib.contextmanager
def progress_bar(description: str, total: int | None, *, enabled: bool = True) -> Iterator[Any]:
    """A rich progress bar on stderr; yields ``advance(n=1, description=None)`` (a no-op when disabled)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if not enabled:
        yield lambda n=1, description=None: None
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as progress:
        task = progress.add_task(description, total=total)
        # a new description is drawn at once: a phase that finishes between two ticks is still named
        yield lambda n=1, description=None: progress.update(
            task, advance=n, description=description, refresh=description is not None
        )
