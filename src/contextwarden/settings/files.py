"""Finding and reading the config file (TOML or YAML, bounded in size, depth and aliases), and `load_settings`."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .._json import too_deep
from ..exceptions import ConfigError
from .effective import FILE_DATA, Settings
from .env import ENV_PREFIX, user_dir

__all__ = [
    "CONFIG_NAMES",
    "FILE_LIMITS",
    "MAX_CONFIG_BYTES",
    "MAX_CONFIG_DEPTH",
    "MAX_CONFIG_NODES",
    "MAX_YAML_ALIASES",
    "USER_CONFIG_NAMES",
    "BoundedYamlLoader",
    "YamlLimitError",
    "check_environment_depth",
    "config_file_of",
    "find_config_file",
    "is_yaml",
    "load_settings",
    "parse_config",
    "read_config_file",
]

CONFIG_NAMES = ("contextwarden.toml", "contextwarden.yaml", "contextwarden.yml")
USER_CONFIG_NAMES = ("config.toml", "config.yaml", "config.yml")


def find_config_file(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The config file in force (see the module docstring), or None when there is none.

    Raises:
        ConfigError: an explicit path (flag or ``$CONTEXTWARDEN_CONFIG``) that does not exist.
    """
    named = explicit if explicit is not None else os.environ.get(ENV_PREFIX + "CONFIG") or None
    if named is not None:
        path = Path(named).expanduser()
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist; fix the path or remove it.", key="config")
        return path
    for candidate in (*(Path.cwd() / n for n in CONFIG_NAMES), *(user_dir() / n for n in USER_CONFIG_NAMES)):
        if candidate.is_file():
            return candidate
    return None


def is_yaml(path: Path) -> bool:
    return path.suffix.lower() in (".yaml", ".yml")


MAX_CONFIG_BYTES = 1024 * 1024
"""Largest config file read (1 MiB); a config file is a few kilobytes."""
MAX_YAML_ALIASES = 100
"""Most YAML aliases (``*name``) in a config file."""
MAX_CONFIG_NODES = 10_000
"""Most values in a config file once its YAML aliases are expanded (a billion-laughs file has 10**9)."""
MAX_CONFIG_DEPTH = 32
"""Deepest nesting of tables and lists in a config file."""


class YamlLimitError(yaml.composer.ComposerError):
    """A YAML file over the alias or size limits."""


class BoundedYamlLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses alias bombs: counts aliases and the values they expand to.

    PyYAML shares an aliased node instead of copying it, so parsing stays cheap, but everything
    that walks the result (validation, line lookup) sees the expanded tree: 9 levels of 10
    aliases are a billion values. Each node's expanded size is known once it is composed, so an
    alias adds the size of what it names, and the file is refused before anything walks it.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._sizes: dict[int, int] = {}
        self._aliases = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event: Any = self.peek_event()  # type: ignore[no-untyped-call]
            target = self.anchors.get(event.anchor)
            if target is not None:
                self._aliases += 1
                if self._aliases > MAX_YAML_ALIASES:
                    raise YamlLimitError(None, None, f"more than {MAX_YAML_ALIASES} aliases (*name)", event.start_mark)
                if id(target) not in self._sizes:
                    raise YamlLimitError(
                        None, None, f"alias *{event.anchor} refers to a value that contains it", event.start_mark
                    )
        node = super().compose_node(parent, index)
        if node is None or id(node) in self._sizes:  # an alias: the node is the anchored one
            return node
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            children = []
        size = 1 + sum(self._sizes.get(id(child), 1) for child in children)
        if size > MAX_CONFIG_NODES:
            raise YamlLimitError(
                None,
                None,
                f"the document expands to more than {MAX_CONFIG_NODES} values (aliases included)",
                node.start_mark,
            )
        self._sizes[id(node)] = size
        return node


def _depth_problem(data: Any) -> int | None:
    """The nesting depth of ``data`` when it exceeds `MAX_CONFIG_DEPTH` (None when it does not)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_CONFIG_DEPTH:
            return depth
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return None


def _read_bounded(path: Path) -> str:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {str(path)!r}: {exc}", key="config") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{path}: the config file is larger than {MAX_CONFIG_BYTES // 1024} KiB; a config file holds a few "
            "settings, check that this is the right file.",
            key="config.size",
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}:{line}: the config file is not UTF-8 text; save it as UTF-8.", key="config.encoding"
        ) from None


FILE_LIMITS = {
    "config.size": f"a file of at most {MAX_CONFIG_BYTES // 1024} KiB",
    "config.encoding": "UTF-8 text",
    "config.limits": f"at most {MAX_YAML_ALIASES} YAML aliases, {MAX_CONFIG_NODES} values with aliases expanded, "
    f"{MAX_CONFIG_DEPTH} levels of nesting",
}


def parse_config(path: Path) -> tuple[dict[str, Any], str]:
    """Parse a config file; ConfigError with the line on a syntax error.

    Bounded: at most `MAX_CONFIG_BYTES`, `MAX_YAML_ALIASES` aliases expanding to at most
    `MAX_CONFIG_NODES` values, nested at most `MAX_CONFIG_DEPTH` deep.
    """
    text = _read_bounded(path)
    if is_yaml(path):
        try:
            data = yaml.load(text, Loader=BoundedYamlLoader)
        except YamlLimitError as exc:
            line = exc.problem_mark.line + 1 if exc.problem_mark is not None else 0
            raise ConfigError(f"{path}:{line}: YAML over the limits: {exc.problem}", key="config.limits") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f":{mark.line + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ConfigError(f"{path}{where}: invalid YAML: {problem}", key="config.syntax") from None
        except RecursionError:
            raise ConfigError(
                f"{path}: invalid YAML: nested deeper than {MAX_CONFIG_DEPTH} levels", key="config.limits"
            ) from None
        if data is None:
            data = {}
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML: {exc}", key="config.syntax") from None
        except ValueError:  # tomllib's own limit: an integer longer than Python converts from text
            raise ConfigError(
                f"{path}: invalid TOML: a number has more digits than any option allows", key="config.limits"
            ) from None
        except RecursionError:
            raise ConfigError(
                f"{path}: invalid TOML: nested deeper than {MAX_CONFIG_DEPTH} levels", key="config.limits"
            ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: the top level must be a table of sections, got {type(data).__name__}.", key="config.syntax"
        )
    depth = _depth_problem(data)
    if depth is not None:
        raise ConfigError(
            f"{path}: values are nested deeper than {MAX_CONFIG_DEPTH} levels; a config file has sections "
            "with keys and small tables.",
            key="config.limits",
        )
    return data, text


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The contents of a TOML (``.toml``) or YAML (``.yaml``/``.yml``) config file as a dict.

    Raises:
        ConfigError: the file cannot be read or parsed (the message names the line).
    """
    return parse_config(Path(path))[0]


def check_environment_depth() -> None:
    """Refuse a ``CONTEXTWARDEN_*`` variable whose JSON value nests past `MAX_CONFIG_DEPTH` (reading it
    would exhaust the parser's recursion before any value is checked).

    Raises:
        ConfigError: naming the variable.
    """
    for name, value in os.environ.items():
        if name.startswith(ENV_PREFIX) and value.lstrip()[:1] in ("[", "{") and too_deep(value, MAX_CONFIG_DEPTH):
            raise ConfigError(
                f"${name} nests arrays or objects deeper than {MAX_CONFIG_DEPTH} levels; a configuration value "
                "is a few levels deep: fix or unset the variable.",
                key=name.removeprefix(ENV_PREFIX).lower().replace("__", "."),
            )


def load_settings(config: str | os.PathLike[str] | None = None, **flags: Any) -> Settings:
    """Settings from the config file, the environment and ``flags`` (highest first: flags).

    Args:
        config: the config file; None looks for one (see `find_config_file`).
        **flags: top-level keys or section dicts set by command-line flags.

    Raises:
        ConfigError: the file cannot be read, or a value is invalid (every problem is listed;
            ``contextwarden config validate`` gives their lines).
    """
    path = find_config_file(config)
    data = read_config_file(path) if path is not None else {}
    check_environment_depth()
    token = FILE_DATA.set(data)
    try:
        settings = Settings(**flags)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg'].removeprefix('Value error, ')}" for e in exc.errors()
        )
        source = f" (file {path} or CONTEXTWARDEN_* variables)" if path else " (CONTEXTWARDEN_* variables)"
        raise ConfigError(
            f"invalid settings{source}: {problems}; run `contextwarden config validate` for lines and allowed values.",
            key="config",
        ) from None
    finally:
        FILE_DATA.reset(token)
    settings.__dict__["_config_file"] = path
    return settings


def config_file_of(settings: Settings) -> Path | None:
    """The file `load_settings` read for ``settings`` (None: no file)."""
    value = settings.__dict__.get("_config_file")
    return value if isinstance(value, Path) else None
