"""The ``[memory]`` section: validated like the rest, and memory kept beside the sessions by default."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from contextwarden import Session
from contextwarden.exceptions import ConfigError
from contextwarden.memory import InMemoryBackend, SQLiteMemoryBackend
from contextwarden.memory.config import open_memory_backend
from contextwarden.messages import Message
from contextwarden.settings import load_settings


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cw.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_memory_lives_in_the_session_store_file(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    settings = load_settings(
        _config(tmp_path, f'[store]\nurl = "sqlite:///{db}"\n[memory]\nenabled = true\nacross_sessions = false\n')
    )
    memory = settings.session_memory()
    assert memory.across_sessions is False
    session = Session("s1", window=1500, counter="heuristic", memory=memory)
    filler = "the deployment log shows nothing unusual. " * 8
    for i in range(60):
        session.add([Message.user(f"step {i}: the build id is B-{i:04d}. {filler}"), Message.assistant("noted")])
        session.prepare(format="internal")
    assert session.status().compactions
    with sqlite3.connect(db) as conn:
        (count,) = conn.execute("SELECT count(*) FROM memory_records WHERE session_id = 's1'").fetchone()
    conn.close()
    assert count > 0


@pytest.mark.parametrize(
    ("store_url", "kind"),
    [("memory://", InMemoryBackend), ("sqlite:///{tmp}/s.db", SQLiteMemoryBackend)],
)
def test_store_follows_the_session_store(tmp_path: Path, store_url: str, kind: type) -> None:
    backend = open_memory_backend("store", store_url=store_url.format(tmp=tmp_path))
    assert isinstance(backend, kind)
    backend.close()


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ('url = "redis://localhost"', "url"),
        ("share = 0.95", "share"),
        ("limit = 0", "limit"),
        ('embedder = "bert"', "embedder"),
        ("bogus = 1", "bogus"),
        ("weights = { recency = -1 }", "recency"),
    ],
)
def test_bad_memory_settings_are_refused_naming_the_key(tmp_path: Path, section: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(_config(tmp_path, f"[memory]\n{section}\n"))
    assert key in str(info.value)
