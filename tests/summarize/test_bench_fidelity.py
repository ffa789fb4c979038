"""The fidelity benchmark (contextwarden.benchmarks.fidelity) on a small synthetic probe file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contextwarden.adapters import from_messages
from contextwarden.benchmarks.fidelity import evicted_part, main, run_fidelity
from contextwarden.messages import Message

from ._histories import coding_session, support_history


@pytest.fixture
def probe_file(tmp_path: Path) -> Path:
    support = [Message.system("You are a logistics agent."), *support_history(), Message.user("Thanks, yes please.")]
    coding, facts = coding_session(8)
    rows = [
        {
            "id": "support",
            "messages": from_messages(support, format="openai"),
            "probes": ["ORD-48213", "WH_BERLIN_01", "TR-5521", "PL-7781", "2024-06-14", "Thanks, yes please."],
        },
        {"id": "coding", "messages": from_messages(coding, format="openai"), "probes": [facts["error"], facts["url"]]},
    ]
    path = tmp_path / "probes.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_evicted_part_leaves_out_system_and_last_round() -> None:
    msgs = [Message.system("sys"), *support_history(), Message.user("last")]
    part = evicted_part(msgs)
    assert part[0].message_id == "m1" and part[-1].message_id == "m8"
    assert evicted_part([Message.system("sys"), Message.user("only")]) == []


def test_run_fidelity(probe_file: Path) -> None:
    result = run_fidelity(probe_file, budgets=[300, 800])
    assert result["traces"] == 2 and result["counter"] == "tiktoken:cl100k_base"
    for mode in ("extractive", "extractive_running"):
        for budget in ("300", "800"):
            row = result[mode][budget]
            assert row["over_budget"] == 0
            assert row["total"] == 8 and row["reachable"] == 7  # the last message is not evicted
    assert result["extractive"]["800"]["retention_reachable"] == 1.0
    llm = result["llm"]
    assert llm["faithful"]["failures"] == 0 and llm["faithful"]["http_requests"] == 2
    assert llm["lossy"]["failures"] == 2 and llm["lossy"]["sources"] == {"repaired": 2}
    assert llm["map_reduce"]["map_reduce_traces"] >= 1
    assert llm["lossy"]["retention_reachable"] >= 0.85  # restored from the extractive key data


def test_main_writes_json(probe_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out" / "fidelity.json"
    assert main(["--data", str(probe_file), "--budgets", "400", "--json", str(out), "--no-llm"]) == 0
    written = json.loads(out.read_text())
    assert "llm" not in written and written["extractive"]["400"]["total"] == 8
    printed = json.loads(capsys.readouterr().out)
    assert "misses" not in printed["extractive"]["400"]
    with pytest.raises(SystemExit):
        main(["--data", str(tmp_path / "missing.jsonl")])
