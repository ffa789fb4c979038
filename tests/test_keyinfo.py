"""keyinfo: identifiers, key lines, salient facts and previews on realistic tool output."""

from __future__ import annotations

import json
import re

from hypothesis import given, settings, strategies as st

from contextwarden.keyinfo import (
    _IDENT_RE,
    extract_identifiers,
    fact_rank,
    json_facts,
    key_lines,
    preview,
    rank_facts,
    salient_facts,
)

LOG = """2024-03-05T12:00:01Z ERROR worker-3 failed to upload /var/data/exports/report_2024_03.csv to https://s3.example.com/bucket/key?x=1
Traceback (most recent call last):
  File "/srv/app/uploader.py", line 42, in upload
    client.put(obj)
botocore.exceptions.ClientError: An error occurred (AccessDenied) when calling the PutObject operation
Invoice INV-2024-0042 total $1234.56 customer cust_8812 order #A77F
retrying in 30s; userId=usr_91f2 requestId 7f3a9c2e-1b2d-4e5f-8a9b-0c1d2e3f4a5b
getUserById returned null for flight TP1234 to LIS on 2024-06-01
"""


def test_extract_identifiers_from_a_log() -> None:
    ids = extract_identifiers(LOG)
    for expected in (
        "2024-03-05T12:00:01Z",
        "worker-3",
        "/var/data/exports/report_2024_03.csv",
        "https://s3.example.com/bucket/key?x=1",
        "/srv/app/uploader.py",
        "botocore.exceptions.ClientError",
        "INV-2024-0042",
        "$1234.56",
        "cust_8812",
        "usr_91f2",
        "7f3a9c2e-1b2d-4e5f-8a9b-0c1d2e3f4a5b",
        "getUserById",
        "TP1234",
        "LIS",
        "2024-06-01",
    ):
        assert expected in ids, expected
    assert len(ids) == len(set(ids))  # no duplicates
    assert ids.index("2024-03-05T12:00:01Z") < ids.index("2024-06-01")  # order of first appearance
    for noise in ("the", "failed", "1", "in", "for"):
        assert noise not in ids


def test_extract_identifiers_limit_and_trailing_punctuation() -> None:
    assert extract_identifiers("see ORD-1, ORD-2; and ORD-3.", limit=2) == ["ORD-1", "ORD-2"]
    assert extract_identifiers("file main.py: ok") == ["main.py"]
    assert extract_identifiers("") == []
    assert extract_identifiers("订单 ORD-5179 已创建 2024-05-13 上海仓库") == ["ORD-5179", "2024-05-13"]


def test_key_lines_of_a_stack_trace() -> None:
    lines = key_lines(LOG)
    assert lines[0].startswith("2024-03-05T12:00:01Z ERROR worker-3")
    assert "Traceback (most recent call last):" in lines
    assert any(line.startswith("botocore.exceptions.ClientError") for line in lines)
    assert not any("getUserById" in line for line in lines)  # a plain line is not a key line
    assert key_lines(LOG, limit=1) == lines[:1]
    long = "x" * 500 + " fatal: out of memory"
    assert key_lines(long, max_line_chars=100) == [long[:100]]
    assert key_lines("all good\nnothing to see") == []
    text = "ok\nWARNING: disk 91% full\nok\nTimeout after 30s contacting db-1\nConnection refused by 10.0.0.7"
    assert key_lines(text) == [
        "WARNING: disk 91% full",
        "Timeout after 30s contacting db-1",
        "Connection refused by 10.0.0.7",
    ]


def test_salient_facts_rank_identifiers_first() -> None:
    facts = salient_facts(LOG, limit=12)
    assert len(facts) == 12
    ranks = [fact_rank(f) for f in facts]
    assert ranks == sorted(ranks)
    assert "INV-2024-0042" in facts and "cust_8812" in facts
    head = salient_facts(LOG, scan_chars=60)
    assert "2024-03-05T12:00:01Z" in head and "INV-2024-0042" not in head  # only the scanned part counts


def test_salient_facts_of_json_use_its_values() -> None:
    doc = {
        "order": {"id": "ORD-991", "total": 129.5, "items": [{"sku": "SKU_77", "qty": 2}]},
        "ok": True,
        "note": None,
        "city": "Lisbon",
        "comment": "x" * 200,
    }
    text = json.dumps(doc)
    facts = salient_facts(text)
    assert {"ORD-991", "SKU_77", "129.5", "Lisbon"} <= set(facts)
    assert "True" not in facts and "None" not in facts and "x" * 200 not in facts
    assert json_facts(text) == ["ORD-991", "129.5", "SKU_77", "2", "Lisbon"]
    assert json_facts("not json") is None and json_facts("[1, 2") is None and json_facts("") is None
    deep = "[" * 5000 + "]" * 5000
    assert json_facts(deep) in (None, [])  # pathological nesting does not crash


def test_fact_rank_and_rank_facts() -> None:
    assert fact_rank("ORD-1") == 0 and fact_rank("/etc/hosts") == 0 and fact_rank("2024-01-02") == 0
    assert fact_rank("SEA") == 1
    assert fact_rank("$1,234.50") == 2  # amounts rank above names...
    assert fact_rank("1234567") == 4 and fact_rank("19:00:00") == 4  # ...bare numbers and clock times below
    assert fact_rank("Lisbon") == 3
    assert fact_rank("lisbon") == 4
    assert fact_rank("yes") == 5 and fact_rank("7") == 5
    assert rank_facts(["lisbon", "SEA", "ORD-1", "SEA", "Lisbon"]) == ["ORD-1", "SEA", "Lisbon", "lisbon"]


def test_preview_keeps_head_and_tail_and_marks_the_elision() -> None:
    text = "\n".join(f"line {i:04d} of the build log" for i in range(500))
    p = preview(text, head_chars=200, tail_chars=100)
    assert p.startswith("line 0000 of the build log")
    assert p.endswith("line 0499 of the build log")
    assert "chars omitted]" in p and len(p) < 400
    omitted = int(p.split("…[")[1].split(" chars")[0])
    head, tail = p.split("\n…[")[0], p.split("]…\n")[1]
    assert omitted == len(text) - len(head) - 100
    assert text.startswith(head) and text.endswith(tail)
    assert "line 0000 of the build log\n" in p  # cut at a line boundary, not inside a line
    assert preview("short text", head_chars=100) == "short text"
    assert preview(text, head_chars=50).endswith("chars omitted]")


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=0, max_size=3000), st.integers(1, 800), st.integers(0, 400))
def test_preview_is_bounded_and_made_of_the_text(text: str, head: int, tail: int) -> None:
    p = preview(text, head_chars=head, tail_chars=tail)
    if len(text) <= head + tail + 40:
        assert p == text
        return
    assert len(p) <= head + tail + 60
    start = p.split("\n…[" if tail else " …[")[0]
    assert text.startswith(start)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=0, max_size=2000))
def test_identifiers_are_substrings_of_the_text(text: str) -> None:
    for ident in extract_identifiers(text):
        assert ident in text
        assert len(ident) >= 2
    for line in key_lines(text):
        assert line in text


def test_phrases_and_commands_are_not_identifiers_but_error_messages_are() -> None:
    assert fact_rank("git status && git log --oneline -12") == 4
    assert fact_rank("638 Elm Street") == 4
    assert fact_rank("LedgerImbalanceError: debit 1791.50 != credit 1791.00") == 1


# The specification the fast pattern must keep: at a position that does not follow a token
# character, a URL, an amount with thousands separators, or a token that holds a digit, "_" or
# "/", starts a code, is camelCase, names a file or an exception. This is the straightforward form
# (it tries every alternative at every token start); the shipped one adds a possessive pre-filter.
_SPEC_TOKEN = r"""[^\s"'`()\[\]{}<>,;=|]"""
_SPEC_EXT = r"(?:py|js|ts|tsx|go|rs|java|rb|c|h|cpp|md|json|yaml|yml|toml|txt|sql|sh|cfg|ini|log|csv)"
_SPEC_RE = re.compile(
    rf"(?<!{_SPEC_TOKEN})(?:https?://[^\s\"'<>)\]]+"
    r"|[$€£]?\b\d{1,3}(?:,\d{3})+(?:\.\d+)?\b"
    rf"|(?=[A-Z][A-Z0-9]{{2}}|{_SPEC_TOKEN}*?(?:[\d_/]|[a-z][A-Z]|\.{_SPEC_EXT}\b"
    rf"|Error\b|Exception\b|Warning\b)){_SPEC_TOKEN}+)"
)
_IDENTISH = st.lists(
    st.sampled_from(
        [*"aZx_/.,:$€1 9-\n\t\"'()=|错误", "Error", "Exception", "https://", ".py", "HTTP", "json", "1,234"]
    ),
    max_size=60,
).map("".join)


@settings(max_examples=400)
@given(_IDENTISH)
def test_fast_identifier_pattern_matches_its_specification(text: str) -> None:
    assert _IDENT_RE.findall(text) == _SPEC_RE.findall(text)
