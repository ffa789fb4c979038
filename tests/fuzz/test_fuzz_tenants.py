"""Tenants never cross: a session created under tenant A is neither readable nor appendable under B.

Every store call that names a tenant, and `Session(..., tenant=B)` itself, must fail for B exactly
like a missing session (`SessionNotFound`), whatever the ids and tenant names are; A's session
is unchanged afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ._sessions import open_stores
from ._tenants import fuzz_tenants


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with open_stores(tmp_path_factory.mktemp("fuzz-tenants")) as opened:
        yield opened


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_other_tenant_cannot_read_or_append(backend: str, stores: dict[str, Any]) -> None:
    fuzz_tenants(stores[backend], 60)
