"""The suite's servers and its one rule for a missing server or tool: skip locally, fail in CI.

CI sets ``CONTEXTWARDEN_REQUIRE_SERVICES=1`` (see ``.ci/run``): there a test whose Redis, Postgres,
browser or packaged model is missing fails instead of passing silently as a skip.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRE_SERVICES = os.environ.get("CONTEXTWARDEN_REQUIRE_SERVICES") == "1"
REDIS_URL = os.environ.get("CONTEXTWARDEN_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get("CONTEXTWARDEN_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def unavailable(message: str) -> NoReturn:
    """Skip the test (or, with CONTEXTWARDEN_REQUIRE_SERVICES=1, fail it) for the reason ``message``."""
    if REQUIRE_SERVICES:
        pytest.fail(message)
    pytest.skip(message)
