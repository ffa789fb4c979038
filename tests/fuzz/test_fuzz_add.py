"""`Session.add` in every input format: hostile messages get a typed error or go in whole.

Each input is a short list of messages in one format (internal `Message`, OpenAI chat dicts,
Responses items, Anthropic messages, LangChain objects), built well-formed and then mutated at
random paths, or a value that is not a message list at all. After it, the session's next view is
valid and within budget, its history is still in the transcript and in the store, and a new
process resumes it and saves a compaction (see `_sessions.check_after`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ._messages import INPUTS, fuzz_add
from ._sessions import open_stores


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with open_stores(tmp_path_factory.mktemp("fuzz-add")) as opened:
        yield opened


@pytest.mark.parametrize("fmt", list(INPUTS))
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_add_hostile_messages(fmt: str, backend: str, stores: dict[str, Any]) -> None:
    fuzz_add(stores[backend], fmt, 80)
