"""CLI transcript files: ``contextwarden count FILE`` and ``contextwarden compact FILE``.

A hostile file (messages in any format, mutated; JSONL; a request body; invalid JSON, invalid
UTF-8, nesting thousands deep) ends in exit code 0, 1 or 2 with one ``error:`` line, never in an
unexpected Python error. A compacted view that ``compact`` writes is valid for the provider and
within the budget it reports.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hypothesis import example, given, strategies as st
from typer.testing import CliRunner

from contextwarden import toolpairs
from contextwarden.adapters import Format, anthropic as anthropic_adapter, to_messages
from contextwarden.cli import app

from ._harness import Failed, fuzz_settings, probe
from ._messages import anthropic_message, openai_message, responses_item
from ._strategies import hostile_json_text, lenient_dumps, mutated

messages = st.one_of(
    st.lists(openai_message, min_size=1, max_size=4),
    st.lists(responses_item, min_size=1, max_size=4),
    st.lists(anthropic_message, min_size=1, max_size=4),
    st.lists(mutated(st.one_of(openai_message, responses_item, anthropic_message), max_mutations=1), max_size=4),
)


def _shapes(items: list[Any]) -> st.SearchStrategy[bytes]:
    text = lenient_dumps(items)
    return st.sampled_from(
        [
            text,
            "\n".join(lenient_dumps(m) for m in items),
            lenient_dumps({"model": "gpt-4o", "messages": items}),
            lenient_dumps({"input": items}),
            lenient_dumps({"system": "be brief", "messages": items}),
            text[: len(text) // 2],
        ]
    ).map(lambda t: t.encode("utf-8", "surrogatepass"))


transcript_files = st.one_of(
    messages.flatmap(_shapes),
    hostile_json_text.map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.sampled_from([b"", b"\xff\xfe\x00", b"[\xc3]", b"\x00" * 10, b'[{"role": "user", "content": "\xed\xa0\xbd"}]']),
)

_SUMMARY = re.compile(r"→ [\d,]+ messages \(([\d,]+) tokens\).*?; budget ([\d,]+)")


def _check_exit(entry: str, result: Any) -> None:
    output = result.output + (result.stderr if result.stderr_bytes is not None else "")
    if result.exit_code not in (0, 1, 2):
        probe.raw(entry, f"exit code {result.exit_code}: {output[-300:]!r}")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        probe.raw(entry, f"{type(result.exception).__name__}: {result.exception}")
    if "unexpected" in output or "Traceback" in output:
        probe.raw(entry, output[-400:])


def test_cli_transcript_files(tmp_path: Path) -> None:
    runner = CliRunner()
    path = tmp_path / "transcript.json"

    @fuzz_settings(25)
    @given(raw=transcript_files)
    # a Responses body whose user item holds a block of another format: kept as it came, read back as Responses
    @example(raw=b'{"input": [{"role": "user", "content": [{"type": "thinking", "thinking": "", "signature": null}]}]}')
    def run(raw: bytes) -> None:
        path.write_bytes(raw)
        probe.count("contextwarden count")
        _check_exit("contextwarden count", runner.invoke(app, ["count", str(path), "--model", "gpt-4o"]))
        probe.count("contextwarden compact")
        result = runner.invoke(app, ["compact", str(path), "--window", "3000", "--model", "gpt-4o"])
        _check_exit("contextwarden compact", result)
        if result.exit_code != 0:
            return
        _check_view("contextwarden compact", result)

    run()


def _check_view(entry: str, result: Any) -> None:
    """The written view is a transcript of the same format that is valid and within the reported budget."""
    try:
        doc = json.loads(result.stdout)
    except ValueError:  # JSONL in, JSONL out
        doc = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    fmt: Format | None = None
    if isinstance(doc, dict):
        items = doc.get("messages", doc.get("input"))
        system = doc.get("system")
        if "messages" not in doc and "input" in doc:
            fmt = "responses"  # a Responses request, as the CLI read it (not found by its items' shape)
    else:
        items, system = doc, None
    try:
        if system is not None:
            view = anthropic_adapter.to_messages(items, system=system)
        else:
            view = to_messages(items, format=fmt)
    except Exception as exc:
        raise Failed(f"{entry}: the written view cannot be read back: {exc!r}") from exc
    problems = toolpairs.validate(view)
    found = _SUMMARY.search(result.stderr)
    over = found is not None and int(found[1].replace(",", "")) > int(found[2].replace(",", ""))
    probe.view_ok(entry, view, None)
    if problems or over:
        raise Failed(f"{entry}: the written view is invalid or over budget: {problems[:2]} {result.stderr[-200:]}")
