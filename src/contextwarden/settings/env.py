"""Where settings come from outside a file: the ``CONTEXTWARDEN_`` variable prefix and the user directory."""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["APP_NAME", "ENV_PREFIX", "user_dir"]

ENV_PREFIX = "CONTEXTWARDEN_"
APP_NAME = "contextwarden"


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
