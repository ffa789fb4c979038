"""Store URLs: one parsed type (`StoreUrl`), ``~`` expansion and an offline check.

`StoreUrl.parse` takes a URL apart once: its scheme and the backend it names. `open_store`
dispatches on it, and `StoreUrl.check` (`check_store_url`) catches, without connecting or
importing a driver, what would otherwise fail only at first use: an unknown scheme, a malformed
host, port or database number, an unknown option value, a placeholder such as ``<user dir>``
left in a path, or a SQLite file in a directory that cannot be created or written.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qsl, urlsplit

from .exceptions import ConfigError

__all__ = ["KNOWN_SCHEMES", "Backend", "StoreUrl", "check_store_url", "expand_store_url", "sqlite_file"]

Backend = Literal["memory", "sqlite", "redis", "postgres"]

_REDIS = ("redis", "rediss", "unix")
_CLUSTER = ("redis+cluster", "rediss+cluster")
_POSTGRES = ("postgresql", "postgres")
KNOWN_SCHEMES: tuple[str, ...] = ("memory", "sqlite", *_REDIS, *_CLUSTER, *_POSTGRES)
_ALLOWED = (
    "memory://, sqlite:///relative.db, sqlite:////absolute.db, sqlite:///~/cw.db, redis://host:6379/0, "
    "redis+cluster://h1:6379,h2:6379/, postgresql://user@host/db"
)
_SCHEMA_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_SWITCH = ("on", "off", "true", "false", "1", "0")


def _bad(url: str, problem: str) -> ConfigError:
    return ConfigError(f"store URL {url!r}: {problem}.", key="store.url")


def expand_store_url(url: str) -> str:
    """``url`` with a leading ``~`` of a SQLite path expanded (``sqlite:///~/cw.db`` → an absolute path)."""
    if url.startswith("sqlite:///~"):
        path, sep, query = url[len("sqlite:///") :].partition("?")
        return "sqlite:///" + str(Path(path).expanduser()) + sep + query
    return url


def sqlite_file(url: str) -> Path | None:
    """The database file of a ``sqlite:///`` URL (None for other schemes and ``:memory:``)."""
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///") :].split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)


def _check_sqlite(url: str, *, check_path: bool) -> None:
    if not url.startswith("sqlite:///"):
        raise _bad(
            url, "a SQLite URL starts with `sqlite:///` (three slashes, then the path; four for an absolute one)"
        )
    path, _, query = url[len("sqlite:///") :].partition("?")
    if not path:
        raise _bad(url, "no database path; use e.g. `sqlite:///cw.db`")
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key != "busy_timeout":
            raise _bad(url, f"unknown SQLite option {key!r}; the known one is `busy_timeout` (seconds)")
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not 0 <= seconds < 1e6:
            raise _bad(url, f"busy_timeout={value!r} is not a number of seconds >= 0")
    if path == ":memory:":
        return
    if "<" in path or ">" in path:
        raise _bad(url, f"the path {path!r} holds a placeholder; write the real path (a leading `~` is expanded)")
    if not check_path:
        return
    file = Path(path)
    if file.is_dir():
        raise _bad(url, f"{path!r} is a directory; name the database file in it, e.g. {str(file / 'sessions.db')!r}")
    if file.exists():
        if not os.access(file, os.R_OK | os.W_OK):
            raise _bad(url, f"the database file {path!r} is not readable and writable by this user")
        return
    directory = file.parent.absolute()
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise _bad(url, f"{str(existing)!r} is a file, so the directory {str(directory)!r} cannot be created")
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "directory" if existing == directory else f"directory {str(existing)!r}, where {str(directory)!r}"
        raise _bad(url, f"the {what} is not writable by this user; choose another path")


def _port(url: str, port: str) -> None:
    if not port.isdigit() or not 0 < int(port) < 65_536:
        raise _bad(url, f"port {port!r} is not a number in 1..65535; write each node as host:port")


def _host_port(url: str, node: str) -> None:
    host, _, port = node.rpartition(":") if not node.endswith("]") and ":" in node else (node, "", "")
    if not host:
        raise _bad(url, f"node {node!r} is not `host:port`")
    if port:
        _port(url, port)


_REDIS_OPTIONS = frozenset(
    {
        # ours
        "prefix",
        "ttl",
        # what redis-py's URL parser reads, and connection keywords it passes through
        "db",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_read_size",
        "socket_keepalive",
        "retry_on_timeout",
        "retry_on_error",
        "max_connections",
        "health_check_interval",
        "ssl_check_hostname",
        "ssl_validate_ocsp",
        "ssl_validate_ocsp_stapled",
        "ssl_include_verify_flags",
        "ssl_exclude_verify_flags",
        "ssl_min_version",
        "timeout",
        "protocol",
        "legacy_responses",
        "client_name",
        "username",
        "password",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_ca_data",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_password",
        "encoding",
        "encoding_errors",
        "lib_name",
        "lib_version",
    }
)
"""Query options a Redis store URL may carry."""


def _check_redis(url: str, scheme: str) -> None:
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise _bad(url, f"malformed ({exc})") from None
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "ttl":
            try:
                ttl = float(value)
            except ValueError:
                ttl = -1.0
            if not 0 < ttl < 1e10:
                raise _bad(url, f"ttl={value!r} is not a number of seconds > 0")
        elif key == "prefix" and not value:
            raise _bad(url, "prefix is empty; leave it out for the default or give a name")
        elif key not in _REDIS_OPTIONS:
            raise _bad(
                url,
                f"unknown option {key!r} (the Redis client would refuse it at the first request); "
                f"use {', '.join(sorted(_REDIS_OPTIONS))}",
            )
    if scheme == "unix":
        if not parts.path:
            raise _bad(url, "a unix:// URL names the socket path, e.g. unix:///run/redis.sock")
        return
    netloc = parts.netloc.rpartition("@")[2]
    if scheme in _CLUSTER:
        if not netloc:
            raise _bad(url, "no nodes; list them as `redis+cluster://host1:6379,host2:6379/`")
        for node in netloc.split(","):
            _host_port(url, node)
        if parts.path not in ("", "/", "/0"):
            raise _bad(url, "a cluster has only database 0; end the URL with `/` or `/0`")
        return
    if not netloc:
        raise _bad(url, "no host; use e.g. redis://localhost:6379/0")
    _host_port(url, netloc)
    db = parts.path.strip("/")
    if db and not db.isdigit():
        raise _bad(url, f"database {db!r} is not a number; use e.g. redis://localhost:6379/0")


def _check_postgres(url: str) -> None:
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise _bad(url, f"malformed ({exc})") from None
    netloc = parts.netloc.rpartition("@")[2]
    for node in filter(None, netloc.split(",")):
        _host_port(url, node)
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "schema" and not _SCHEMA_RE.match(value):
            raise _bad(url, f"schema={value!r} is not a plain identifier (letters, digits, underscores)")
        if key == "synchronous_commit" and value.lower() not in _SWITCH:
            raise _bad(url, f"synchronous_commit={value!r} must be `on` or `off`")


def _backend(scheme: str) -> Backend:
    if scheme in _REDIS or scheme in _CLUSTER:
        return "redis"
    if scheme in _POSTGRES:
        return "postgres"
    return "sqlite" if scheme == "sqlite" else "memory"


@dataclass(frozen=True, slots=True)
class StoreUrl:
    """A store URL taken apart: the URL, its scheme (lower case) and the backend it names."""

    url: str
    scheme: str
    backend: Backend
    cluster: bool = False
    """A ``redis+cluster://`` or ``rediss+cluster://`` URL (the listed nodes are seeds)."""

    @classmethod
    def parse(cls, url: object, *, key: str = "store.url") -> StoreUrl:
        """The parsed ``url``.

        Args:
            url: The URL.
            key: The configuration key a `ConfigError` names.

        Raises:
            ConfigError: no scheme, or one no backend serves (the message lists the forms).
        """
        if not isinstance(url, str) or "://" not in url:
            raise ConfigError(f"store URL {url!r} has no scheme; use {_ALLOWED}.", key=key)
        scheme = url.split("://", 1)[0].lower()
        if scheme not in KNOWN_SCHEMES:
            raise ConfigError(f"store URL {url!r} has an unknown scheme {scheme!r}; use {_ALLOWED}.", key=key)
        return cls(url=url, scheme=scheme, backend=_backend(scheme), cluster=scheme in _CLUSTER)

    def check(self, *, check_path: bool = True) -> None:
        """Check the rest of the URL without connecting to anything.

        Args:
            check_path: for SQLite, also check that the file can be created (its directory exists or
                can be created, and is writable).

        Raises:
            ConfigError: the problem, naming the URL and the fix (``key="store.url"``).
        """
        if self.backend == "sqlite":
            _check_sqlite(self.url, check_path=check_path)
        elif self.backend == "redis":
            _check_redis(self.url, self.scheme)
        elif self.backend == "postgres":
            _check_postgres(self.url)

    @property
    def sqlite_file(self) -> Path | None:
        """The database file of a SQLite URL (None for other backends and ``:memory:``)."""
        return sqlite_file(self.url)


def check_store_url(url: object, *, check_path: bool = True) -> None:
    """Check a store URL without connecting to anything (`StoreUrl.parse`, then `StoreUrl.check`).

    Raises:
        ConfigError: the problem, naming the URL and the fix (``key="store.url"``).
    """
    StoreUrl.parse(url).check(check_path=check_path)
