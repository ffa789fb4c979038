"""The built-in trim workload: the benchmarks' sessions, counts, floor peer and view checks."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
from benchmarks.workload import BuiltinWorkload, load_workload

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def workload() -> BuiltinWorkload:
    return BuiltinWorkload()


@pytest.fixture(scope="module")
def enc(workload: BuiltinWorkload) -> object:
    return workload.get_encoding()


def test_same_seed_same_prefix_at_every_size(workload: BuiltinWorkload) -> None:
    small, small_rounds = workload.build_conversation(300, 5)
    large, large_rounds = workload.build_conversation(900, 5)
    assert len(small) >= 300 and len(large) >= 900
    assert large[: len(small)] == small
    assert large_rounds[: len(small_rounds)] == small_rounds
    other, _ = workload.build_conversation(300, 6)
    assert other != small


def test_rounds_cover_the_session_and_pair_every_call(workload: BuiltinWorkload) -> None:
    msgs, rounds = workload.build_conversation(600, 1)
    assert rounds[0] == (0, 1) and msgs[0]["role"] == "system"
    assert [start for start, _ in rounds[1:]] == [end for _, end in rounds[:-1]]
    assert rounds[-1][1] == len(msgs)
    for start, end in rounds[1:]:
        part = msgs[start:end]
        assert part[0]["role"] == "user" and part[1]["role"] == "assistant"
        calls = [c["id"] for c in part[1]["tool_calls"]]
        assert [m["tool_call_id"] for m in part[2 : 2 + len(calls)]] == calls


@pytest.mark.parametrize("kind", ["prose", "code", "log", "zh"])
def test_text_makers_hit_their_size(workload: BuiltinWorkload, enc: object, kind: str) -> None:
    make = workload.text_makers()[kind]
    rng = random.Random(3)
    for want in (60, 500, 3000):
        got = len(enc.encode_ordinary(make(rng, want)))  # type: ignore[attr-defined]
        assert 0.7 * want <= got <= 1.4 * want, (kind, want, got)


def test_message_tokens_counts_content_and_calls(workload: BuiltinWorkload, enc: object) -> None:
    plain = {"role": "user", "content": "hello world"}
    assert workload.message_tokens(enc, plain) == 4 + 2
    call = {"id": "c1", "name": "grep", "arguments": '{"q": "x"}'}
    with_call = {"role": "assistant", "content": "", "tool_calls": [call]}
    args = len(enc.encode_ordinary(call["arguments"]))  # type: ignore[attr-defined]
    assert workload.message_tokens(enc, with_call) == 4 + 3 + 1 + args


@pytest.mark.parametrize("window", [4_000, 16_000])
def test_floor_peer_keeps_the_longest_fitting_suffix_every_turn(
    workload: BuiltinWorkload, enc: object, window: int
) -> None:
    canon, rounds = workload.build_conversation(400, 2)
    tokens = [workload.message_tokens(enc, m) for m in canon]
    peer = workload.floor_peer()
    id_map = {id(m): [i] for m, [i] in peer.convert(canon)}
    peer.setup(window, enc)
    peer.step(canon[:1])
    for start, end in rounds[1:]:
        view = peer.step(canon[start:end])
        idx = workload.canonical_view(view, id_map, canon, enc, {})
        assert idx is not None
        check = workload.check_context(idx, canon, tokens, window)
        assert check["system_kept"] and check["pairs_ok"]
        if len(idx) > 1:
            assert check["fits"]
            # one round more (the user message before the kept suffix) would not fit
            first_kept = idx[1]
            earlier = [s for s, _ in rounds[1:] if s < first_kept]
            if earlier:
                assert check["tokens"] + sum(tokens[earlier[-1] : first_kept]) > window


def test_check_context_finds_each_fault(workload: BuiltinWorkload, enc: object) -> None:
    canon, _ = workload.build_conversation(40, 0)
    tokens = [workload.message_tokens(enc, m) for m in canon]
    whole = list(range(len(canon)))
    good = workload.check_context(whole, canon, tokens, 10**9)
    assert good["system_kept"] and good["pairs_ok"] and good["fits"]
    assert not workload.check_context(whole[1:], canon, tokens, 10**9)["system_kept"]
    result_index = next(i for i, m in enumerate(canon) if m["role"] == "tool")
    assert not workload.check_context([i for i in whole if i != result_index], canon, tokens, 10**9)["pairs_ok"]
    assert not workload.check_context([i for i in whole if i != result_index - 1], canon, tokens, 10**9)["pairs_ok"]
    assert not workload.check_context(whole, canon, tokens, sum(tokens))["fits"]


def test_canonical_view_counts_what_the_peer_made(workload: BuiltinWorkload, enc: object) -> None:
    canon, _ = workload.build_conversation(20, 0)
    made = {"role": "user", "content": "[context] earlier steps"}
    memo: dict[object, int] = {}
    idx = workload.canonical_view([canon[0], made], {id(canon[0]): [0]}, canon, enc, memo)
    assert idx is not None and idx[0] == 0
    assert idx[1][0] == "new" and idx[1][2] == workload.message_tokens(enc, made)
    assert workload.canonical_view([object()], {}, canon, enc, memo) is None


def test_fit_exponent_reads_a_power_law(workload: BuiltinWorkload) -> None:
    xs = [float(x) for x in range(1000, 20000, 500)]
    assert workload.fit_exponent(xs, [x**0.5 for x in xs], 0) == pytest.approx(0.5)
    assert workload.fit_exponent(xs[:5], [1.0] * 5, 0) is None


def test_a_harness_path_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="builtin"):
        load_workload(str(tmp_path / "peers_bench.py"))
    assert load_workload("builtin").source == "builtin"


def test_trim_and_tokens_benchmarks_run_from_a_clone_on_the_builtin_workload(tmp_path: Path) -> None:
    env = {"PYTHONPATH": f"{ROOT}{':'}{ROOT / 'src'}", "PATH": "/usr/bin:/bin"}
    trim = subprocess.run(
        [sys.executable, "-m", "benchmarks.trim_paired", "--bench-script", "builtin", "--sizes", "300"]
        + ["--window", "8000", "--runs", "1", "--json", str(tmp_path / "trim.json")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert trim.returncode == 0, trim.stderr
    assert "workload: builtin" in trim.stderr and "| 300 | 8000 | 1 |" in trim.stdout
    tokens = subprocess.run(
        [sys.executable, "-m", "benchmarks.tokens_bench", "--bench-script", "builtin", "--size", "200"]
        + ["--rounds", "10", "--reps", "1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert tokens.returncode == 0, tokens.stderr
    assert "count mismatches vs harness: 0" in tokens.stdout
