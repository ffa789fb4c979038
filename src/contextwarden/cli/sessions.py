"""``contextwarden sessions list|show|export|import|delete`` and ``contextwarden inspect SESSION``.

The operator's view: every tenant's sessions, each named by its tenant and the id that tenant's
clients use (the service scopes ids per tenant, `contextwarden.stores.tenancy`). ``--tenant``
addresses one tenant's session by that id; without it, an id is the store key, which is the id
itself for the sessions of an open service.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .._store_url import check_store_url, sqlite_file
from ..exceptions import SchemaError, SessionNotFound, StoreUnavailable
from ..figures import describe
from ..settings import Settings
from ..stores import SessionInfo, SessionStore, open_store
from ..stores.tenancy import client_session_id, locate
from ..timeline import STATUS_SLOT
from ._common import CLIError, atomic_write, build_session, err, get_settings, out, plain, print_json, quiet_pool_log

__all__ = ["DEMO_SLOT", "STATUS_SLOT", "inspect_command", "open_cli_store", "sessions_app"]

DEMO_SLOT = "demo"
"""State slot where the demo saves its results (the figures are in `STATUS_SLOT`, saved by the session)."""

sessions_app = typer.Typer(help="List, show, export, import and delete stored sessions.", no_args_is_help=True)

StoreOpt = Annotated[
    str | None,
    typer.Option("--store", "-s", help="Session store URL (default: \\[store] url, else SQLite in the user dir)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
TenantOpt = Annotated[
    str | None,
    typer.Option(help="The tenant whose clients call the session SESSION_ID (default: SESSION_ID is the store key)."),
]


@contextlib.contextmanager
def open_cli_store(settings: Settings) -> Iterator[SessionStore]:
    """Open the store of the settings (creating the directory of a SQLite file, the user dir by default).

    Raises:
        ConfigError: the URL is invalid (checked before anything is created or connected).
        CLIError: the store's server cannot be reached (the message names `--store`).
    """
    url = settings.store_url
    check_store_url(url)
    database = sqlite_file(url)
    if database is not None:  # the directory of the database file (the user dir by default)
        database.parent.mkdir(parents=True, exist_ok=True)
    with quiet_pool_log():
        store = open_store(url)
        try:
            yield store
        except StoreUnavailable as exc:
            # the store's own words end with advice for library callers; the CLI user changes --store
            reason = str(exc).split("; the operation was not confirmed", 1)[0]
            raise CLIError(
                f"the session store cannot be reached: {reason}; start it, or pass another `--store` "
                "(or set `[store] url` in the config file)."
            ) from exc
        finally:
            store.close()


def _settings(ctx: typer.Context, store: str | None) -> Settings:
    return get_settings(ctx, store={"url": store} if store else None)


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _saved_figures(store: SessionStore, info: SessionInfo) -> dict[str, Any] | None:
    """The figures the session saved (`contextwarden.figures`), or None when it saved none."""
    record, _ = store.load_state(info.session_id, slot=STATUS_SLOT, tenant=info.tenant)
    figures = (record or {}).get("figures")
    return dict(figures) if isinstance(figures, dict) else None


def _get(store: SessionStore, session_id: str, tenant: str | None = None) -> SessionInfo:
    """The session (its info names the store key): ``tenant``'s session ``session_id``, or the one
    stored under the key ``session_id``."""
    try:
        return store.get_session(session_id) if tenant is None else locate(store, tenant, session_id)
    except SessionNotFound:
        owner = "" if tenant is None else f" of tenant {tenant!r}"
        raise CLIError(
            f"no session {session_id!r}{owner} in the store; list them with `contextwarden sessions list`."
        ) from None


def _row(info: SessionInfo) -> dict[str, Any]:
    """A listed session: the id its tenant's clients use, and the store key when that differs."""
    row = info.to_dict()
    shown = client_session_id(info.tenant, info.session_id)
    if shown != info.session_id:
        row["session_id"], row["store_key"] = shown, info.session_id
    return row


@sessions_app.command("list")
def list_command(
    ctx: typer.Context,
    store: StoreOpt = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's sessions.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many sessions.")] = 100,
    all_: Annotated[bool, typer.Option("--all", help="Include archived sessions.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """List sessions (ordered by id)."""
    settings = _settings(ctx, store)
    rows: list[SessionInfo] = []
    with open_cli_store(settings) as st:
        cursor: str | None = None
        while len(rows) < limit:
            page, cursor = st.list_sessions(
                tenant=tenant, limit=min(100, limit - len(rows)), cursor=cursor, include_archived=all_
            )
            rows.extend(page)
            if cursor is None:
                break
        shown = [_saved_figures(st, r) for r in rows]
    if json_out:
        print_json(
            {
                "store": settings.store_url,
                "sessions": [{**_row(r), "figures": f} for r, f in zip(rows, shown, strict=True)],
            }
        )
        return
    table = Table(title=f"{len(rows)} session(s) in {plain(settings.store_url)}")
    for col in (
        "session",
        "tenant",
        "model",
        "window",
        "used / effective",
        "ratio",
        "state",
        "messages",
        "last active",
    ):
        table.add_column(col, justify="right" if col in ("window", "messages", "used / effective", "ratio") else "left")
    for r, f in zip(rows, shown, strict=True):
        table.add_row(
            Text(client_session_id(r.tenant, r.session_id) + (" (archived)" if r.archived else "")),
            Text(r.tenant),
            Text(r.model or "-"),
            f"{f['window']:,}" if f else (f"{r.window:,}" if r.window else "-"),
            f"{f['used']:,} / {f['effective']:,}" if f else "-",
            f"{f['ratio']:.1%}" if f else "-",
            f"{f['state']} ({(f.get('rule') or {}).get('mode', '?')})" if f else "-",
            f"{r.message_count:,}",
            _when(r.last_active),
        )
    out.print(table)


@sessions_app.command("show")
def show_command(
    ctx: typer.Context,
    session_id: Annotated[str, typer.Argument(help="Session id.")],
    store: StoreOpt = None,
    tenant: TenantOpt = None,
    tail: Annotated[int, typer.Option(min=0, help="Show the last N messages.")] = 10,
    json_out: JsonOpt = False,
) -> None:
    """Metadata, counts and the last messages of a session."""
    settings = _settings(ctx, store)
    with open_cli_store(settings) as st:
        info = _get(st, session_id, tenant)
        key = info.session_id
        total = st.count_messages(key)
        last = st.load_messages(key, start=max(0, total - tail)) if tail else []
        snapshots = st.list_snapshots(key)
    if json_out:
        print_json(
            {
                "session": _row(info),
                "messages": total,
                "snapshots": len(snapshots),
                "tail": [m.to_dict() for m in last],
            }
        )
        return
    out.print(
        Panel.fit(
            Text(
                f"tenant {info.tenant} · model {info.model or '-'} · window {info.window or '-'}\n"
                f"created {_when(info.created_at)} · last active {_when(info.last_active)}"
                f"{' · archived ' + _when(info.archived_at) if info.archived else ''}\n"
                f"{total:,} messages · {len(snapshots):,} snapshots · metadata {dict(info.metadata) or '-'}"
            ),
            title=plain(client_session_id(info.tenant, info.session_id)),
        )
    )
    if last:
        table = Table(title=f"last {len(last)} message(s)")
        for col in ("#", "role", "id", "text"):
            table.add_column(col)
        for i, m in enumerate(last, total - len(last)):
            calls = ", ".join(c.name for c in m.tool_calls)
            text = " ".join(m.text.split())[:100] or (f"→ {calls}" if calls else "")
            table.add_row(str(i), m.role, Text(m.message_id), Text(text))
        out.print(table)


@sessions_app.command("export")
def export_command(
    ctx: typer.Context,
    session_id: Annotated[str, typer.Argument(help="Session id.")],
    store: StoreOpt = None,
    tenant: TenantOpt = None,
    out_path: Annotated[Path | None, typer.Option("--out", "-o", help="Write here (default: stdout).")] = None,
) -> None:
    """Export a session as JSONL (transcript, state, snapshots, audit) for `sessions import`."""
    settings = _settings(ctx, store)
    with open_cli_store(settings) as st:
        info = _get(st, session_id, tenant)
        lines = list(st.export_session(info.session_id))
    text = "".join(lines)
    if out_path is None:
        typer.echo(text, nl=False)
    else:
        atomic_write(out_path, text)
        err.print(f"exported {plain(session_id)} ({len(lines)} lines) to {plain(str(out_path))}")


@sessions_app.command("import")
def import_command(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="A `sessions export` file ('-' for stdin).")],
    store: StoreOpt = None,
    session_id: Annotated[
        str | None, typer.Option("--id", help="Import under this id (default: the exported id).")
    ] = None,
) -> None:
    """Import a session exported with `sessions export`."""
    settings = _settings(ctx, store)
    if str(file) == "-":
        lines: list[str] = sys.stdin.readlines()
    else:
        if not file.is_file():
            raise CLIError(f"{file}: no such file; check the path.", exit_code=2)
        try:
            lines = file.read_text(encoding="utf-8").splitlines(keepends=True)
        except (OSError, UnicodeDecodeError) as exc:
            raise CLIError(f"{file}: cannot read the file ({exc}).") from None
    with open_cli_store(settings) as st:
        try:
            info = st.import_session(lines, session_id=session_id)
        except SchemaError as exc:  # the file is not an export (`sessions export` writes the format): name it
            raise CLIError(f"{file}: {exc} Give a file written by `sessions export`.") from None
    err.print(f"imported {plain(info.session_id)} ({info.message_count:,} messages) into {plain(settings.store_url)}")


@sessions_app.command("delete")
def delete_command(
    ctx: typer.Context,
    session_id: Annotated[str, typer.Argument(help="Session id.")],
    store: StoreOpt = None,
    tenant: TenantOpt = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete a session and everything stored under it."""
    settings = _settings(ctx, store)
    with open_cli_store(settings) as st:
        info = _get(st, session_id, tenant)
        if not yes and not typer.confirm(
            f"delete session {session_id} ({info.message_count:,} messages) from {settings.store_url}?"
        ):
            raise CLIError("not deleted.")
        st.delete_session(info.session_id)
    err.print(f"deleted {plain(session_id)}")


def inspect_command(
    ctx: typer.Context,
    session_id: Annotated[str, typer.Argument(help="Session id.")],
    store: StoreOpt = None,
    tenant: TenantOpt = None,
    ledger_tokens: Annotated[int, typer.Option(min=0, help="Show at most this many tokens of the ledger.")] = 600,
    json_out: JsonOpt = False,
) -> None:
    """Status, ledger, summary, snapshots and compaction history of a stored session.

    The session is resumed from the store (transcript and saved view state; nothing is written);
    the status the demo saves at its end is shown beside it.
    """
    settings = _settings(ctx, store)
    with open_cli_store(settings) as st:
        info = _get(st, session_id, tenant)
        key = info.session_id
        snapshots = st.list_snapshots(key)
        audit = st.read_audit(key)
        saved, version = st.load_state(key, slot=STATUS_SLOT)
        demo, _ = st.load_state(key, slot=DEMO_SLOT)
        # A session built on the store resumes it: the transcript and the saved view state are loaded,
        # nothing is written (status() does not prepare a view).
        with err.status(f"loading {session_id}…") if not json_out else contextlib.nullcontext():
            session = build_session(
                settings, session_id=key, model=info.model, window=info.window, store=st, tenant=info.tenant
            )
        messages = session.transcript
        if saved and isinstance(saved.get("figures"), dict):
            # the figures the session saved at its last turn: the budget it was made with (its tools
            # included), which a session rebuilt here without them would not know
            shown, source = dict(saved["figures"]), f"saved at turn {saved['figures'].get('turn')}"
        else:
            shown, source = session.status().figures(), "computed from the store (the session saved no figures)"
    ledger_text = session.ledger.render(max_tokens=ledger_tokens, count=session.accountant.count_text)
    kinds = Counter(str(e.get("kind")) for e in audit)
    layers = Counter(
        str(e.get("layer")) for e in audit if e.get("kind") == "compaction.finished" and int(e.get("items") or 0) > 0
    )
    timeline = (saved or {}).get("timeline") or {}
    result: dict[str, Any] = {
        "session": _row(info),
        "messages": len(messages),
        "figures": shown,
        "figures_source": source,
        "status_version": version,
        "timeline": timeline,
        "demo": demo,
        "summary": session.state.summary,
        "ledger": ledger_text,
        "snapshots": {"count": len(snapshots), "ids": snapshots[:20]},
        "audit": {"events": len(audit), "by_kind": dict(kinds), "compactions_by_layer": dict(layers)},
    }
    if json_out:
        print_json(result)
        return
    out.print(
        Panel.fit(
            Text(
                f"model {info.model or '-'} · {len(messages):,} messages in the transcript\n"
                f"view ({source}): {describe(shown)}\nstate rule: {(shown.get('rule') or {}).get('text', '-')}\n"
                f"components {shown.get('components')}"
            ),
            title=f"inspect {plain(session_id)}",
        )
    )
    compactions = timeline.get("compactions") or []
    if compactions:
        recent = Table(title=f"compactions (newest {min(len(compactions), 8)} of those kept)")
        for col in ("turn", "layer", "tokens", "saved"):
            recent.add_column(col, justify="right" if col != "layer" else "left")
        for c in reversed(compactions[-8:]):
            recent.add_row(str(c.get("turn")), Text(str(c.get("layer"))), f"{c.get('before'):,} → {c.get('after'):,}",
                           f"{c.get('saved'):,}")  # fmt: skip
        out.print(recent)
    table = Table(title=f"audit log: {len(audit)} events")
    table.add_column("kind")
    table.add_column("count", justify="right")
    for kind, n in kinds.most_common():
        table.add_row(Text(kind), str(n))
    for layer, n in layers.most_common():
        table.add_row(f"  compactions: {layer}", str(n))
    out.print(table)
    out.print(Text(f"snapshots: {len(snapshots):,}" + (f" (first: {', '.join(snapshots[:3])})" if snapshots else "")))
    # model-written text: shown as is (a "[/x]" in a summary must not be read as markup)
    out.print(Panel(Text(result["summary"] or "(no summary: the summary layer has not run)"), title="summary"))
    out.print(Panel(Text(ledger_text or "(empty: nothing has left the view)"), title="progress ledger"))
