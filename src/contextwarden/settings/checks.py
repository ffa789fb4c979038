"""`validate_config_file`: every problem of a config file at once, each with its line and the allowed values."""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from .._store_url import check_store_url
from ..exceptions import ConfigError
from .effective import FILE_DATA, STORE_URL_FORMS, FileOnlySettings, Settings
from .env import ENV_PREFIX
from .files import FILE_LIMITS, BoundedYamlLoader, check_environment_depth, is_yaml, parse_config
from .sections import SEED_KEY_MAP

__all__ = ["ConfigProblem", "iter_env_keys", "validate_config_file"]


@dataclass(frozen=True, kw_only=True)
class ConfigProblem:
    """One invalid key of a config file or of the environment."""

    source: str
    """The file path, or ``environment``."""
    line: int | None
    key: str
    """Dotted key (``compaction.low_water``) or the variable name."""
    message: str
    allowed: str

    def render(self) -> str:
        """``file:line: key: message (allowed: ...)`` on one line."""
        where = f"{self.source}:{self.line}" if self.line is not None else self.source
        return f"{where}: {self.key}: {self.message} (allowed: {self.allowed})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dataclasses.asdict(self)


_TOML_HEADER = re.compile(r"^\s*\[\[?\s*(?P<path>[^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_TOML_KEY = re.compile(
    r"""^\s*(?P<key>(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*="""
)
_TOML_PART = re.compile(r"""[A-Za-z0-9_-]+|"[^"]*"|'[^']*'""")


def _toml_parts(dotted: str) -> tuple[str, ...]:
    return tuple(p.strip("\"'") for p in _TOML_PART.findall(dotted))


def _toml_lines(text: str) -> dict[tuple[str, ...], int]:
    """Line of every table header and key of a TOML text (a light scan: enough to point at a key)."""
    lines: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    in_multiline = False
    for n, line in enumerate(text.splitlines(), 1):
        if in_multiline:
            if line.count('"""') % 2 == 1 or line.count("'''") % 2 == 1:
                in_multiline = False
            continue
        header = _TOML_HEADER.match(line)
        if header:
            table = _toml_parts(header.group("path"))
            lines.setdefault(table, n)
            continue
        key = _TOML_KEY.match(line)
        if key:
            lines.setdefault(table + _toml_parts(key.group("key")), n)
            rest = line[key.end() :]
            if rest.count('"""') % 2 == 1 or rest.count("'''") % 2 == 1:
                in_multiline = True
    return lines


def _yaml_lines(text: str) -> dict[tuple[str, ...], int]:
    """Line of every mapping key of a YAML text (from the composed node tree)."""
    lines: dict[tuple[str, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                key = (*path, str(key_node.value))
                lines.setdefault(key, key_node.start_mark.line + 1)
                walk(value_node, key)

    try:
        root = yaml.compose(text, Loader=BoundedYamlLoader)
    except (yaml.YAMLError, RecursionError):
        return lines
    if root is not None:
        walk(root, ())
    return lines


def _line_of(lines: Mapping[tuple[str, ...], int], loc: Sequence[str]) -> int | None:
    path = tuple(loc)
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return None


def _describe(annotation: Any, field: Any | None = None) -> str:
    """What a field accepts, in words (for the ``allowed`` column)."""
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is typing.Union or (origin is not None and str(origin) == "<class 'types.UnionType'>"):
        inner = [a for a in args if a is not type(None)]
        return _describe(inner[0], field) if len(inner) == 1 else " or ".join(_describe(a) for a in inner)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is list:
        return "a list of " + _describe(args[0]).removeprefix("one of ")
    if origin is dict:
        return f"a table of {_describe(args[0]).removeprefix('one of ')} = {_describe(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "a table with keys " + ", ".join(annotation.model_fields)
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    text = names.get(annotation, getattr(annotation, "__name__", str(annotation)))
    bounds = []
    for meta in getattr(field, "metadata", ()) or ():
        for attr, sym in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            value = getattr(meta, attr, None)
            if value is not None:
                bounds.append(f"{sym} {value}")
    return text + (" " + " and ".join(bounds) if bounds else "")


def _allowed(loc: Sequence[str | int], error_type: str) -> str:
    """The allowed values of the setting at ``loc`` (or the allowed keys, for an unknown key)."""
    model: Any = Settings
    field: Any = None
    parents: list[Any] = [Settings]
    for part in loc:
        if isinstance(model, type) and issubclass(model, BaseModel):
            field = model.model_fields.get(str(part))
            if field is None:
                keys = ", ".join(model.model_fields)
                return f"keys {keys}"
            annotation = field.annotation
            # unwrap Optional[...] and dict[str, Model]
            inner = [a for a in get_args(annotation) if a is not type(None)] or [annotation]
            model = inner[0] if get_origin(annotation) is not dict else annotation
            parents.append(model)
        elif get_origin(model) is dict:
            model = get_args(model)[1]
            field = None
        else:
            break
    if error_type == "extra_forbidden":
        container = parents[-2] if len(parents) >= 2 else Settings
        if isinstance(container, type) and issubclass(container, BaseModel):
            return "keys " + ", ".join(container.model_fields)
    if field is None:
        return _describe(model)
    return _describe(field.annotation, field)


def _problems_from(exc: ValidationError, source: str, lines: Mapping[tuple[str, ...], int]) -> list[ConfigProblem]:
    out: list[ConfigProblem] = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        if source == "environment":
            key = ENV_PREFIX + "__".join(p.upper() for p in loc)
        else:
            key = ".".join(loc)
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = f"unknown key {loc[-1]!r}"
        value = err.get("input")
        if err["type"] not in ("extra_forbidden", "value_error") and not isinstance(value, dict):
            message = f"{message}, got {value!r}"
        out.append(
            ConfigProblem(
                source=source,
                line=_line_of(lines, loc) if source != "environment" else None,
                key=key,
                message=message,
                allowed=_allowed(err["loc"], err["type"]),
            )
        )
    return out


def _semantic_problems(settings: Settings, source: str, lines: Mapping[tuple[str, ...], int]) -> list[ConfigProblem]:
    """Problems that only show when options are combined (threshold order, water marks, aliases)."""
    out: list[ConfigProblem] = []

    def add(key: str, loc: Sequence[str], message: str, allowed: str) -> None:
        out.append(ConfigProblem(source=source, line=_line_of(lines, loc), key=key, message=message, allowed=allowed))

    try:
        settings.thresholds()
    except ConfigError as exc:
        names = ("warning_threshold", "error_threshold", "critical_threshold")
        loc = next(
            (("agent_context", k) for k in names if getattr(settings.agent_context, k) is not None),
            ("agent_context",),
        )
        add("agent_context.thresholds", loc, str(exc), "0 < warning < error < critical < 1.0 (defaults 0.70/0.90/0.95)")
    try:
        settings.compaction_options()
    except ConfigError as exc:
        key = exc.key or "agent_context"
        add(key, key.split("."), str(exc), "one value per option")
    else:
        try:
            settings.compaction_config()
        except ConfigError as exc:
            key = exc.key or "compaction"
            first = key.split("/")[0]
            where = ["compaction", first]
            for seed_key, name in SEED_KEY_MAP.items():
                if name == first and getattr(settings.agent_context, seed_key) is not None:
                    where = ["agent_context", seed_key]
            message = str(exc)
            allowed = message.split("allowed: ", 1)[1].rstrip(".") if "allowed: " in message else "see the README"
            add(".".join(where), where, message, allowed)
    if settings.store.url is not None:
        try:
            check_store_url(settings.store_url)
        except ConfigError as exc:
            add("store.url", ("store", "url"), str(exc), STORE_URL_FORMS)
    shares = settings.budgets.shares or {}
    for name, share in shares.items():
        if not 0 < share <= 1:
            add(
                f"budgets.shares.{name}",
                ("budgets", "shares", name),
                f"share {share!r} is out of range",
                "a share in (0, 1]",
            )
    return out


def validate_config_file(path: str | os.PathLike[str] | None, *, environment: bool = True) -> list[ConfigProblem]:
    """Every problem of a config file (and of the ``CONTEXTWARDEN_*`` variables), with lines.

    Args:
        path: the file; None checks only the environment.
        environment: also check the variables.

    Returns:
        The problems, in file order; empty when the configuration is valid.
    """
    problems: list[ConfigProblem] = []
    if path is not None:
        p = Path(path)
        try:
            data, text = parse_config(p)
        except ConfigError as exc:
            message = str(exc)
            m = re.search(r"line (\d+)", message) or re.search(rf"{re.escape(str(p))}:(\d+)", message)
            return [
                ConfigProblem(
                    source=str(p),
                    line=int(m.group(1)) if m else None,
                    key={"config.size": "(size)", "config.limits": "(limits)"}.get(exc.key or "", "(syntax)"),
                    message=message.removeprefix(f"{p}: ").removeprefix(f"{p}:{m.group(1) if m else ''}: "),
                    allowed=FILE_LIMITS.get(exc.key or "", "valid YAML" if is_yaml(p) else "valid TOML"),
                )
            ]
        lines = _yaml_lines(text) if is_yaml(p) else _toml_lines(text)
        token = FILE_DATA.set(data)
        try:
            settings = FileOnlySettings()
        except ValidationError as exc:
            problems.extend(_problems_from(exc, str(p), lines))
            # the other keys are checked too, so one run lists every problem: without the invalid
            # values the rest validates, and its semantic checks (store URL, water marks) run
            FILE_DATA.set(_without(data, [tuple(e["loc"]) for e in exc.errors()]))
            try:
                rest = FileOnlySettings()
            except ValidationError:
                pass
            else:
                seen = {pr.key for pr in problems}
                problems.extend(pr for pr in _semantic_problems(rest, str(p), lines) if pr.key not in seen)
        else:
            problems.extend(_semantic_problems(settings, str(p), lines))
        finally:
            FILE_DATA.reset(token)
    if environment:
        token = FILE_DATA.set({})
        try:
            check_environment_depth()
            env_settings = Settings()
        except ConfigError as exc:
            problems.append(
                ConfigProblem(
                    source="environment", line=None, key=exc.key or "(environment)", message=str(exc), allowed=""
                )
            )
        except ValidationError as exc:
            problems.extend(_problems_from(exc, "environment", {}))
        else:
            if any(k.startswith(ENV_PREFIX) for k in os.environ):
                problems.extend(_semantic_problems(env_settings, "environment", {}))
        finally:
            FILE_DATA.reset(token)
    problems.sort(key=lambda pr: (pr.source == "environment", pr.line or 0))
    return problems


def _without(data: Mapping[str, Any], locations: list[tuple[Any, ...]]) -> dict[str, Any]:
    """A copy of the file's ``data`` without the values at ``locations`` (a section, when a key cannot be found)."""
    import copy

    pruned: dict[str, Any] = copy.deepcopy(dict(data))
    for loc in locations:
        path = [part for part in loc if isinstance(part, str | int)]
        node: Any = pruned
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
            if node is None:
                break
        if isinstance(node, dict) and path and path[-1] in node:
            del node[path[-1]]
        elif path and isinstance(path[0], str):
            pruned.pop(path[0], None)
    return pruned


def iter_env_keys() -> Iterator[str]:
    """The ``CONTEXTWARDEN_*`` variables set in the environment (for ``config show``)."""
    return (k for k in sorted(os.environ) if k.startswith(ENV_PREFIX))
