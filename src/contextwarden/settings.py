"""Settings of the command line and the service: files, ``CONTEXTWARDEN_*`` variables, flags.

The library itself never reads the environment (its objects take explicit arguments); this
module is the one place that does, for the CLI and the server. Layers, lowest first::

    built-in defaults  <  config file (TOML or YAML)  <  CONTEXTWARDEN_* variables  <  flags

The config file is the ``--config`` path, else ``$CONTEXTWARDEN_CONFIG``, else the first that
exists of ``./contextwarden.toml``, ``./contextwarden.yaml``, ``<user dir>/config.toml`` and
``<user dir>/config.yaml``. Variables name nested keys with ``__``:
``CONTEXTWARDEN_COMPACTION__LOW_WATER=0.4``, ``CONTEXTWARDEN_STORE__URL=sqlite:///x.db``.

Sections:

* ``[agent_context]`` — the seed design's keys, mapped onto the library (see `AgentContext`);
* ``[compaction]`` — every `CompactionConfig` option, plus ``profile = "default" | "seed"``;
* ``[budgets]`` — shares of the effective budget per component (`ComponentBudgets`);
* ``[store]`` — ``url`` of the session store (default: SQLite in the user directory);
* ``[summarizer]`` — ``model``: ``"none"`` (default), ``"extractive"`` (no LLM), or a model name;
* ``[models.<name>]`` — ``context_length`` / ``max_output`` overriding the model registry.

`validate_config_file` reports every problem of a file at once, each with its line and the
allowed values (``contextwarden config validate``).
"""

from __future__ import annotations

import collections.abc
import contextvars
import dataclasses
import os
import re
import sys
import time
import tomllib
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args, get_origin
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, create_model, field_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from ._json import too_deep
from ._store_url import check_store_url, expand_store_url
from .budget import COMPONENTS, Budget, ComponentBudgets, Thresholds
from .compaction.config import FLOAT_FIELDS, INT_FIELDS, MAX_WEIGHT, CompactionConfig
from .exceptions import ConfigError
from .models import lookup_model

if TYPE_CHECKING:
    from .memory.config import MemoryOptions
    from .recall import SessionMemory

__all__ = [
    "ENV_PREFIX",
    "SEED_KEY_MAP",
    "AgentContext",
    "CompactionSection",
    "ConfigProblem",
    "ModelOverride",
    "ServiceKey",
    "ServiceSection",
    "Settings",
    "find_config_file",
    "load_settings",
    "read_config_file",
    "user_dir",
    "validate_config_file",
]

ENV_PREFIX = "CONTEXTWARDEN_"
APP_NAME = "contextwarden"

SEED_KEY_MAP: dict[str, str] = {
    "min_keep_recent_rounds": "keep_recent_rounds",
    "max_observation_age_rounds": "clear_after_rounds",
    "truncated_observation_max_chars": "cleared_head_chars",
    "max_compact_failures": "max_summarizer_failures",
}
"""Seed keys of ``[agent_context]`` that are another name of a ``[compaction]`` option."""


def user_dir() -> Path:
    """The user directory: ``$CONTEXTWARDEN_HOME``, else the platform's per-user app directory.

    Linux and BSD: ``$XDG_CONFIG_HOME/contextwarden`` (``~/.config/contextwarden``); macOS:
    ``~/Library/Application Support/contextwarden``; Windows: ``%APPDATA%\\contextwarden``.
    The directory is not created here.
    """
    home = os.environ.get("CONTEXTWARDEN_HOME")
    if home:
        return Path(home).expanduser()
    if sys.platform == "win32":
        base = os.environ.get("APPDATA") or os.environ.get("LOCALAPPDATA") or str(Path.home())
        return Path(base) / APP_NAME
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / APP_NAME
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / APP_NAME


# --- sections ------------------------------------------------------------------------------------

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
        from .memory.config import PLACES_HINT, is_memory_place

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


# --- the settings --------------------------------------------------------------------------------

STORE_URL_FORMS = (
    "memory://, sqlite:///relative.db, sqlite:////absolute.db, sqlite:///~/path.db (a writable directory), "
    "redis://HOST:PORT/DB, redis+cluster://H1:PORT,H2:PORT/, postgresql://USER@HOST/DB"
)

_FILE_DATA: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("contextwarden_file_data")


class Settings(BaseSettings):
    """Effective settings: defaults < config file < ``CONTEXTWARDEN_*`` variables < flags.

    Build with `load_settings` (it finds and reads the file); ``Settings()`` alone reads only
    the environment.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        allow_inf_nan=False,
        nested_model_default_partial_update=True,
    )

    model: str | None = None
    """Default model of ``compact``, ``count`` and ``demo`` when ``--model`` is not given."""
    tokenizer: str | None = None
    """Token counter spec (``tiktoken:cl100k_base``, ``heuristic``...); default: the model's."""
    agent_context: AgentContext = Field(default_factory=AgentContext)
    compaction: CompactionSection = Field(default_factory=lambda: CompactionSection())
    budgets: BudgetsSection = Field(default_factory=BudgetsSection)
    store: StoreSection = Field(default_factory=StoreSection)
    memory: MemorySection = Field(default_factory=MemorySection)
    summarizer: SummarizerSection = Field(default_factory=SummarizerSection)
    models: dict[str, ModelOverride] = Field(default_factory=dict)
    service: ServiceSection = Field(default_factory=ServiceSection)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # First wins: flags (init kwargs), then the environment, then the file load_settings read.
        return init_settings, env_settings, InitSettingsSource(settings_cls, init_kwargs=_FILE_DATA.get({}))

    # --- derived library objects -----------------------------------------------------------
    def memory_options(self) -> MemoryOptions:
        """The ``[memory]`` section as the library's `MemoryOptions`."""
        from .memory.config import MemoryOptions
        from .memory.scoring import ScoreWeights

        m = self.memory
        weights = ScoreWeights(
            relevance=m.weights.relevance,
            recency=m.weights.recency,
            importance=m.weights.importance,
            half_life=m.weights.half_life,
        )
        return MemoryOptions(
            url=m.url,
            embedder=m.embedder,
            across_sessions=m.across_sessions,
            share=m.share,
            limit=m.limit,
            chunk_chars=m.chunk_chars,
            min_score=m.min_score,
            weights=weights,
        )

    def session_memory(
        self,
        *,
        tenant: str = "default",
        across_sessions: bool | None = None,
        clock: Callable[[], float] = time.time,
    ) -> SessionMemory:
        """A session's long-term memory as ``[memory]`` configures it (its place follows ``[store]``).

        ``across_sessions`` overrides the section's value (the demo recalls only its own run).
        """
        from .recall import SessionMemory

        options = self.memory_options()
        return SessionMemory(
            options.long_term(store_url=self.store_url, tenant=tenant, clock=clock),
            share=options.share,
            limit=options.limit,
            chunk_chars=options.chunk_chars,
            min_score=options.min_score,
            across_sessions=options.across_sessions if across_sessions is None else across_sessions,
        )

    @property
    def store_url(self) -> str:
        """The session store URL (default: SQLite in the user directory; a leading ``~`` is expanded)."""
        if self.store.url:
            return expand_store_url(self.store.url)
        return f"sqlite:///{user_dir() / 'sessions.db'}"

    def model_override(self, model: str | None) -> ModelOverride | None:
        """The ``[models.<name>]`` entry of ``model`` (names compared case-insensitively)."""
        if model is None:
            return None
        wanted = model.strip().lower()
        for name, override in self.models.items():
            if name.strip().lower() == wanted:
                return override
        return None

    def window_for(self, model: str | None, window: int | None = None) -> int | None:
        """Context window: the flag, else ``max_context_tokens``, else ``[models]``, else None (registry)."""
        if window is not None:
            return window
        if self.agent_context.max_context_tokens is not None:
            return self.agent_context.max_context_tokens
        override = self.model_override(model)
        return override.context_length if override is not None else None

    def reserved_output_for(self, model: str | None, window: int) -> int:
        """Reserved output tokens: ``reserved_tokens``, else min(model max output, window / 4)."""
        if self.agent_context.reserved_tokens is not None:
            return self.agent_context.reserved_tokens
        override = self.model_override(model)
        if override is not None and override.max_output is not None:
            return min(override.max_output, window // 4)
        if model is None:
            return 0
        info = lookup_model(model, window=window)
        return min(info.max_output, window // 4)

    def thresholds(self) -> Thresholds:
        """Pressure thresholds from ``[agent_context]`` (library defaults for unset ones)."""
        a = self.agent_context
        base = Thresholds()
        return Thresholds(
            warning=a.warning_threshold if a.warning_threshold is not None else base.warning,
            error=a.error_threshold if a.error_threshold is not None else base.error,
            critical=a.critical_threshold if a.critical_threshold is not None else base.critical,
        )

    def compaction_options(self) -> dict[str, Any]:
        """The explicitly set compaction options, seed aliases resolved (no defaults filled in).

        Raises:
            ConfigError: a seed key and its ``[compaction]`` name are both set, to different values.
        """
        section = self.compaction.model_dump(exclude_none=True)
        if "hybrid_weights" in section:
            section["hybrid_weights"] = {k: v for k, v in section["hybrid_weights"].items() if v is not None}
        for seed_key, key in SEED_KEY_MAP.items():
            value = getattr(self.agent_context, seed_key)
            if value is None:
                continue
            if key in section and section[key] != value:
                raise ConfigError(
                    f"agent_context.{seed_key}={value!r} and compaction.{key}={section[key]!r} name the same "
                    "option with different values; keep one of them.",
                    key=f"agent_context.{seed_key}",
                )
            section[key] = value
        return section

    def compaction_config(self, *, effective: int | None = None) -> CompactionConfig:
        """The `CompactionConfig` these settings describe.

        Args:
            effective: the effective budget of the session; needed to apply ``min_keep_tokens``.

        Raises:
            ConfigError: an invalid combination (the message names the key and the allowed values).
        """
        options = self.compaction_options()
        profile = options.pop("profile", "default")
        if profile == "seed":
            # The seed compacted from the warning state and summarized from the error state.
            t = self.thresholds()
            options.setdefault("high_water", t.warning)
            cascade = {"tool-results": t.warning, "progressive": t.warning, "conversation": t.error}
            options["cascade"] = {**cascade, **options.get("cascade", {})}
            options.setdefault("low_water", round(max(0.05, t.warning - 0.10), 4))
        keep = self.agent_context.min_keep_tokens
        if keep and effective:
            base = CompactionConfig.profile(profile, **options)
            floor = min(keep / effective, base.high_water - 0.01)
            if floor > base.low_water:
                options["low_water"] = round(floor, 4)
            if floor > base.min_low_water:
                options["min_low_water"] = round(min(floor, options.get("low_water", base.low_water)), 4)
            if floor > base.reactive_low_water:
                options["reactive_low_water"] = round(min(floor, options.get("low_water", base.low_water)), 4)
        return CompactionConfig.from_dict({"profile": profile, **options})

    def component_budgets(self, budget: Budget) -> ComponentBudgets:
        """Per-component limits of ``budget`` from ``[budgets]``."""
        shares: dict[Any, float] | None = dict(self.budgets.shares) if self.budgets.shares else None
        return ComponentBudgets.from_budget(budget, shares=shares, soft_ratio=self.budgets.soft_ratio)

    def check(self) -> None:
        """Build every derived object once, so that a bad combination fails now, not mid-command.

        Raises:
            ConfigError: the first problem found.
        """
        self.thresholds()
        self.compaction_config()
        check_store_url(self.store_url)


class _FileOnlySettings(Settings):
    """The file layer alone (what `validate_config_file` checks with lines)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (InitSettingsSource(settings_cls, init_kwargs=_FILE_DATA.get({})),)


# --- files ---------------------------------------------------------------------------------------

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


def _is_yaml(path: Path) -> bool:
    return path.suffix.lower() in (".yaml", ".yml")


MAX_CONFIG_BYTES = 1024 * 1024
"""Largest config file read (1 MiB); a config file is a few kilobytes."""
MAX_YAML_ALIASES = 100
"""Most YAML aliases (``*name``) in a config file."""
MAX_CONFIG_NODES = 10_000
"""Most values in a config file once its YAML aliases are expanded (a billion-laughs file has 10**9)."""
MAX_CONFIG_DEPTH = 32
"""Deepest nesting of tables and lists in a config file."""


class _YamlLimitError(yaml.composer.ComposerError):
    """A YAML file over the alias or size limits."""


class _BoundedYamlLoader(yaml.SafeLoader):
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
                    raise _YamlLimitError(None, None, f"more than {MAX_YAML_ALIASES} aliases (*name)", event.start_mark)
                if id(target) not in self._sizes:
                    raise _YamlLimitError(
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
            raise _YamlLimitError(
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


_FILE_LIMITS = {
    "config.size": f"a file of at most {MAX_CONFIG_BYTES // 1024} KiB",
    "config.encoding": "UTF-8 text",
    "config.limits": f"at most {MAX_YAML_ALIASES} YAML aliases, {MAX_CONFIG_NODES} values with aliases expanded, "
    f"{MAX_CONFIG_DEPTH} levels of nesting",
}


def _parse(path: Path) -> tuple[dict[str, Any], str]:
    """Parse a config file; ConfigError with the line on a syntax error.

    Bounded: at most `MAX_CONFIG_BYTES`, `MAX_YAML_ALIASES` aliases expanding to at most
    `MAX_CONFIG_NODES` values, nested at most `MAX_CONFIG_DEPTH` deep.
    """
    text = _read_bounded(path)
    if _is_yaml(path):
        try:
            data = yaml.load(text, Loader=_BoundedYamlLoader)
        except _YamlLimitError as exc:
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
    return _parse(Path(path))[0]


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
    token = _FILE_DATA.set(data)
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
        _FILE_DATA.reset(token)
    settings.__dict__["_config_file"] = path
    return settings


def config_file_of(settings: Settings) -> Path | None:
    """The file `load_settings` read for ``settings`` (None: no file)."""
    value = settings.__dict__.get("_config_file")
    return value if isinstance(value, Path) else None


# --- validation with lines -----------------------------------------------------------------------


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
        root = yaml.compose(text, Loader=_BoundedYamlLoader)
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
            data, text = _parse(p)
        except ConfigError as exc:
            message = str(exc)
            m = re.search(r"line (\d+)", message) or re.search(rf"{re.escape(str(p))}:(\d+)", message)
            return [
                ConfigProblem(
                    source=str(p),
                    line=int(m.group(1)) if m else None,
                    key={"config.size": "(size)", "config.limits": "(limits)"}.get(exc.key or "", "(syntax)"),
                    message=message.removeprefix(f"{p}: ").removeprefix(f"{p}:{m.group(1) if m else ''}: "),
                    allowed=_FILE_LIMITS.get(exc.key or "", "valid YAML" if _is_yaml(p) else "valid TOML"),
                )
            ]
        lines = _yaml_lines(text) if _is_yaml(p) else _toml_lines(text)
        token = _FILE_DATA.set(data)
        try:
            settings = _FileOnlySettings()
        except ValidationError as exc:
            problems.extend(_problems_from(exc, str(p), lines))
            # the other keys are checked too, so one run lists every problem: without the invalid
            # values the rest validates, and its semantic checks (store URL, water marks) run
            _FILE_DATA.set(_without(data, [tuple(e["loc"]) for e in exc.errors()]))
            try:
                rest = _FileOnlySettings()
            except ValidationError:
                pass
            else:
                seen = {pr.key for pr in problems}
                problems.extend(pr for pr in _semantic_problems(rest, str(p), lines) if pr.key not in seen)
        else:
            problems.extend(_semantic_problems(settings, str(p), lines))
        finally:
            _FILE_DATA.reset(token)
    if environment:
        token = _FILE_DATA.set({})
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
            _FILE_DATA.reset(token)
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


_COMPONENTS = COMPONENTS  # re-exported for the CLI's count table
