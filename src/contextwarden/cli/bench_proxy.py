"""``contextwarden bench proxy``: the proxy's added latency, throughput and a bounded soak (see
`contextwarden.service.bench`); with ``--hostile``, a soak with hostile requests mixed in (see
`contextwarden.service.bench_hostile`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ._common import CLIError, err, out
from .bench import JsonPath

__all__ = ["bench_proxy_command"]


def bench_proxy_command(
    stores: Annotated[str, typer.Option(help="Comma list of stores to measure: sqlite, redis.")] = "sqlite,redis",
    redis_url: Annotated[str, typer.Option(help="Redis server for the redis store (a key prefix of its own).")] = (
        "redis://127.0.0.1:6379/0"
    ),
    dialects: Annotated[
        str, typer.Option(help="Comma list of wire dialects to measure: chat, messages (Anthropic), responses.")
    ] = "chat,messages,responses",
    sessions: Annotated[int, typer.Option(min=1, help="Concurrent conversations (agents of the --hostile soak).")] = 50,
    max_messages: Annotated[int, typer.Option(min=4, help="Messages a conversation's history grows to.")] = 200,
    turns: Annotated[int, typer.Option(min=2, help="Turns per conversation after it joins with its history.")] = 6,
    think_ms: Annotated[float, typer.Option(min=0, help="Pause between turns in the latency phase (ms).")] = 1000.0,
    soak: Annotated[int, typer.Option(min=0, help="Proxied requests of the memory soak (0: none).")] = 5_000,
    runs: Annotated[int, typer.Option(min=1, help="Repetitions (the table shows the range).")] = 3,
    hostile: Annotated[
        bool,
        typer.Option(
            "--hostile",
            help="Instead: a soak of --requests requests, 10% hostile (bad, deep, mistyped and huge bodies, bad "
            "session ids, hostile upstream replies): status codes by kind, raw errors, acknowledged replies lost, "
            "credentials leaked, the server's memory growth.",
        ),
    ] = False,
    requests: Annotated[int, typer.Option(min=1, help="Requests of the --hostile soak.")] = 20_000,
    json_out: JsonPath = None,
) -> None:
    """Latency the proxy adds over a direct call, requests/s and a soak, on each store."""
    try:
        from ..service.bench import DIALECTS, ProxyBenchConfig, run_proxy_bench
    except ImportError as exc:
        raise CLIError(
            f"bench proxy needs the service extra ({exc.name} is missing): pip install 'contextwarden[service]'."
        ) from None
    chosen = [s.strip() for s in stores.split(",") if s.strip()]
    unknown = sorted(set(chosen) - {"sqlite", "redis"})
    if unknown or not chosen:
        raise typer.BadParameter(f"{stores!r}: choose from sqlite, redis", param_hint="--stores")
    if hostile:
        if "redis" in chosen:
            _check_redis(redis_url)
        _hostile_soak(chosen, redis_url, requests=requests, concurrency=sessions, json_out=json_out)
        return
    wanted = [d.strip() for d in dialects.split(",") if d.strip()]
    if not wanted or set(wanted) - set(DIALECTS):
        raise typer.BadParameter(f"{dialects!r}: choose from {', '.join(DIALECTS)}", param_hint="--dialects")
    if "redis" in chosen:
        _check_redis(redis_url)
    config = ProxyBenchConfig(
        stores=chosen,
        dialects=wanted,
        redis_url=redis_url,
        sessions=sessions,
        max_messages=max_messages,
        turns=turns,
        think_ms=think_ms,
        soak=soak,
        runs=runs,
    )
    result = run_proxy_bench(config, progress=lambda line: err.print(line))
    table = Table(title=f"proxy: {sessions} sessions, histories up to {max_messages} messages, {runs} runs")
    for column in ("store", "dialect", "added p50 ms", "added p99 ms", "requests/s", "errors", "soak RSS growth MB"):
        table.add_column(column)
    rows = [(store, dialect, summary) for store, by in result["stores"].items() for dialect, summary in by.items()]
    for store, dialect, summary in rows:
        ranges = summary["ranges"]
        growth = [r["soak"].get("rss_growth_mb") for r in result["runs"][store][dialect]]
        table.add_row(
            store,
            dialect,
            "{:.2f} ({:.2f}-{:.2f})".format(summary["added_ms_p50"], *ranges["added_ms_p50"]),
            "{:.2f} ({:.2f}-{:.2f})".format(summary["added_ms_p99"], *ranges["added_ms_p99"]),
            "{:.0f} ({:.0f}-{:.0f})".format(summary["requests_per_s"], *ranges["requests_per_s"]),
            str(summary["errors"]),
            ", ".join(str(g) for g in growth),
        )
    out.print(table)
    cpu = (
        "{} {} {:.2f}-{:.2f}".format(store, dialect, *summary["ranges"]["proxy_cpu_ms_per_request"])
        for store, dialect, summary in rows
    )
    out.print(f"proxy CPU per request, ms: {', '.join(cpu)}")
    loads = [r["load_average_1m"] for by in result["runs"].values() for runs in by.values() for r in runs]
    out.print(f"load average (1 min) at the start of each store's run: {min(loads):.2f} to {max(loads):.2f}")
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result, indent=2) + "\n")


def _check_redis(url: str) -> None:
    """Refuse a Redis URL that is malformed or whose server does not answer, before any run starts."""
    import redis

    from .._store_url import check_store_url
    from ..exceptions import ConfigError

    try:
        check_store_url(url, check_path=False)
        client = redis.Redis.from_url(url.split("?", 1)[0], socket_connect_timeout=3)
        try:
            client.ping()
        finally:
            client.close()
    except ConfigError as exc:
        raise CLIError(f"--redis-url: {exc}", exit_code=2) from None
    except (redis.RedisError, OSError, ValueError) as exc:
        raise CLIError(
            f"--redis-url {url!r}: the server does not answer ({type(exc).__name__}: {exc}); start it, or run with "
            "--stores sqlite.",
            exit_code=2,
        ) from None


def _hostile_soak(stores: list[str], redis_url: str, *, requests: int, concurrency: int, json_out: Path | None) -> None:
    from ..service.bench_hostile import HostileSoakConfig, run_hostile_soak

    config = HostileSoakConfig(stores=stores, redis_url=redis_url, requests=requests, concurrency=concurrency)
    result = run_hostile_soak(config, progress=lambda line: err.print(line))
    for store, soak in result["stores"].items():
        table = Table(title=f"hostile soak on {store}: {soak['requests']:,} requests, {concurrency} at once")
        for column in ("kind", "sent", "status codes", "raw errors"):
            table.add_column(column)
        for kind, seen in soak["by_kind"].items():
            codes = ", ".join(f"{code}×{n}" for code, n in seen["statuses"].items())
            dropped = ", ".join(f"{name}×{n}" for name, n in seen["transport_errors"].items())
            codes += f"; {dropped}" if dropped else ""
            table.add_row(kind, f"{seen['sent']:,}", codes, str(seen["raw_errors"]))
        out.print(table)
        leaked = soak["credentials_leaked"]
        out.print(
            f"{store}: raw errors {soak['raw_errors']} · acknowledged replies lost {soak['acknowledged_lost']} of "
            f"{soak['acknowledged']:,} · cross-tenant reads {soak['cross_tenant_reads']} · credentials leaked "
            f"{leaked['responses']} responses, {leaked['log_lines']} log lines · server RSS {soak['rss_mb'][0][1]} → "
            f"{soak['rss_mb'][-1][1]} MB (growth {soak['rss_growth_mb']} MB, {soak['rss_growth_second_half_mb']} MB in "
            f"the second half) · {soak['requests_per_s']} requests/s · "
            f"load average {soak['load_average_1m']}"
        )
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result, indent=2) + "\n")
