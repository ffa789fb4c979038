"""Tenant-scoped store keys: every key a tenant's id may take reads back as that id, and tenants never share one."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from contextwarden.exceptions import SessionNotFound, UsageError
from contextwarden.stores import MAX_ID_LENGTH, MemoryStore, open_async_store
from contextwarden.stores.tenancy import (
    OPEN_TENANT,
    SEPARATOR,
    acreate_scoped,
    alocate,
    client_session_id,
    creatable_keys,
    locate,
    session_keys,
)
from contextwarden.stores.values import id_problem

names = st.text(st.characters(exclude_categories=("Cc", "Cs"), exclude_characters=SEPARATOR), min_size=1, max_size=60)
tenants = st.sampled_from([OPEN_TENANT, "acme", "Acme", "acme ", "a" * 128]) | names


@given(tenant=tenants, session_id=names)
def test_every_key_of_an_id_reads_back_as_that_id(tenant: str, session_id: str) -> None:
    keys = session_keys(tenant, session_id)
    scoped = f"{tenant}{SEPARATOR}{session_id}"
    assert keys[0] == (session_id if tenant == OPEN_TENANT or len(scoped) > MAX_ID_LENGTH else scoped)
    for key in keys:
        assert id_problem(key, "session_id") is None
        assert client_session_id(tenant, key) == session_id


@given(first=tenants, second=tenants, session_id=names)
def test_two_tenants_never_create_under_the_same_first_key(first: str, second: str, session_id: str) -> None:
    if first == second:
        return
    try:
        one, two = creatable_keys(first, session_id)[0], creatable_keys(second, session_id)[0]
    except UsageError:
        return  # too long for one of the tenants: refused, never shared
    assert one != two


def test_an_id_with_the_separator_or_too_long_for_the_tenant_is_refused_naming_the_limit() -> None:
    with pytest.raises(UsageError, match="U\\+241F"):
        session_keys("acme", f"a{SEPARATOR}b")
    long_id = "s" * (MAX_ID_LENGTH - 3)
    with pytest.raises(UsageError, match="up to 195 characters"):
        creatable_keys("acme", long_id)
    assert session_keys("acme", long_id) == (long_id,)  # found only as a session stored before scoping
    assert creatable_keys(OPEN_TENANT, long_id) == (long_id,)


def test_locate_finds_the_tenants_scoped_key_then_its_bare_one() -> None:
    store = MemoryStore()
    store.create_session("old", tenant="acme")
    store.create_session(f"acme{SEPARATOR}new", tenant="acme")
    assert locate(store, "acme", "old").session_id == "old"
    assert locate(store, "acme", "new").session_id == f"acme{SEPARATOR}new"
    with pytest.raises(SessionNotFound):
        locate(store, "globex", "old")


@pytest.mark.anyio
async def test_a_key_held_by_another_tenant_sends_the_new_session_to_the_other_key() -> None:
    store = open_async_store("memory://")
    await store.create_session("r1", tenant="acme")  # an old bare session of acme
    created = await acreate_scoped(store, OPEN_TENANT, "r1", model=None, window=None)
    assert created.session_id == f"{OPEN_TENANT}{SEPARATOR}r1" and created.tenant == OPEN_TENANT
    assert (await alocate(store, OPEN_TENANT, "r1")).session_id == created.session_id
    assert (await alocate(store, "acme", "r1")).session_id == "r1"
