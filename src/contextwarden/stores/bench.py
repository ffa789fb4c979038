"""Store benchmark: append throughput, loading a 5,000-message session, and state CAS latency.

For each backend, in a fresh namespace (temporary SQLite file, Redis key prefix, Postgres schema)
that is removed afterwards:

* **append**: 10,000 messages appended one round at a time (a round is 4 messages: user,
  assistant with a tool call, a ~1.5 kB tool result, assistant reply), one transaction each;
  ``append_msgs_per_s`` = messages / total time.
* **load**: ``load_messages`` of a 5,000-message session, median of several runs, in ms.
* **CAS**: ``save_state`` of a ~3 kB compaction state with the expected version (what a
  compaction does after it ran), 1,000 times after a warm-up (statements prepared, Lua scripts
  loaded); ``cas_p99_ms`` is the 99th percentile, i.e. the 10th-slowest save, so that a single
  preemption on a busy machine does not decide it.

`run_stores_bench` returns (and optionally writes) ``{"backends": {name: {"append_msgs_per_s",
"load_5000_ms", "cas_p99_ms"}}}``; a backend that cannot run reports ``{"error": ...}`` instead.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..exceptions import ContextWardenError
from ..messages import Message, ToolCall
from .base import BaseStore

__all__ = ["BACKENDS", "DEFAULT_POSTGRES_URL", "DEFAULT_REDIS_URL", "main", "run_stores_bench"]

BACKENDS = ("memory", "sqlite", "redis", "postgres", "postgres-async-commit")
"""``postgres-async-commit`` is Postgres with ``synchronous_commit=off``: the durability class of the
SQLite store (WAL, ``synchronous=NORMAL``), so the two compare like for like; ``postgres`` keeps
the server's durable default and waits for a disk flush at every commit."""
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
ROUND_SIZE = 4


def make_round(number: int) -> list[Message]:
    """One tool-using round of 4 messages with realistic sizes."""
    call_id = f"call_{number}"
    return [
        Message.user(f"Step {number}: look at module {number % 97} and tell me what breaks. " * 3, turn=number),
        Message.assistant(
            "Reading the file first.",
            tool_calls=[
                ToolCall(call_id=call_id, name="read_file", arguments=json.dumps({"path": f"src/m{number}.py"}))
            ],
            turn=number,
        ),
        Message.tool_result(
            call_id, f"def f{number}(x):\n    return x * {number}\n" * 40, name="read_file", turn=number
        ),
        Message.assistant(f"Module {number % 97} multiplies its input; nothing breaks. " * 6, turn=number),
    ]


def _state(number: int) -> dict[str, Any]:
    return {
        "summary": {
            "text": "The agent is migrating modules; decisions so far are listed below. " * 10,
            "span": [0, number],
        },
        "ledger": [{"step": i, "planned": f"port module {i}", "done": f"ported module {i}"} for i in range(25)],
        "counters": {"turns": number, "compactions": number // 10},
        "calibration": {"ratio": 1.07, "samples": 42},
    }


def _percentile(samples: Sequence[float], fraction: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


@contextmanager
def _open(name: str, *, redis_url: str, postgres_url: str, synchronous_commit: bool | None) -> Iterator[BaseStore]:
    """A store of backend ``name`` in a namespace of its own, removed afterwards."""
    tag = uuid.uuid4().hex[:10]
    if name == "memory":
        from .memory import MemoryStore

        yield MemoryStore()
    elif name == "sqlite":
        from .sqlite import SqliteStore

        with (
            tempfile.TemporaryDirectory(prefix="cw-bench-") as directory,
            SqliteStore.from_url(f"sqlite:///{Path(directory) / 'bench.db'}") as store,
        ):
            yield store
    elif name == "redis":
        import redis
        import redis.cluster
        import redis.exceptions

        from .redis import RedisStore
        from .redis_url import parse_url

        prefix = f"cw-bench-{tag}"
        try:
            with RedisStore.from_url(redis_url, prefix=prefix) as store:
                yield store
        finally:
            target = parse_url(redis_url)
            client: Any = (
                redis.cluster.RedisCluster(
                    host=urlsplit(target.url).hostname, port=urlsplit(target.url).port or 6379, socket_connect_timeout=2
                )
                if target.cluster
                else redis.Redis.from_url(target.url, socket_connect_timeout=2)
            )
            try:
                for pattern in (f"{{{prefix}:*", f"{prefix}:*"):
                    keys = list(client.scan_iter(match=pattern, count=1000))
                    for start in range(0, len(keys), 1000):
                        client.delete(*keys[start : start + 1000])
            except (redis.RedisError, redis.exceptions.RedisClusterException):
                pass  # best effort: the server is gone, and so are its keys for this run
            finally:
                client.close()
    elif name in ("postgres", "postgres-async-commit"):
        import psycopg

        from .postgres import PostgresStore, split_url

        schema = f"cw_bench_{tag}"
        try:
            if name == "postgres-async-commit":
                synchronous_commit = False
            with PostgresStore.from_url(
                postgres_url, schema=schema, synchronous_commit=synchronous_commit, timeout=5
            ) as store:
                yield store
        finally:
            try:
                # Without the store's own URL options (schema, synchronous_commit), which libpq refuses.
                with psycopg.connect(split_url(postgres_url)[0], autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            except psycopg.Error:
                pass  # best effort: the server could not be reached in the first place
    else:
        raise ValueError(f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}")


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def bench_store(store: BaseStore, *, messages: int, load_size: int, cas_ops: int, repeats: int) -> dict[str, float]:
    """Run the three measurements on one store; return the figures plus extras (append p99)."""
    rounds = [make_round(number) for number in range(messages // ROUND_SIZE)]
    # Warm up: connections, prepared statements, Lua script cache, for appends and state saves
    # alike (a first use pays for preparing or loading, and would otherwise land in the p99).
    store.create_session("warmup")
    warm_version = 0
    for number in range(20):
        store.append_messages("warmup", make_round(10_000_000 + number))
        warm_version = store.save_state("warmup", _state(number), expected_version=warm_version)

    store.create_session("append")
    latencies = [_timed(functools.partial(store.append_messages, "append", batch)) for batch in rounds]
    appended = len(rounds) * ROUND_SIZE

    store.create_session("load")
    flat = [message for batch in rounds for message in batch][:load_size]
    for start in range(0, len(flat), 500):
        store.append_messages("load", flat[start : start + 500])
    store.load_messages("load")
    load_times = [_timed(lambda: store.load_messages("load")) for _ in range(repeats)]

    store.create_session("cas")
    version = 0
    cas_times: list[float] = []
    for number in range(cas_ops):
        state = _state(number)
        started = time.perf_counter()
        version = store.save_state("cas", state, expected_version=version)
        cas_times.append(time.perf_counter() - started)
    return {
        "append_msgs_per_s": round(appended / sum(latencies), 1),
        "load_5000_ms": round(statistics.median(load_times) * 1000, 2),
        "cas_p99_ms": round(_percentile(cas_times, 0.99) * 1000, 3),
        "append_round_p99_ms": round(_percentile(latencies, 0.99) * 1000, 3),
    }


def run_stores_bench(
    out_json: str | None = None,
    backends: list[str] | None = None,
    *,
    redis_url: str = DEFAULT_REDIS_URL,
    postgres_url: str = DEFAULT_POSTGRES_URL,
    messages: int = 10_000,
    load_size: int = 5_000,
    cas_ops: int = 1_000,
    repeats: int = 7,
    postgres_synchronous_commit: bool | None = None,
    report: Callable[[str, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Benchmark the stores; return ``{"backends": {...}}`` and write it to ``out_json`` when given.

    Args:
        out_json: Path of the JSON result, or None.
        backends: Backends to run (default: all four).
        redis_url: Redis server for the ``redis`` backend.
        postgres_url: Postgres server for the ``postgres`` backend.
        messages: Messages appended in the append test.
        load_size: Messages in the session that is loaded.
        cas_ops: State saves in the CAS test.
        repeats: Loads timed (the median is reported).
        postgres_synchronous_commit: None keeps the server's setting; False matches SQLite's
            durability (a killed process loses nothing; a crashed machine may lose the last commits).
        report: Called with each backend's name and figures (all of them, extras included) as it finishes.
    """
    results: dict[str, dict[str, Any]] = {}
    for name in backends or list(BACKENDS):
        try:
            with _open(
                name, redis_url=redis_url, postgres_url=postgres_url, synchronous_commit=postgres_synchronous_commit
            ) as store:
                figures: dict[str, Any] = bench_store(
                    store, messages=messages, load_size=load_size, cas_ops=cas_ops, repeats=repeats
                )
        except (ContextWardenError, ImportError, OSError) as exc:
            figures = {"error": f"{type(exc).__name__}: {exc}"}
        if report is not None:
            report(name, figures)
        results[name] = {
            key: figures[key] for key in ("append_msgs_per_s", "load_5000_ms", "cas_p99_ms", "error") if key in figures
        }
    result = {"backends": results}
    if out_json is not None:
        Path(out_json).write_text(json.dumps(result, indent=2) + "\n")
    return result


def _print_row(name: str, figures: dict[str, Any]) -> None:
    if "error" in figures:
        print(f"{name:<9} error: {figures['error']}", flush=True)
        return
    print(
        f"{name:<9} {figures['append_msgs_per_s']:>12,.0f} {figures['append_round_p99_ms']:>14.2f} "
        f"{figures['load_5000_ms']:>13.1f} {figures['cas_p99_ms']:>11.2f}",
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m benchmarks.stores_bench --json OUT``."""
    parser = argparse.ArgumentParser(description="Benchmark contextwarden's session stores.")
    parser.add_argument("--json", dest="out_json", help="write the results to this JSON file")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated (default: all)")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument(
        "--pg-synchronous-commit",
        choices=("server", "on", "off"),
        default="server",
        help="Postgres commit durability: the server's setting, or force on/off (off = SQLite's durability class)",
    )
    args = parser.parse_args(argv)
    print(f"{'backend':<9} {'append msg/s':>12} {'round p99 ms':>14} {'load 5000 ms':>13} {'CAS p99 ms':>11}")
    run_stores_bench(
        args.out_json,
        [name.strip() for name in args.backends.split(",") if name.strip()],
        redis_url=args.redis_url,
        postgres_url=args.postgres_url,
        messages=args.messages,
        postgres_synchronous_commit={"server": None, "on": True, "off": False}[args.pg_synchronous_commit],
        report=_print_row,
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
