"""`Settings`: the effective settings, layered defaults < config file < ``CONTEXTWARDEN_*`` variables < flags,
and what the CLI and the service build from them (compaction config, budgets, the store URL).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import Field
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from .._store_url import check_store_url, expand_store_url
from ..budget import Budget, ComponentBudgets, Thresholds
from ..compaction.config import CompactionConfig
from ..exceptions import ConfigError
from ..models import lookup_model
from .env import ENV_PREFIX, user_dir
from .sections import (
    SEED_KEY_MAP,
    AgentContext,
    BudgetsSection,
    CompactionSection,
    MemorySection,
    ModelOverride,
    ServiceSection,
    StoreSection,
    SummarizerSection,
)

if TYPE_CHECKING:
    from ..memory.config import MemoryOptions
    from ..recall import SessionMemory

__all__ = ["FILE_DATA", "STORE_URL_FORMS", "FileOnlySettings", "Settings"]

STORE_URL_FORMS = (
    "memory://, sqlite:///relative.db, sqlite:////absolute.db, sqlite:///~/path.db (a writable directory), "
    "redis://HOST:PORT/DB, redis+cluster://H1:PORT,H2:PORT/, postgresql://USER@HOST/DB"
)

FILE_DATA: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("contextwarden_file_data")


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
        return init_settings, env_settings, InitSettingsSource(settings_cls, init_kwargs=FILE_DATA.get({}))

    # --- derived library objects -----------------------------------------------------------
    def memory_options(self) -> MemoryOptions:
        """The ``[memory]`` section as the library's `MemoryOptions`."""
        from ..memory.config import MemoryOptions
        from ..memory.scoring import ScoreWeights

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
        from ..recall import SessionMemory

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
            cascade = {"clear": t.warning, "evict": t.warning, "summarize": t.error}
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


class FileOnlySettings(Settings):
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
        return (InitSettingsSource(settings_cls, init_kwargs=FILE_DATA.get({})),)
