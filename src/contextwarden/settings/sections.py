"""The sections of a config file (``[agent_context]``, ``[compaction]``, ``[budgets]``, ``[store]``, ``[memory]``,
``[summarizer]``, ``[models.<name>]``, ``[service]``), each a pydantic model that forbids unknown keys.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model, field_validator

from ..compaction.config import FLOAT_FIELDS, INT_FIELDS, MAX_WEIGHT, CompactionConfig

__all__ = [
    "SEED_KEY_MAP",
    "AgentContext",
    "BudgetsSection",
    "CompactionSection",
    "ComponentName",
    "Int",
    "MemorySection",
    "MemoryWeights",
    "ModelOverride",
    "Number",
    "ServiceKey",
    "ServiceSection",
    "StoreSection",
    "SummarizerSection",
]

SEED_KEY_MAP: dict[str, str] = {
    "min_keep_recent_rounds": "keep_recent_rounds",
    "max_observation_age_rounds": "clear_after_rounds",
    "truncated_observation_max_chars": "cleared_head_chars",
    "max_compact_failures": "max_summarizer_failures",
}
"""Seed keys of ``[agent_context]`` that are another name of a ``[compaction]`` option."""


_Share = Field(default=None, gt=0.0, lt=2.0)


def _integer(value: Any) -> Any:
    """Refuse what pydantic would quietly turn into an int: booleans and decimal numbers."""
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got the boolean {value!r}")
    if isinstance(value, float):
        raise ValueError(f"expected an integer, got the decimal number {value!r}")
    return value


def _number(value: Any) -> Any:
    """Refuse booleans where a number belongs (pydantic would read true as 1.0)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got the boolean {value!r}")
    return value


Int = Annotated[int, BeforeValidator(_integer)]
"""An integer setting: ``3`` or ``"3"`` (an environment variable), never ``true`` or ``3.0``."""
Number = Annotated[float, BeforeValidator(_number)]
"""A number setting (finite: the sections refuse NaN and infinity), never ``true``."""
_SECTION_CONFIG = ConfigDict(extra="forbid", allow_inf_nan=False)


class AgentContext(BaseModel):
    """The seed design's ``[agent_context]`` keys. Unset keys leave the library default in force.

    ``warning/error/critical_threshold`` are the pressure states of the budget (`Thresholds`);
    with ``[compaction] profile = "seed"`` they also drive compaction as in the seed (clear and
    evict from warning, summarize from error, cut to 0.10 under warning). ``min_keep_tokens`` is
    a floor under the compaction target: ``low_water`` (and ``min_low_water``) are raised to
    ``min_keep_tokens / effective budget`` so a compaction never cuts the view below that size.
    """

    model_config = _SECTION_CONFIG

    max_context_tokens: Int | None = Field(default=None, gt=0)
    """Context window in tokens (overrides the model registry and ``[models]``)."""
    reserved_tokens: Int | None = Field(default=None, ge=0)
    """Tokens kept free for the reply (default: min(model max output, window / 4))."""
    warning_threshold: Number | None = _Share
    error_threshold: Number | None = _Share
    critical_threshold: Number | None = _Share
    min_keep_recent_rounds: Int | None = Field(default=None, ge=1, le=INT_FIELDS["keep_recent_rounds"][1])
    max_observation_age_rounds: Int | None = Field(default=None, ge=1, le=INT_FIELDS["clear_after_rounds"][1])
    truncated_observation_max_chars: Int | None = Field(default=None, ge=0, le=INT_FIELDS["cleared_head_chars"][1])
    min_keep_tokens: Int | None = Field(default=None, ge=0)
    max_compact_failures: Int | None = Field(default=None, ge=1, le=INT_FIELDS["max_summarizer_failures"][1])


def _bounds(low: float, high: float, low_open: bool, high_open: bool) -> dict[str, float]:
    return {"gt" if low_open else "ge": low, "lt" if high_open else "le": high}


def _section_from_dataclass(
    cls: type[Any], name: str, extra_fields: Mapping[str, Any], *, number_bounds: Mapping[str, float] | None = None
) -> type[BaseModel]:
    """A pydantic model with every field of the dataclass ``cls``, optional (None: library default).

    Built from the dataclass itself so a new `CompactionConfig` option is a config key at once; the
    types and ranges are `CompactionConfig`'s own (its tables), so the file is checked as it is read.
    """
    hints = typing.get_type_hints(cls)
    fields: dict[str, Any] = dict(extra_fields)
    for f in dataclasses.fields(cls):
        annotation = hints[f.name]
        bounds: dict[str, Any] = {}
        if f.name in INT_FIELDS:
            annotation = Int
            bounds = {"ge": INT_FIELDS[f.name][0], "le": INT_FIELDS[f.name][1]}
        elif f.name in FLOAT_FIELDS:
            annotation = Number
            bounds = _bounds(*FLOAT_FIELDS[f.name])
        elif annotation is float:
            annotation = Number
            bounds = dict(number_bounds or {})
        elif dataclasses.is_dataclass(annotation):
            annotation = _section_from_dataclass(
                annotation,  # type: ignore[arg-type]
                name + "_" + f.name,
                {},
                number_bounds={"ge": 0.0, "le": MAX_WEIGHT},
            )
        elif get_origin(annotation) is tuple:
            annotation = list[get_args(annotation)[0]]  # type: ignore[misc]
        elif get_origin(annotation) is collections.abc.Mapping:
            key, value = get_args(annotation)
            annotation = dict[key, {int: Int, float: Number}.get(value, value)]  # type: ignore[misc,valid-type]
        fields[f.name] = (annotation | None, Field(default=None, **bounds))
    model: type[BaseModel] = create_model(name, __config__=_SECTION_CONFIG, **fields)
    return model


if TYPE_CHECKING:

    class CompactionSection(BaseModel):
        """``[compaction]``: every `CompactionConfig` option (unset: the library default) and ``profile``."""

        profile: Literal["default", "seed"] | None = None

        def __getattr__(self, name: str) -> Any: ...

else:
    CompactionSection = _section_from_dataclass(
        CompactionConfig, "CompactionSection", {"profile": (Literal["default", "seed"] | None, None)}
    )
    CompactionSection.__doc__ = "``[compaction]``: every `CompactionConfig` option (unset: the library default)."


ComponentName = Literal["system", "tools", "history", "tool_results", "memory", "output_reserve"]


class BudgetsSection(BaseModel):
    """``[budgets]``: hard limits per view component as shares of the effective budget."""

    model_config = _SECTION_CONFIG

    shares: dict[ComponentName, Number] | None = None
    """Default: system 0.2, tools 0.15, history 0.7, tool_results 0.5, memory 0.1."""
    soft_ratio: Number = Field(default=0.8, gt=0.0, le=1.0)
    """Soft limit as a share of the hard one."""


class StoreSection(BaseModel):
    """``[store]``."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = None
    """Session store URL (a leading ``~`` in a SQLite path is expanded); default: ``sessions.db`` in the user dir."""
    check_on_start: bool = True
    """``serve`` opens the store and lists its sessions before it starts, and refuses to start when that fails."""


class MemoryWeights(BaseModel):
    """``[memory.weights]``: the recall score α·relevance + β·recency + γ·importance."""

    model_config = ConfigDict(extra="forbid")

    relevance: Number = Field(default=1.0, ge=0.0, le=1.0)
    recency: Number = Field(default=0.05, ge=0.0, le=1.0)
    importance: Number = Field(default=0.05, ge=0.0, le=1.0)
    half_life: Number = Field(default=7 * 24 * 3600.0, gt=0.0)
    """Seconds after which recency has decayed to one half."""


class MemorySection(BaseModel):
    """``[memory]``: long-term memory of sessions (off unless ``enabled``)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    """Give sessions long-term memory: what compaction moves out of the view is recalled when relevant."""
    url: str = "store"
    """``store``: beside the sessions (the session store's SQLite file or Postgres database; in process
    for other stores); or ``memory://``, ``sqlite:///path.db``, ``postgresql://host/db``."""
    embedder: Literal["none", "hashing", "minilm"] = "none"
    """``none``: keyword recall (BM25); ``minilm``: hybrid with the packaged MiniLM (extra ``embeddings``)."""
    across_sessions: bool = True
    """Recall the tenant's memories of every session (true) or the session's own only."""
    share: Number = Field(default=0.08, gt=0.0, lt=0.9)
    """The memory's room per request, as a share of the effective budget."""
    limit: Int = Field(default=40, ge=1, le=1000)
    """Hits asked of memory per request."""
    chunk_chars: Int = Field(default=480, ge=40, le=100_000)
    """Longest chunk a message is cut into."""
    min_score: Number = Field(default=0.4, ge=0.0, le=1.0)
    """Hits scoring below this share of the best hit are not shown."""
    weights: MemoryWeights = Field(default_factory=MemoryWeights)

    @field_validator("url")
    @classmethod
    def _known_place(cls, value: str) -> str:
        from ..memory.config import PLACES_HINT, is_memory_place

        if is_memory_place(value):
            return value
        raise ValueError(PLACES_HINT)


class SummarizerSection(BaseModel):
    """``[summarizer]``."""

    model_config = ConfigDict(extra="forbid")

    model: str = "none"
    """``none`` (no summary layer; the default), ``extractive`` (deterministic, no LLM), or an LLM model name.

    Without an LLM the summary layer stays off by default: an extractive summary of the evicted
    rounds repeats what the progress ledger already keeps (the tau probes keep 0.996-1.000 of
    their facts without it, 0.992 with it) and it takes the same room in the context block, so
    it would run on every compaction and save nothing."""


class ModelOverride(BaseModel):
    """``[models.<name>]``: your deployment's limits for a model."""

    model_config = _SECTION_CONFIG

    context_length: Int | None = Field(default=None, gt=0)
    max_output: Int | None = Field(default=None, gt=0)


class ServiceKey(BaseModel):
    """One API key of the service: its SHA-256 (hex) and the tenant it stands for."""

    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(min_length=1, max_length=128)
    key_sha256: str = Field(pattern=r"^[0-9a-fA-F]{64}$")
    """``sha256(key).hexdigest()``; the key itself is never stored (`contextwarden serve --hash-key KEY`)."""

    @field_validator("tenant")
    @classmethod
    def _printable_tenant(cls, value: str) -> str:
        # a tenant name is part of every store key and log line of its requests: a control
        # character would make each of them refused, so the key could never be used
        bad = next((c for c in value if not c.isprintable()), None)
        if bad is not None or value != value.strip():
            shown = f"character U+{ord(bad):04X}" if bad is not None else "leading or trailing space"
            raise ValueError(f"tenant {value!r} has a {shown}; use printable characters only")
        return value


class ServiceSection(BaseModel):
    """``[service]``: the OpenAI-compatible proxy run by ``contextwarden serve``."""

    model_config = _SECTION_CONFIG

    host: str = "127.0.0.1"
    port: Int = Field(default=8787, ge=0, le=65535)
    upstream_url: str = "https://api.openai.com/v1"
    """The OpenAI-compatible server requests are forwarded to (its API root, usually ending in /v1)."""

    @field_validator("upstream_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        try:
            parts = urlsplit(value)
            port = parts.port  # reading it checks it
        except ValueError as exc:
            raise ValueError(f"{value!r} is not a valid URL ({exc}); use e.g. http://127.0.0.1:8080/v1") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value!r} is not an http(s) URL with a host; use e.g. http://127.0.0.1:8080/v1")
        del port
        return value

    upstream_api_key_env: str | None = "OPENAI_API_KEY"
    """Environment variable holding the upstream key; without it the client's own bearer is forwarded
    when the service has no API keys of its own."""
    api_keys: list[ServiceKey] = Field(default_factory=list)
    """Keys that map to tenants; empty: no authentication, every request is tenant ``default``."""
    forward_client_credentials: bool | None = None
    """Send the client's own ``Authorization``/``X-Api-Key`` upstream (hosted providers, each agent its own
    key): unset forwards them only when there is no upstream key; false never; true whenever the
    service has no API keys of its own (with API keys, the client's key is the service's and stays here)."""
    session_fingerprint: bool = False
    """Name a request that carries no session by a fingerprint of its system prompt and first user message."""
    require_session_id: bool = False
    """Refuse requests naming no session (path, session headers, ``user``, ``metadata.user_id``); else they pass
    through unmanaged."""
    max_body_bytes: Int = Field(default=8 * 1024 * 1024, gt=0)
    max_concurrent_per_tenant: Int = Field(default=64, gt=0)
    upstream_timeout: Number = Field(default=600.0, gt=0)
    """Seconds to wait for the upstream's reply (between stream chunks for a stream)."""
    upstream_connect_timeout: Number = Field(default=10.0, gt=0)
    keepalive_seconds: Number = Field(default=15.0, gt=0)
    """Seconds between SSE keep-alive comments."""
    event_history: Int = Field(default=1000, ge=0)
    """Events kept per session for ``Last-Event-ID`` resume."""
    metrics_sessions: Int = Field(default=0, ge=0)
    """Sessions with their own utilization gauge (the most recently active; bounds label cardinality).
    0 (the default): none, so ``/metrics`` names no session of any tenant."""
    log_content: bool = False
    """Log message content (off: logs carry sizes and ids only)."""
    shadow: bool = False
    """Shadow mode: every request goes upstream exactly as the client sent it, while the session records the
    conversation and computes the view it would have sent (dashboard, sessions API, ``view_tokens`` in the log)."""
    max_cached_sessions: Int = Field(default=1000, gt=0)
    """Sessions kept open in memory per process (the least recently used are reopened from the store)."""
    allowed_origins: list[str] = Field(default_factory=list)
    """Web origins (``https://app.example``) whose pages may call the service from a browser; ``*``:
    any. Empty: only pages the service serves itself."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Names a browser may reach the service by (``Host`` header) besides loopback names and ``host``;
    ``*``: any. Guards an open service against DNS rebinding."""
    metrics_token_env: str | None = None
    """Environment variable holding the token ``/metrics`` requires (``Authorization: Bearer``);
    without one, ``/metrics`` answers loopback clients only."""
    max_reply_bytes: Int = Field(default=32 * 1024 * 1024, gt=0)
    """Largest upstream reply read whole (a non-streamed body, or an error body)."""
    max_stream_bytes: Int = Field(default=256 * 1024 * 1024, gt=0)
    """Longest upstream stream relayed, in bytes; a longer one is cut with an error event."""
    max_event_bytes: Int = Field(default=8 * 1024 * 1024, gt=0)
    """Largest single event of an upstream stream."""

    @field_validator("api_keys")
    @classmethod
    def _distinct_keys(cls, keys: list[ServiceKey]) -> list[ServiceKey]:
        # digests are compared in lower case when requests are authenticated: two spellings of one
        # digest would hand the key to whichever tenant came last
        seen: dict[str, str] = {}
        for key in keys:
            digest = key.key_sha256.lower()
            if digest in seen:
                raise ValueError(
                    f"key_sha256 {key.key_sha256!r} (tenant {key.tenant!r}) is the digest of tenant "
                    f"{seen[digest]!r} too (digests are compared in lower case); give each tenant its own key"
                )
            seen[digest] = key.tenant
        return keys
