"""Redis store URLs: ``redis://``, ``rediss://``, ``unix://`` and ``redis+cluster://`` node lists.

`parse_url` takes the store's own options (``prefix``, ``ttl``) out of the query and turns a
cluster URL's node list into one URL redis-py reads plus seed nodes (`Target`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from ..exceptions import ConfigError

__all__ = ["CLUSTER_SCHEMES", "DEFAULT_PORT", "Target", "check_prefix", "host_port", "join_host", "parse_url"]

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
DEFAULT_PORT = 6379


def check_prefix(prefix: str) -> str:
    """``prefix`` if it can prefix the store's keys (no braces: they would break the hash tag)."""
    if not isinstance(prefix, str) or not prefix or any(c in prefix for c in "{}") or len(prefix) > 100:
        raise ConfigError(
            f"Redis key `prefix` {prefix!r} must be 1 to 100 characters without braces (they would break the "
            "cluster hash tag); use e.g. 'cw' or 'myapp-cw'.",
            key="prefix",
        )
    return prefix


@dataclass(frozen=True, slots=True)
class Target:
    """A store URL taken apart."""

    url: str
    """The URL for redis-py: ``redis://`` or ``rediss://``, one host, our options removed."""
    options: dict[str, Any]
    """Our own options from the query (prefix, ttl)."""
    cluster: bool
    seeds: tuple[tuple[str, int], ...] = ()
    """Further cluster nodes listed after the first one."""

    @property
    def where(self) -> str:
        """The server(s), for error messages."""
        netloc = urlsplit(self.url).netloc.rpartition("@")[2]
        return "cluster " + ",".join([netloc, *(join_host(host, port) for host, port in self.seeds)])


def join_host(host: str, port: int) -> str:
    """``host:port``, with an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def host_port(text: str, url: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` of one cluster node (port 6379 when left out)."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif ":" in text:
        host, _, port = text.rpartition(":")
    else:
        host, port = text, ""
    try:
        number = int(port) if port else DEFAULT_PORT
    except ValueError:
        number = -1
    if not host or not 0 < number < 65_536:
        raise ConfigError(
            f"Redis Cluster node {text!r} in {url!r} is not `host:port`; list the nodes as "
            "`redis+cluster://host1:6379,host2:6379/`.",
            key="store_url",
        )
    return host, number


def parse_url(url: str) -> Target:
    """Take our options (prefix, ttl) out of the query and resolve ``redis+cluster://`` node lists."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ConfigError(f"Redis URL {url!r} is malformed ({exc}).", key="store_url") from None
    ours: dict[str, Any] = {}
    rest: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "prefix":
            ours["prefix"] = value
        elif key == "ttl":
            ours["ttl"] = float(value)
        else:
            rest.append((key, value))
    parts = parts._replace(query=urlencode(rest, quote_via=quote))
    scheme = parts.scheme.lower()
    if scheme not in CLUSTER_SCHEMES:
        return Target(url=urlunsplit(parts), options=ours, cluster=False)
    if parts.path not in ("", "/", "/0"):
        raise ConfigError(
            f"Redis Cluster URL {url!r} names database {parts.path.lstrip('/')!r}, but a cluster has only database "
            "0; end the URL with `/` or `/0`.",
            key="store_url",
        )
    userinfo, at, hosts = parts.netloc.rpartition("@")
    nodes = [host_port(host, url) for host in hosts.split(",")]
    # redis-py reads credentials and TLS options from a one-host URL; the other nodes join as seeds.
    first = parts._replace(scheme=CLUSTER_SCHEMES[scheme], netloc=userinfo + at + join_host(*nodes[0]), path="/0")
    return Target(url=urlunsplit(first), options=ours, cluster=True, seeds=tuple(nodes[1:]))
