"""Settings of the command line and the service: files, ``CONTEXTWARDEN_*`` variables, flags.

The library itself never reads the environment (its objects take explicit arguments); this
package is the one place that does, for the CLI and the server. Layers, lowest first::

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

from .checks import ConfigProblem, iter_env_keys, validate_config_file
from .effective import Settings
from .env import ENV_PREFIX, user_dir
from .files import (
    MAX_CONFIG_BYTES,
    MAX_CONFIG_DEPTH,
    MAX_CONFIG_NODES,
    MAX_YAML_ALIASES,
    config_file_of,
    find_config_file,
    load_settings,
    read_config_file,
)
from .sections import SEED_KEY_MAP, AgentContext, CompactionSection, ModelOverride, ServiceKey, ServiceSection

__all__ = [
    "ENV_PREFIX",
    "MAX_CONFIG_BYTES",
    "MAX_CONFIG_DEPTH",
    "MAX_CONFIG_NODES",
    "MAX_YAML_ALIASES",
    "SEED_KEY_MAP",
    "AgentContext",
    "CompactionSection",
    "ConfigProblem",
    "ModelOverride",
    "ServiceKey",
    "ServiceSection",
    "Settings",
    "config_file_of",
    "find_config_file",
    "iter_env_keys",
    "load_settings",
    "read_config_file",
    "user_dir",
    "validate_config_file",
]
