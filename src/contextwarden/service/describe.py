"""What the sessions API and the dashboard show of a session, from a live session or from the store alone.

Both paths give the same document: the `contextwarden.figures` of the view, its timeline
(`contextwarden.timeline`), the prompt-cache reuse, and the lists of the context block as the view
has them (newest first, bounded): the user's instructions, the working set and the ledger. A session
this process holds open is described live; any other from what the store saved (its figures and
timeline, and its view state), without replaying its transcript. A description names the session
by the id its tenant uses, never by its store key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..session import AsyncSession
from ..stores import AsyncSessionStore, SessionInfo
from ..stores.tenancy import client_info
from ..timeline import STATUS_SLOT
from ..workingset import WorkingSet

__all__ = ["LIST_LIMIT", "describe_live", "describe_stored", "listed_figures"]

LIST_LIMIT = 12
"""Rows of each list (ledger, working set, instructions) a description carries."""


def _ledger(data: Mapping[str, Any] | None) -> dict[str, Any]:
    """The newest ledger entries, newest first, each with its step number (the only numbering)."""
    data = data or {}
    entries = [e for e in data.get("entries") or () if isinstance(e, Mapping)]
    rolled = data.get("rolled_up") or {}
    return {
        "total": len(entries),
        "rolled_up": {str(k): int(v) for k, v in dict(rolled).items()},
        "entries": [
            {"step": e.get("step"), "status": e.get("status"), "intention": e.get("intention")}
            for e in reversed(entries[-LIST_LIMIT:])
        ],
    }


def _working_set(data: Mapping[str, Any] | None) -> dict[str, Any]:
    """The strongest items of the working set (acted on before named before seen, then by recency)."""
    if not data:
        return {"total": 0, "items": []}
    try:
        ws = WorkingSet.from_dict(data)
    except (KeyError, TypeError, ValueError):
        return {"total": 0, "items": []}
    items = sorted(ws.items.values(), key=lambda it: it.rank_key, reverse=True)
    return {
        "total": len(items),
        "items": [{"kind": it.kind, "key": it.key, "outcome": it.outcome} for it in items[:LIST_LIMIT]],
    }


def _instructions(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The user's instructions in force as the context block keeps them (newest first, bounded); None when
    the session saved none (a record written before the section existed)."""
    raw = (record or {}).get("instructions")
    if not isinstance(raw, Mapping) or not isinstance(raw.get("items"), list):
        return None
    items = [dict(i) for i in raw["items"] if isinstance(i, Mapping)][:LIST_LIMIT]
    return {"total": int(raw.get("total") or len(items)), "items": items}


def _cache(usage: Mapping[str, Any] | None) -> dict[str, Any]:
    usage = usage or {}
    return {
        "requests": int(usage.get("requests") or 0),
        "input_tokens": int(usage.get("input_tokens") or 0),
        "cache_read_tokens": int(usage.get("cache_read_tokens") or 0),
        "reuse": usage.get("reuse"),
    }


def describe_live(info: SessionInfo, session: AsyncSession) -> dict[str, Any]:
    """The description of a session this process holds."""
    record = session.status_record()
    state = session.state
    span = state.summary_span
    return {
        "session": client_info(info).to_dict(),
        "live": True,
        "figures": record["figures"],
        "timeline": record["timeline"],
        "cache": _cache(record["cache"]),
        "ledger": _ledger(session.ledger.to_dict()),
        "working_set": _working_set(state.working_set.to_dict()),
        "instructions": _instructions(record),
        "summary": {"text": state.summary, "span": list(span) if span else None},
    }


async def describe_stored(store: AsyncSessionStore, info: SessionInfo) -> dict[str, Any]:
    """The description of a session from what the store saved (nothing is replayed or written)."""
    tenant, session_id = info.tenant, info.session_id
    record, _ = await store.load_state(session_id, slot=STATUS_SLOT, tenant=tenant)
    state, _ = await store.load_state(session_id, tenant=tenant)
    record, state = record or {}, state or {}
    span = state.get("summary_span")
    return {
        "session": client_info(info).to_dict(),
        "live": False,
        "figures": record.get("figures"),
        "timeline": record.get("timeline") or {"points": [], "compactions": [], "alerts": []},
        "cache": _cache(record.get("cache")),
        "ledger": _ledger(state.get("ledger")),
        "working_set": _working_set(state.get("working_set")),
        "instructions": _instructions(record),
        "summary": {"text": state.get("summary"), "span": list(span) if span else None},
    }


def listed_figures(session: AsyncSession | None, record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The figures a session list shows: the live ones of an open session, else the saved ones."""
    if session is not None:
        return session.status().figures()
    if record and isinstance(record.get("figures"), Mapping):
        return dict(record["figures"])
    return None
