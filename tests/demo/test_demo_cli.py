"""`contextwarden demo`: the run, the stored session, the report's content, the live view."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rich.console import Console
from typer.testing import CliRunner

from contextwarden.cli import app
from contextwarden.cli.demo import _LiveView
from contextwarden.demo import CompactionRecord, DemoResult, TurnStats
from contextwarden.stores import open_store


def test_demo_results_add_up(demo_run: dict[str, Any]) -> None:
    d = demo_run
    assert d["turns"] == 120 and d["window"] == 16_000
    assert d["budget"] == d["window"] - d["reserved_output"] - d["tool_schemas"]
    assert d["tokens_seen"] > 100_000
    assert d["peak"] <= d["budget"], "every request fits the effective budget"
    assert d["tokens_sent"] < d["tokens_full_history"] / 3
    assert d["compactions_by_layer"].get("clear", 0) > 0 and d["compactions_by_layer"].get("evict", 0) > 0
    assert 0.5 < d["prefix_reuse"] < 1.0
    assert len(d["facts"]) == 10
    assert d["retention"] == sum(f["found"] for f in d["facts"]) / 10
    assert d["snapshots"] > 0


def test_demo_session_is_in_the_store(demo_run: dict[str, Any]) -> None:
    with open_store(demo_run["_store"]) as store:
        info = store.get_session("demo-11")
        assert info.metadata["seed"] == 11
        assert info.message_count == demo_run["messages"]
        saved, version = store.load_state("demo-11", slot="status")  # the figures the session saved
        assert version >= 1 and saved is not None
        assert saved["figures"]["compactions"]
    result = CliRunner().invoke(app, ["inspect", "demo-11", "--store", demo_run["_store"], "--json"])
    assert result.exit_code == 0, result.stderr
    shown = json.loads(result.stdout)["figures"]
    # the demo's budget and the inspected one are the same figures
    assert shown["window"] == demo_run["window"]
    assert shown["effective"] == demo_run["budget"]
    assert shown["tool_schemas"] == demo_run["tool_schemas"]
    assert shown["reserved_output"] == demo_run["reserved_output"]
    assert shown["turn"] == demo_run["turns"]
    assert sum(shown["components"].values()) == shown["used"]


def test_a_rerun_keeps_the_first_session_unless_told_to_replace_it(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'cw.db'}"
    args = ["demo", "--turns", "30", "--no-live", "--json", "--store", store, "--report", str(tmp_path / "r.html")]
    runs = []
    for extra in ([], ["--turns", "40"], ["--replace"]):
        result = CliRunner().invoke(app, args + extra)
        assert result.exit_code == 0, result.stderr
        runs.append(json.loads(result.stdout))
    assert [r["session_id"] for r in runs] == ["demo-7", "demo-7-2", "demo-7"]
    with open_store(store) as st:
        sessions, _ = st.list_sessions()
        assert [s.session_id for s in sessions] == ["demo-7", "demo-7-2"]
        assert st.get_session("demo-7-2").metadata["turns"] == 40
    # same seed, same session: the totals of a rerun are the same
    assert runs[0]["tokens_sent"] == runs[2]["tokens_sent"]
    assert runs[0]["peak"] == runs[2]["peak"]
    assert runs[0]["tokens_seen"] == runs[2]["tokens_seen"]


def test_a_memory_store_is_not_offered_to_inspect(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["demo", "--turns", "30", "--no-live", "--store", "memory://", "--report", str(tmp_path / "r.html")]
    )
    assert result.exit_code == 0, result.stderr
    assert "contextwarden inspect" not in result.stdout
    assert "pass --store to keep the session" in " ".join(result.stdout.split())


def test_report_is_self_contained_with_the_four_charts(demo_run: dict[str, Any]) -> None:
    html = Path(demo_run["_report"]).read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html), "nothing is fetched"
    assert "<script" not in html
    charts = dict(re.findall(r'<svg class="chart" id="chart-[a-z]+" data-chart="([a-z]+)" data-points="(\d+)"', html))
    assert set(charts) == {"utilization", "components", "compactions", "cache", "facts", "memory"}
    assert charts["utilization"] == charts["components"] == charts["cache"] == charts["memory"] == "120"
    assert int(charts["compactions"]) == sum(demo_run["compactions_by_layer"].values())
    # the marks the state uses: the default band's low water and the budget, not fixed thresholds
    assert 'data-threshold="low water"' in html and 'data-threshold="budget"' in html
    for name in ("warning", "error", "critical"):
        assert f'data-threshold="{name}"' not in html
    assert "state rule: band:" in html
    ratio = re.search(r'<polyline data-series="ratio" data-count="120" class="series" points="([^"]+)"', html)
    assert ratio and len(ratio.group(1).split()) == 120
    for series in ("system", "history", "tool_results", "reused", "new", "in-view"):
        assert f'data-series="{series}"' in html
    assert html.count('data-series="event"') == int(charts["compactions"])
    for fact in demo_run["facts"]:
        assert fact["value"].replace("'", "&#x27;") in html
    assert f"{demo_run['prefix_reuse']:.1%}" in html
    assert "tokens seen" in html and f"{demo_run['tokens_seen']:,}" in html


def test_report_shows_each_recall_with_what_it_brought_back(demo_run: dict[str, Any]) -> None:
    recalls = demo_run["recalls"]
    assert recalls and all(r["memories"] and r["tokens"] > 0 and r["query"] for r in recalls)
    assert [r["turn"] for r in recalls] == sorted(r["turn"] for r in recalls)
    for memory in (m for r in recalls for m in r["memories"]):
        # provenance: the source, the ledger step or message id, time and score, and the message ids
        assert memory["label"].startswith("[") and " · score " in memory["label"] and memory["message_ids"]
    final = recalls[-1]
    assert final["turn"] == demo_run["turns"], "the closing question recalls"
    kept = [f["value"] for f in demo_run["facts"] if f["found"]]
    brought = [v for v in kept if any(v in m["text"] for m in final["memories"])]
    assert brought, "the last recall brings back planted facts"
    html = Path(demo_run["_report"]).read_text(encoding="utf-8")
    assert html.count("<tr data-turn=") == len(recalls)
    assert (
        'data-series="recalled"' in html
        and f'data-series="recalls" data-count="{len({r["turn"] for r in recalls})}"' in html
    )
    assert html.count("<li><code>[") == sum(len(r["memories"]) for r in recalls)


def test_live_view_renders_gauge_layer_and_events() -> None:
    result = DemoResult(
        seed=1, model="gpt-4o", window=32_000, reserved_output=8000, tool_schemas=0, budget=24_000,
        thresholds={"warning": 0.7, "error": 0.9, "critical": 0.95}, high_water=1.0, low_water=0.5,
        session_id="demo-1", store_url="memory://", summarizer="none",
    )  # fmt: skip
    view = _LiveView(turns=10, result=result)
    stats = TurnStats(
        turn=4, used=22_000, budget=24_000, ratio=0.9167, state="error", layer="evict",
        breakdown={"system": 100}, view_messages=12, reused=20_000, sent=22_000, transcript_tokens=50_000,
        facts_planted=3, facts_in_view=2, prepare_ms=1.0,
    )  # fmt: skip
    result.turns.append(stats)
    event = CompactionRecord(
        turn=4, layer="evict", trigger="high-water", before=30_000, after=22_000, items=3, duration_ms=2.5
    )
    result.compactions.append(event)
    view.update(stats, [event])
    console = Console(record=True, width=200, color_system=None)
    console.print(view)
    text = console.export_text()
    assert "22,000 / 24,000 tokens (92%) error" in text
    assert "current layer: evict" in text
    assert "30,000 → 22,000 (−8,000)" in text
    assert "turn 4/10" in text and "facts in view 2/3" in text
