"""``contextwarden bench ...``: the benchmark commands (they print a table and write JSON).

``probes`` and ``stores`` run in this process; ``tokens`` and ``trim`` run the scripts of the
repository's ``benchmarks/`` folder as subprocesses, so they need a source checkout; they use the
reference ``peers_bench.py`` harness when it is given or found beside the checkout, else the
repository's built-in workload. ``locomo`` and ``memory`` measure long-term memory
(``contextwarden[memory]``; locomo's dense path needs ``contextwarden[embeddings]``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from .._store_url import check_store_url
from ..benchmarks.probes import load_traces, run_probes
from ..benchmarks.samples import sample_path
from ..exceptions import ConfigError
from ._common import CLIError, err, out, plain, progress_bar, quiet_pool_log

__all__ = ["bench_app", "fidelity_table", "probes_table", "repo_root"]

bench_app = typer.Typer(
    help="Run the benchmarks (progress on stderr, a table on stdout, JSON with --json OUT).", no_args_is_help=True
)

JsonPath = Annotated[Path | None, typer.Option("--json", help="Write the results here.", metavar="OUT")]


def _budgets(
    text: str, *, flag: str = "--budgets", what: str = "token budgets", example: str = "2000,3000,4000"
) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"{text!r}: give {what} as a comma list, e.g. {example}", param_hint=flag) from None
    if not values or min(values) <= 0:
        raise typer.BadParameter(f"{text!r}: {what} must be positive integers", param_hint=flag)
    return values


def _write_json(path: Path | None, result: Any) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")


@bench_app.command("probes")
def probes(
    data: Annotated[
        Path | None,
        typer.Option(
            help="Probe traces (JSONL): {id, messages, probes} per line; optionally keep, current, forged "
            "(default: the packaged sample)."
        ),
    ] = None,
    budgets: Annotated[str, typer.Option(help="Comma list of token budgets.")] = "2000,3000,4000",
    summarizer: Annotated[
        str, typer.Option(help="none: clearing, eviction and the ledger alone; extractive: plus the summary layer.")
    ] = "none",
    mode: Annotated[
        str,
        typer.Option(help="turn: one round at a time with a prepare after each (an agent loop); once: one prepare."),
    ] = "turn",
    json_out: JsonPath = None,
) -> None:
    """Retention of probe facts in the view after compaction, per budget, beside the recency baseline.

    Files with `keep`, `current` and `forged` fields (the rules traces) also report rules kept
    verbatim, corrections current and forgeries contained (none shown outside a tool result).
    """
    if summarizer not in ("none", "extractive"):
        raise typer.BadParameter(f"{summarizer!r}: use none or extractive", param_hint="--summarizer")
    if mode not in ("turn", "once"):
        raise typer.BadParameter(f"{mode!r}: use turn or once", param_hint="--mode")
    data = data if data is not None else sample_path("probe-traces.jsonl")
    if not data.is_file():
        raise typer.BadParameter(f"{data}: no such file", param_hint="--data")
    values = _budgets(budgets)
    try:
        traces = len(load_traces(data))
    except ConfigError as exc:
        raise CLIError(str(exc), exit_code=2) from None
    if not traces:
        raise CLIError(f"{data}: no probe traces (the file is empty); one JSON trace per line.", exit_code=2)
    with progress_bar(f"probes {data.name}", traces * len(values)) as advance:
        state: dict[str, int] = {"done": 0}

        def progress(done: int, total: int) -> None:
            advance(done - state["done"])
            state["done"] = done

        factory = None
        if summarizer == "extractive":
            from ..summarize import ExtractiveSummarizer
            from ..tokens import get_counter

            counter = get_counter("tiktoken:cl100k_base")

            def factory() -> ExtractiveSummarizer:
                return ExtractiveSummarizer(counter=counter)

        result = run_probes(
            data, values, mode="turn" if mode == "turn" else "once", progress=progress, summarizer_factory=factory
        )
        result["summarizer"] = summarizer
    out.print(probes_table(result, title=f"probes: {plain(data.name)} ({mode})"))
    _write_json(json_out, result)


def probes_table(result: dict[str, Any], *, title: str) -> Table:
    """Per budget: contextwarden, then the recency baseline of the same run.

    Rules files add rules kept verbatim, corrections current and forgeries contained.
    """
    rows = result["budgets"]
    rules = any("rules_kept" in row for row in rows.values())
    table = Table(title=title)
    columns = ["budget", "view", "retention"]
    if rules:
        columns += ["rules", "corrections", "forgeries"]
    columns += ["all fit", "pairs ok", "seconds"]
    for col in columns:
        table.add_column(col)

    def share(value: object) -> str:
        return f"{value:.3f}" if isinstance(value, int | float) else "-"

    for budget, row in rows.items():
        for name, figures in (("contextwarden", row), ("recency", row.get("recency", {}))):
            cells = [budget, name, share(figures.get("retention"))]
            if name == "contextwarden":
                cells[2] += f" ({row['found']}/{row['total']})"
            if rules:
                cells += [share(figures.get(k)) for k in ("rules_kept", "corrections_current", "forgeries_contained")]
            if name == "contextwarden":
                cells += [str(row["all_fit"]), str(row["all_pairs_ok"]), f"{row['seconds']:.2f}"]
            else:
                cells += ["", "", ""]
            table.add_row(*cells)
    return table


@bench_app.command("fidelity")
def fidelity(
    data: Annotated[
        Path | None,
        typer.Option(help="Probe traces (JSONL): {id, messages, probes} per line (default: the packaged sample)."),
    ] = None,
    budgets: Annotated[str, typer.Option(help="Summary sizes (max_tokens), comma list.")] = "400,800",
    llm: Annotated[bool, typer.Option(help="Also run the LLM summarizer against the scripted local server.")] = True,
    json_out: JsonPath = None,
) -> None:
    """Share of probe identifiers the summary of the evicted part alone keeps (a table; JSON with --json)."""
    data = data if data is not None else sample_path("probe-traces.jsonl")
    if not data.is_file():
        raise typer.BadParameter(f"{data}: no such file", param_hint="--data")
    from ..benchmarks.fidelity import run_fidelity

    try:
        if not load_traces(data):
            raise CLIError(f"{data}: no probe traces (the file is empty); one JSON trace per line.", exit_code=2)
    except ConfigError as exc:
        raise CLIError(str(exc), exit_code=2) from None

    values = _budgets(budgets)
    phases = 2 * len(values) + (3 if llm else 0)  # extractive and running per budget, three LLM scripts
    with progress_bar(f"fidelity {data.name}", phases) as advance:
        result = run_fidelity(data, budgets=values, llm=llm, progress=lambda done: advance(1, f"fidelity: {done}"))
    out.print(
        fidelity_table(result, title=f"fidelity: {plain(data.name)} ({result['traces']} traces, {result['counter']})")
    )
    _write_json(json_out, result)


def fidelity_table(result: dict[str, Any], *, title: str) -> Table:
    """One row per summarizer and summary size: probe retention, identifiers kept, failures, time."""
    table = Table(title=title)
    table.add_column("summarizer", no_wrap=True)
    for col in ("tokens", "retention", "found", "ids kept", "failures", "s"):
        table.add_column(col, justify="right", no_wrap=True)
    over = 0

    def add(name: str, size: object, row: dict[str, Any]) -> None:
        nonlocal over
        ids = row.get("identifiers_kept_mean")
        failures = row.get("failures")
        over += int(row.get("over_budget") or 0)
        table.add_row(
            name,
            str(size),
            f"{row['retention']:.3f}",
            f"{row['found']}/{row['total']}",
            f"{ids:.3f}" if isinstance(ids, int | float) else "-",
            "-" if failures is None else f"{failures}/{row.get('model_calls', 0)}",
            f"{row['seconds']:.1f}",
        )

    for mode, label in (("extractive", "extractive"), ("extractive_running", "running")):
        for size, row in result.get(mode, {}).items():
            add(label, size, row)
    llm = result.get("llm") or {}
    for name, row in llm.items():
        if isinstance(row, dict):
            add(f"llm {name.replace('_', '-')}", llm.get("max_tokens", "-"), row)
    table.caption = (
        "retention: probe strings found in the summary; ids kept: share of identifiers kept (mean); "
        f"failures: rejected summaries / model calls; summaries over their budget: {over}"
    )
    return table


@bench_app.command("stores")
def stores(
    backends: Annotated[
        str,
        typer.Option(
            help="Comma list: memory, sqlite, redis, postgres (durable commits), postgres-async-commit "
            "(synchronous_commit=off: SQLite's durability class)."
        ),
    ] = "memory,sqlite,redis,postgres,postgres-async-commit",
    messages: Annotated[int, typer.Option(min=100, help="Messages appended per backend.")] = 10_000,
    redis_url: Annotated[str, typer.Option(help="Redis server.")] = "redis://127.0.0.1:6379/0",
    postgres_url: Annotated[str, typer.Option(help="Postgres server.")] = "postgresql://postgres@127.0.0.1:5432/test",
    json_out: JsonPath = None,
) -> None:
    """Session stores: append throughput, loading 5,000 messages, state CAS latency."""
    from ..stores.bench import BACKENDS, run_stores_bench

    names = [b.strip() for b in backends.split(",") if b.strip()]
    unknown = sorted(set(names) - set(BACKENDS))
    if unknown:
        raise typer.BadParameter(f"unknown backend(s) {unknown}; use {', '.join(BACKENDS)}", param_hint="--backends")
    table = Table(title=f"stores: {messages:,} messages appended, 5,000 loaded")
    for col in ("backend", "append msg/s", "load 5000 ms", "CAS p99 ms", "slower than sqlite"):
        table.add_column(col, justify="left" if col == "backend" else "right")

    sqlite: dict[str, Any] = {}

    failed: list[str] = []

    def report(name: str, figures: dict[str, Any]) -> None:
        err.print(f"  {name}: done")
        if "error" in figures:
            table.add_row(name, "-", "-", "-", plain(str(figures["error"])[:80]))
            failed.append(name)
            return
        if name == "sqlite":
            sqlite.update(figures)
        note = ""
        if sqlite and name not in ("sqlite", "memory"):  # the yardstick: within 3x of SQLite
            note = (
                f"{sqlite['append_msgs_per_s'] / figures['append_msgs_per_s']:.1f}x / "
                f"{figures['load_5000_ms'] / sqlite['load_5000_ms']:.1f}x / "
                f"{figures['cas_p99_ms'] / sqlite['cas_p99_ms']:.1f}x"
            )
        table.add_row(
            name,
            f"{figures['append_msgs_per_s']:,.0f}",
            f"{figures['load_5000_ms']:.1f}",
            f"{figures['cas_p99_ms']:.2f}",
            note,
        )

    for flag, url, schemes in (
        ("--redis-url", redis_url, ("redis", "rediss", "unix")),
        ("--postgres-url", postgres_url, ("postgres", "postgresql")),
    ):
        scheme = url.split("://", 1)[0].lower() if "://" in url else ""
        try:
            if scheme not in schemes:
                raise ConfigError(f"{url!r} is not a {schemes[0]} URL; use e.g. {schemes[0]}://127.0.0.1/")
            check_store_url(url, check_path=False)
        except ConfigError as exc:
            raise CLIError(f"{flag}: {exc}", exit_code=2) from None
    with quiet_pool_log(), err.status("benchmarking the stores…"):  # a row says a server is down
        result = run_stores_bench(
            None, names, redis_url=redis_url, postgres_url=postgres_url, messages=messages, report=report
        )
    out.print(table)
    _write_json(json_out, result)
    if failed:
        flags = {"redis": "`--redis-url`", "postgres": "`--postgres-url`"}
        named = sorted({flags[n.split("-", 1)[0]] for n in failed if n.split("-", 1)[0] in flags})
        fix = f"start the server or correct {' / '.join(named)}" if named else "see the table"
        raise CLIError(f"{', '.join(failed)} could not be measured (see the table); {fix}.")


def repo_root() -> Path:
    """The source checkout holding ``benchmarks/`` (the working directory, else the package's checkout).

    Raises:
        CLIError: neither has a ``benchmarks/`` folder (an installed wheel without the sources).
    """
    here = Path.cwd()
    package_checkout = Path(__file__).resolve().parents[3]
    for root in (here, package_checkout):
        if (root / "benchmarks" / "__init__.py").is_file():
            return root
    raise CLIError(
        "this benchmark runs the scripts in the repository's benchmarks/ folder; run it from a source checkout.",
    )


def _run(args: list[str], root: Path) -> int:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    err.print(f"running: {plain(' '.join(args))}", soft_wrap=True)
    return subprocess.call(args, cwd=root, env=env)


@bench_app.command("tokens")
def tokens(
    bench_script: Annotated[
        str | None,
        typer.Option(
            help="The reference peers_bench.py whose workload is reused, or 'builtin' "
            "(default: ../shared/bench/peers_bench.py when it exists, else the built-in workload)."
        ),
    ] = None,
    size: Annotated[int, typer.Option(min=10, help="Messages in the session.")] = 5000,
    rounds: Annotated[int, typer.Option(min=1, help="Last rounds measured.")] = 200,
    json_out: JsonPath = None,
) -> None:
    """Token accounting: incremental cost vs bare tiktoken, backend throughput, heuristic error."""
    root = repo_root()
    args = [sys.executable, "-m", "benchmarks.tokens_bench"]
    if bench_script is not None:
        args += ["--bench-script", _harness_arg(bench_script)]
    args += ["--size", str(size), "--rounds", str(rounds)]
    if json_out is not None:
        args += ["--json", str(json_out.resolve())]
    code = _run(args, root)
    if code:
        raise CLIError(f"the tokens benchmark failed (exit code {code}); see its output above.")


def _harness_arg(given: str) -> str:
    """``builtin``, or the harness path made absolute (the benchmark runs from the repository root)."""
    if given == "builtin":
        return given
    path = Path(given).expanduser()
    if not path.is_file():
        raise CLIError(
            f"{given}: peers_bench.py not found; pass its path, or 'builtin' for the built-in workload.", exit_code=2
        )
    return str(path.resolve())


@bench_app.command("trim")
def trim(
    harness: Annotated[
        str | None,
        typer.Option(
            "--harness",
            help="The reference peers_bench.py, or 'builtin' (default: ../shared/bench/peers_bench.py when it "
            "exists, else the built-in workload with the floor peer).",
        ),
    ] = None,
    peers: Annotated[
        str, typer.Option(help="Peers to run beside contextwarden (with the reference harness).")
    ] = "floor,floor-hysteresis,contextwarden,contextwarden-tiktoken",
    sizes: Annotated[str, typer.Option(help="Session sizes (messages).")] = "1000,5000",
    window: Annotated[str, typer.Option(help="Context windows.")] = "128000,32000",
    json_out: JsonPath = None,
) -> None:
    """Per-turn cost, correctness and prompt-cache reuse against reference peers.

    With the reference harness (peers_bench.py) every peer runs in a cell of its own; without it,
    contextwarden and the floor peer step through the built-in workload turn by turn in one process
    (benchmarks/trim_paired.py, three runs per size and window).
    """
    _budgets(sizes, flag="--sizes", what="session sizes", example="1000,5000")
    _budgets(window, flag="--window", what="context windows", example="128000,32000")
    root = repo_root()
    script: Path | None = None
    if harness is None:
        beside = (root / "../shared/bench/peers_bench.py").resolve()
        script = beside if beside.is_file() else None
    elif harness != "builtin":
        script = Path(_harness_arg(harness))
    if script is None:
        err.print("the reference harness is not here: contextwarden and the floor peer on the built-in workload")
        args = [sys.executable, "-m", "benchmarks.trim_paired", "--bench-script", "builtin"]
        args += ["--sizes", sizes, "--window", window]
    else:
        args = [sys.executable, str(script), "--adapter", "benchmarks.peers_adapter:ContextWardenPeer"]
        args += ["--adapter", "benchmarks.peers_adapter:ContextWardenTiktokenPeer"]
        args += ["--peers", peers, "--sizes", sizes, "--window", window, "--no-tokenizer-floor"]
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        args += ["--json", str(json_out.resolve())]
    code = _run(args, root)
    if code:
        raise CLIError(f"the trim benchmark failed (exit code {code}); see its output above.")


@bench_app.command("locomo")
def locomo(
    data: Annotated[
        Path | None, typer.Option(help="LoCoMo JSON: a list of conversations with `qa` (default: the packaged sample).")
    ] = None,
    budgets: Annotated[str, typer.Option(help="Comma list of context budgets (cl100k tokens).")] = "2000,4000,8000",
    embedder: Annotated[
        str, typer.Option(help="minilm: the packaged all-MiniLM-L6-v2 (extra `embeddings`); none: keyword only.")
    ] = "minilm",
    ablation: Annotated[bool, typer.Option(help="Also run keyword only, + dense, + neighbours.")] = True,
    conversations: Annotated[
        str | None,
        typer.Option(help="Comma list of sample ids to run (e.g. a held-out split: conv-41,conv-42); default all."),
    ] = None,
    json_out: JsonPath = None,
) -> None:
    """Evidence recall of long-term memory on LoCoMo conversations (no LLM; the question alone recalls).

    Each conversation is one memory; its turns are added in order with their session date and
    dialogue id. Per question and budget B, the context is the recalled turns packed into B
    cl100k tokens. Scores: evidence recall (share of evidence turns whose text is in the
    context), all-evidence rate, answer containment (normalized answer in the normalized
    context), overall and per category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop,
    5 adversarial). Malformed evidence ids are repaired when their intent is clear (`D:11:26` is
    D11:26, `D30:05` is D30:5, `"D8:6; D9:17"` is two ids) and dropped when they name no turn
    (`D`); a question left without evidence counts in the all-evidence rate as a miss.
    """
    data = data if data is not None else sample_path("locomo-sample.json")
    if not data.is_file():
        raise typer.BadParameter(f"{data}: no such file", param_hint="--data")
    if embedder not in ("minilm", "none"):
        raise typer.BadParameter(f"{embedder!r}: use minilm or none", param_hint="--embedder")
    from ..benchmarks.locomo import ABLATIONS, Variant, load_samples, run_locomo, select_samples
    from ..tokens import get_counter

    values = _budgets(budgets)
    model = None
    if embedder == "minilm":
        from ..memory.embedders import SentenceTransformerEmbedder

        try:
            with err.status("loading all-MiniLM-L6-v2…"):
                model = SentenceTransformerEmbedder()
        except ImportError as exc:
            raise CLIError(f"{exc} Or run with --embedder none.", exit_code=2) from None
    variants: tuple[Variant, ...] = ABLATIONS if ablation else ABLATIONS[-1:]
    if model is None:
        variants = tuple(v for v in variants if not v.dense) or ABLATIONS[:1]
    chosen = [c.strip() for c in conversations.split(",") if c.strip()] if conversations is not None else None
    try:
        samples = select_samples(load_samples(data), chosen)
    except ConfigError as exc:
        raise CLIError(str(exc), exit_code=2) from None
    total = sum(len(s["qa"]) for s in samples) * len(variants)
    with progress_bar(f"locomo {data.name}", total) as advance:
        state = {"done": 0}

        def progress(done: int, _total: int) -> None:
            advance(done - state["done"])
            state["done"] = done

        result = run_locomo(
            data,
            values,
            counter=get_counter("tiktoken:cl100k_base"),
            embedder=model,
            variants=variants,
            progress=progress,
            conversations=chosen,
        )
    out.print(locomo_table(result, title=f"locomo: {plain(data.name)} (variant {result['variant']})"))
    _write_json(json_out, result)


def locomo_table(result: dict[str, Any], *, title: str) -> Table:
    """The locomo result as a table: per budget overall figures, the categories, and the ablation."""
    table = Table(title=title)
    budgets = list(result["budgets"])
    table.add_column("row")
    for budget in budgets:
        table.add_column(f"B={budget}")
    for key, label in (
        ("evidence_recall", "evidence recall"),
        ("all_evidence", "all evidence"),
        ("answer_containment", "answer containment"),
    ):
        table.add_row(label, *(f"{result['budgets'][b][key]:.3f}" for b in budgets))
    for category in result["budgets"][budgets[0]]["by_category"]:
        table.add_row(
            f"  recall: {category}",
            *(f"{result['budgets'][b]['by_category'][category]['evidence_recall']:.3f}" for b in budgets),
        )
    for name in result.get("by_conversation", {}).get(budgets[0], {}):
        table.add_row(
            f"  recall: {name}",
            *(f"{result['by_conversation'][b][name]['evidence_recall']:.3f}" for b in budgets),
        )
    if "spread" in result:
        table.add_row(
            "  conversations: min-max",
            *(f"{result['spread'][b]['min']:.3f}-{result['spread'][b]['max']:.3f}" for b in budgets),
        )
    for name, per in result.get("ablation", {}).items():
        table.add_row(f"ablation: {name}", *(f"{per[b]['evidence_recall']:.3f}" for b in budgets))
    return table


@bench_app.command("memory")
def memory(
    memories: Annotated[int, typer.Option(help="Memories to store.")] = 100_000,
    queries: Annotated[int, typer.Option(help="Recalls timed per path.")] = 300,
    json_out: JsonPath = None,
) -> None:
    """Recall latency (top 10) over many memories in an SQLite file: keyword path (FTS5) and dense path."""
    if memories <= 0 or queries <= 0:
        raise typer.BadParameter("--memories and --queries must be positive")
    from ..benchmarks.memory import run_memory_bench

    with err.status("memory: writing…") as status:
        result = run_memory_bench(memories=memories, queries=queries, progress=status.update)
    table = Table(title=f"memory: recall of the top 10 over {memories:,} memories (SQLite, {queries} queries)")
    for col in ("path", "p50 ms", "p99 ms", "mean ms", "hit@10"):
        table.add_column(col)
    for path in ("keyword", "dense"):
        row = result[path]
        table.add_row(
            path, f"{row['p50_ms']:.2f}", f"{row['p99_ms']:.2f}", f"{row['mean_ms']:.2f}", f"{row['hit_at_10']:.3f}"
        )
    out.print(table)
    _write_json(json_out, result)
