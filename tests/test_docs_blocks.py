"""Every ```python block of README.md and of the documentation (docs/**/*.md) runs as written.

Each block runs on its own, in a fresh interpreter. Blocks are found when the test is collected,
so a block added to a page is tested at once. A block that is not meant to run uses another
fence (``text``, ``console``, ``toml``); there is no way to skip a ``python`` block.
Model calls go to `ScriptedOpenAIServer` (a real local HTTP server): the blocks read its address
from ``OPENAI_BASE_URL`` (falling back to a local Ollama address), as a user's script would.
Blocks that use Redis or Postgres reach the local servers of the test suite. Each block runs in an
empty working directory with a private user directory, so blocks cannot lean on one another.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextwarden.messages import ToolCall
from contextwarden.testing import ScriptedOpenAIServer, ScriptedReply

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^```(?P<lang>[^\n`]*)\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)


def python_blocks(text: str) -> list[tuple[int, str, str]]:
    """(line, heading, code) of every ```python block, in README order."""
    blocks = []
    for match in _FENCE.finditer(text):
        if match.group("lang").strip().lower() not in ("python", "py", "python3"):
            continue
        line = text.count("\n", 0, match.start()) + 1
        prose = _FENCE.sub("", text[: match.start()])  # a comment in a code block is not a heading
        headings = re.findall(r"^#+ (.+)$", prose, re.M)
        blocks.append((line, headings[-1] if headings else "top", match.group("body")))
    return blocks


def _page(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


BLOCKS = [
    (_page(path), line, heading, code)
    for path in PAGES
    for line, heading, code in python_blocks(path.read_text(encoding="utf-8"))
]


@pytest.mark.parametrize("path", PAGES, ids=_page)
def test_the_finder_sees_every_python_fence(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    opened = len(re.findall(r"^```(python|py|python3)[ \t]*$", text, re.M))
    assert opened == len(python_blocks(text))


def test_the_readme_and_the_docs_have_python_blocks() -> None:
    assert sum(1 for block in BLOCKS if block[0] == "README.md") >= 1
    assert len(BLOCKS) >= 20


def _answer(body: dict[str, Any]) -> ScriptedReply | str:
    """A model: calls the first tool it is offered when a user just spoke, otherwise answers."""
    tools = body.get("tools") or []
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    if tools and last.get("role") == "user":
        tool = tools[0].get("function", tools[0])
        call = ToolCall(call_id=f"call_{uuid.uuid4().hex[:8]}", name=tool["name"], arguments=json.dumps({}))
        return ScriptedReply(tool_calls=[call])
    return "Done: PUT is idempotent, and the failing test passes now."


@pytest.fixture(scope="module")
def model_server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(default=_answer) as server:
        yield server


@pytest.mark.parametrize(("page", "line", "heading", "code"), BLOCKS, ids=[f"{b[0]}:{b[1]}" for b in BLOCKS])
def test_block_runs_as_written(
    page: str, line: int, heading: str, code: str, model_server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    script = tmp_path / f"block_line{line}.py"
    script.write_text(code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONTEXTWARDEN_", "OPENAI_"))}
    env.update(
        OPENAI_BASE_URL=model_server.base_url,
        CONTEXTWARDEN_HOME=str(tmp_path / "home"),
        PYTHONPATH=str(ROOT / "src"),
    )
    result = subprocess.run(
        [sys.executable, script.name],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, f"{page} block at line {line} ({heading}) failed:\n{result.stderr[-3000:]}"


def _cli_rows(text: str) -> list[tuple[list[str], list[str]]]:
    """(command words, flags) of every `contextwarden ...` row of a command table."""
    rows = []
    for cell in re.findall(r"^\| `(contextwarden [^`]+)`", text, re.M):
        words = cell.split()[1:]
        command = []
        for word in words:
            if not re.fullmatch(r"[a-z][a-z-]*", word):
                break
            command.append(word)
        rows.append((command, sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", cell)))))
    return rows


CLI_ROWS = [row for path in PAGES for row in _cli_rows(path.read_text(encoding="utf-8"))]


@pytest.mark.parametrize(("command", "flags"), CLI_ROWS, ids=[" ".join(r[0]) for r in CLI_ROWS])
def test_command_tables_match_the_cli(command: list[str], flags: list[str]) -> None:
    from typer.testing import CliRunner

    from contextwarden.cli import app

    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, (command, result.output)
    for flag in flags:
        assert flag in result.output, f"`contextwarden {' '.join(command)}` has no {flag} (a command table in the docs)"
