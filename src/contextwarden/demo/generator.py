"""A seeded generator of a realistic coding-agent session (OpenAI chat messages).

The session: a coding agent fixes a bug in a payments service, then takes on follow-up tasks.
Each turn is what arrives before one model call: an assistant message with tool calls and their
results (file reads, greps, pytest runs with stack traces, shell commands, edits), sometimes
preceded by a user message (some in Chinese). Tool outputs run from a few dozen to a few
thousand tokens, so a 300-turn session holds several hundred thousand tokens.

Facts the agent needs at the end — a file path, a function name, an error string, a ticket id,
a commit, a config value, a customer id, a test id, a URL and a constraint the user gave in
Chinese — are planted in the first turns only and never repeated. The last user message asks
for them without naming them, so whether they survive compaction is a fair test.

Same seed, same session: every choice comes from one `random.Random(seed)`.
"""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass, field
from typing import Any

from .outputs import (
    MODULES,
    NOUNS,
    PACKAGES,
    WORDS,
    docs_zh,
    file_path,
    git_log,
    grep_output,
    hex_digits,
    ident,
    pip_freeze,
    pytest_log,
    python_file,
    sentence,
    traceback_lines,
)

__all__ = ["DemoSession", "PlantedFact", "generate_session"]


@dataclass(frozen=True, kw_only=True)
class PlantedFact:
    """A string the agent needs at the end, planted once early in the session."""

    kind: str
    """path, function, error, ticket, commit, config, customer, test, url or constraint."""
    value: str
    turn: int
    """The turn it was planted in (1-based)."""


@dataclass(frozen=True, kw_only=True)
class DemoSession:
    """The generated session: the system prompt, the turns (lists of OpenAI chat messages), the facts."""

    seed: int
    system: dict[str, Any]
    turns: list[list[dict[str, Any]]]
    facts: list[PlantedFact]
    tools: list[dict[str, Any]] = field(default_factory=list)


# --- vocabulary -----------------------------------------------------------------------------------


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.turns: list[list[dict[str, Any]]] = []
        self.calls = 0

    def call_id(self) -> str:
        self.calls += 1
        return f"call_{self.calls:04d}_" + "".join(self.rng.choice(string.ascii_lowercase) for _ in range(6))

    def turn(self, tools: list[tuple[str, dict[str, Any], str]], *, user: str | None = None, thought: str = "") -> None:
        msgs: list[dict[str, Any]] = []
        if user is not None:
            msgs.append({"role": "user", "content": user})
        calls = [(self.call_id(), name, args, output) for name, args, output in tools]
        msgs.append(
            {
                "role": "assistant",
                "content": thought or None,
                "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                    for cid, name, args, _ in calls
                ],
            }
        )
        for cid, _, _, output in calls:
            msgs.append({"role": "tool", "tool_call_id": cid, "content": output})
        self.turns.append(msgs)


_SYSTEM = """You are a senior software engineer working as an autonomous coding agent in the repository
/app (a payments platform: ledger, billing, refunds, payouts, settlement). You work in small,
verifiable steps: read the code before changing it, run the tests after every change, and keep a
short plan. Tools:

- read_file(path): the file with line numbers.
- grep(pattern, path="."): matching lines as path:line:text.
- run_tests(args): runs pytest with the given arguments and returns its output.
- bash(command): runs a shell command in /app and returns stdout and stderr.
- edit_file(path, patch): applies a unified diff to the file.

Rules: never change database schemas without approval; never print secrets; keep commits small
and reference the ticket in the message; when a test fails, read the full traceback before
editing; prefer the smallest fix that makes the failing test pass without breaking others.
When you are done with a task, say so in one paragraph and wait for the next instruction.
""" + "\n".join(
    f"- Convention {i}: {'. '.join(['keep ledger entries immutable once posted'] * 2)}" for i in range(1, 9)
)

TOOL_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": desc,
            "parameters": {"type": "object", "properties": {p: {"type": "string"} for p in params}, "required": params},
        },
    }
    for name, desc, params in (
        ("read_file", "Read a file with line numbers.", ["path"]),
        ("grep", "Search the repository.", ["pattern"]),
        ("run_tests", "Run pytest.", ["args"]),
        ("bash", "Run a shell command.", ["command"]),
        ("edit_file", "Apply a unified diff.", ["path", "patch"]),
    )
]


def generate_session(*, seed: int = 7, turns: int = 300) -> DemoSession:
    """Generate the demo session.

    Args:
        seed: Same seed, same session.
        turns: Number of turns (model calls); at least 30 (the planting phase needs 24).

    Returns:
        The session; ``turns`` lists the messages added before each model call, the last turn
        ending with the user's question that needs the planted facts.
    """
    turns = max(30, turns)
    b = _Builder(seed)
    rng = b.rng
    pkg = rng.choice(PACKAGES)
    bug_path = f"src/{pkg}/reconcile/{rng.choice(('batch_writer', 'posting', 'rounding_rules'))}.py"
    bug_fn = f"_{rng.choice(('apply', 'post', 'split'))}_partial_{rng.choice(('refund', 'reversal', 'credit'))}"
    amount = rng.randint(1000, 9999)
    batch = f"RB-{rng.randint(1000, 9999)}"
    error = f"LedgerImbalanceError: debit {amount}.50 != credit {amount}.00 in batch {batch}"
    ticket = f"PAY-{rng.randint(1000, 9999)}"
    commit = hex_digits(rng, 10)
    config = f"REFUND_GRACE_WINDOW_S={rng.choice((300, 600, 900, 1800))}"
    customer = "cus_" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(10))
    test_id = f"tests/{pkg}/test_reconcile.py::test_partial_refund_rounding_{rng.choice(('eur', 'jpy', 'usd'))}"
    url = f"https://staging-{pkg}.internal:{rng.choice((8443, 9443))}/healthz"
    table = f"settlement_v{rng.randint(2, 4)}"
    facts: list[PlantedFact] = []

    def plant(kind: str, value: str) -> None:
        facts.append(PlantedFact(kind=kind, value=value, turn=len(b.turns) + 1))

    # --- phase 1: the bug (turns 1-24), where the facts are planted ---------------------------------
    plant("ticket", ticket)
    b.turn(
        [("bash", {"command": "git status && git log --oneline -12"}, git_log(rng, 12))],
        user=(
            f"Ticket {ticket}: refunds in the nightly reconciliation job fail for some batches. "
            "Please find the cause and fix it. Start by looking at the recent history."
        ),
        thought="I'll check the repository state and recent commits first.",
    )
    plant("error", error)
    b.turn(
        [
            (
                "bash",
                {"command": "kubectl logs job/reconcile-nightly --tail=80"},
                "\n".join(
                    [
                        f"2025-03-0{rng.randint(1, 9)}T02:{rng.randint(10, 59)}:{rng.randint(10, 59)}Z INFO "
                        f"{ident(rng)} {sentence(rng, 6)}"
                        for _ in range(30)
                    ]
                    + traceback_lines(rng, error, frames=5)
                    + [f"2025-03-04T02:41:{rng.randint(10, 59)}Z ERROR job failed after 3 retries"]
                ),
            )
        ],
        thought="Let me look at the failing job's logs.",
    )
    plant("path", bug_path)
    b.turn(
        [
            (
                "grep",
                {"pattern": "LedgerImbalanceError", "path": "src"},
                grep_output(
                    rng,
                    "LedgerImbalanceError",
                    hits=14,
                    plant=f"{bug_path}:{rng.randint(100, 300)}:    raise LedgerImbalanceError(debit, credit, batch)",
                ),
            )
        ],
        thought="The error is raised somewhere in the ledger code; searching for it.",
    )
    plant("function", bug_fn)
    b.turn(
        [("read_file", {"path": bug_path}, python_file(rng, bug_path, functions=14, plant=bug_fn))],
        thought=f"Reading {bug_path.rsplit('/', 1)[-1]}, where the error is raised.",
    )
    plant("commit", commit)
    b.turn(
        [
            (
                "bash",
                {"command": f"git log -5 --format='%h %an %s' -- {bug_path}"},
                git_log(
                    rng, 5, plant=f"{commit} Mei Chen: switch refund rounding to banker's rounding ({ticket[:4]}-prep)"
                ),
            )
        ],
        thought="Who changed this file recently?",
    )
    plant("constraint", table)
    b.turn(
        [("read_file", {"path": "docs/zh/refunds.md"}, docs_zh(rng))],
        user=(f"补充一下：修复时不要修改 {table} 表的结构，DBA 说这周冻结变更。另外请用中文写 PR 描述的第一段。"),
        thought="Noted: no schema change on that table. Reading the Chinese refund docs for the rounding rules.",
    )
    plant("test", test_id)
    b.turn(
        [
            (
                "run_tests",
                {"args": f"tests/{pkg} -x -q"},
                pytest_log(rng, tests=142, failures=[(test_id, error)], seconds=rng.uniform(8, 20), chinese=True),
            )
        ],
        thought="Running the package's tests to reproduce.",
    )
    plant("config", config)
    b.turn(
        [
            (
                "bash",
                {"command": "cat deploy/staging/reconcile.env"},
                "\n".join(
                    [f"{w.upper()}_{rng.choice(NOUNS).upper()}={rng.randint(1, 500)}" for w in rng.sample(WORDS, 12)]
                    + [config, "LOG_LEVEL=info"]
                ),
            )
        ],
        thought="Checking the job's configuration.",
    )
    plant("customer", customer)
    b.turn(
        [
            (
                "bash",
                {"command": f"psql -c \"select * from refunds where batch_id='{batch}' limit 20\""},
                "\n".join(
                    [
                        "  id  | customer_id  | amount  | currency | status",
                        "------+--------------+---------+----------+--------",
                    ]
                    + [
                        f" {rng.randint(10000, 99999)} | cus_{hex_digits(rng, 10)} | "
                        f"{rng.randint(1, 900)}.{rng.randint(10, 99)} | EUR | settled"
                        for _ in range(10)
                    ]
                    + [f" {rng.randint(10000, 99999)} | {customer} | {amount}.50 | EUR | partial"]
                    + [f"({rng.randint(12, 20)} rows)"]
                ),
            )
        ],
        thought="Looking at the refunds in the failing batch.",
    )
    plant("url", url)
    b.turn(
        [
            (
                "bash",
                {"command": "cat deploy/staging/README"},
                f"Staging reconcile service. Health check: {url}\n" + "\n".join(sentence(rng, 12) for _ in range(8)),
            )
        ],
        thought="How is the staging service checked?",
    )
    # a few more steps on the bug, then the fix and a green run
    for _ in range(8):
        path = file_path(rng)
        b.turn(
            [("read_file", {"path": path}, python_file(rng, path, functions=rng.randint(4, 12)))],
            thought=f"Reading {path} to see how the amounts are split.",
        )
    b.turn(
        [
            (
                "edit_file",
                {
                    "path": bug_path,
                    "patch": "@@ rounding @@\n-    amount.quantize(Decimal('0.1'))\n"
                    "+    amount.quantize(Decimal('0.01'), rounding=ROUND_HALF_EVEN)",
                },
                f"Applied patch to {bug_path} (+3 -1).",
            )
        ],
        thought="The partial refund is rounded to one decimal before the split; fixing the quantum.",
    )
    b.turn(
        [
            (
                "run_tests",
                {"args": f"tests/{pkg} -q"},
                pytest_log(rng, tests=142, failures=[], seconds=rng.uniform(8, 20)),
            )
        ],
        thought="Re-running the tests.",
    )

    # --- phase 2: follow-up tasks, none mentions the planted facts ---------------------------------
    tasks = [
        "Next: the CSV exporter is slow for large accounts; profile it and make it stream.",
        "请检查一下汇率服务的超时配置，看看重试逻辑是否合理。",
        "Add type hints to the payouts client and make mypy pass on that package.",
        "The notify service sends duplicate emails sometimes; find out why.",
        "Upgrade pydantic in the invoices package and fix what breaks.",
        "日志太多了，请把调度器里的调试日志降级，并补充单元测试。",
        "Write tests for the fee calculation edge cases (zero, negative, huge amounts).",
        "The risk rules loader reads the YAML on every request; cache it safely.",
    ]
    last = turns - 1
    while len(b.turns) < last:
        if rng.random() < 0.07:
            user: str | None = rng.choice(tasks)
        else:
            user = None
        roll = rng.random()
        if roll < 0.34:
            path = file_path(rng)
            tool: tuple[str, dict[str, Any], str] = (
                "read_file",
                {"path": path},
                python_file(rng, path, functions=rng.randint(3, 16)),
            )
            thought = f"Reading {path}."
        elif roll < 0.52:
            pattern = ident(rng)
            tool = ("grep", {"pattern": pattern}, grep_output(rng, pattern, hits=rng.randint(3, 40)))
            thought = f"Where is {pattern} used?"
        elif roll < 0.70:
            fails = [
                (
                    f"tests/{rng.choice(PACKAGES)}/test_{rng.choice(MODULES)}.py::test_{ident(rng)}",
                    rng.choice(
                        (
                            "AssertionError: assert Decimal('10.00') == Decimal('10.01')",
                            "TimeoutError: fx rate service did not answer in 2.0s",
                            "KeyError: 'currency'",
                            "TypeError: unsupported operand type(s) for +: 'int' and 'str'",
                        )
                    ),
                )
                for _ in range(rng.choice((0, 0, 1, 2, 3)))
            ]
            tool = (
                "run_tests",
                {"args": f"tests/{rng.choice(PACKAGES)} -q"},
                pytest_log(
                    rng,
                    tests=rng.randint(40, 320),
                    failures=fails,
                    seconds=rng.uniform(3, 60),
                    chinese=rng.random() < 0.3,
                ),
            )
            thought = "Running the tests."
        elif roll < 0.82:
            cmd = rng.choice(("git log --oneline -20", "pip freeze", "git diff --stat", "ls -R src | head -80"))
            output = (
                git_log(rng, 20)
                if cmd.startswith("git log")
                else pip_freeze(rng)
                if cmd == "pip freeze"
                else (
                    "\n".join(
                        f" {file_path(rng)} | {rng.randint(1, 80)} {'+' * rng.randint(1, 20)}{'-' * rng.randint(0, 9)}"
                        for _ in range(rng.randint(5, 40))
                    )
                )
            )
            tool = ("bash", {"command": cmd}, output)
            thought = f"Running `{cmd}`."
        elif roll < 0.92:
            path = file_path(rng)
            tool = (
                "edit_file",
                {"path": path, "patch": f"@@ {ident(rng)} @@\n-    {sentence(rng, 6)}\n+    {sentence(rng, 7)}"},
                f"Applied patch to {path} (+{rng.randint(1, 30)} -{rng.randint(0, 20)}).",
            )
            thought = "Making the change."
        else:
            tool = ("read_file", {"path": f"docs/zh/{rng.choice(PACKAGES)}.md"}, docs_zh(rng))
            thought = "Checking the Chinese docs for this part."
        b.turn([tool], user=user, thought=thought)

    # --- the last turn: the question that needs the facts -----------------------------------------
    b.turns.append(
        [
            {
                "role": "user",
                "content": (
                    "Before we close: write the pull-request description for the reconciliation fix from the "
                    "beginning of this session. Name the ticket, the file and function you changed, the exact "
                    "error message, the failing test, the commit that introduced the bug, the affected customer, "
                    "the config value and health-check URL to verify on staging, and the constraint the DBA gave."
                ),
            }
        ]
    )
    return DemoSession(
        seed=seed,
        system={"role": "system", "content": _SYSTEM},
        turns=b.turns,
        facts=facts,
        tools=TOOL_SCHEMAS,
    )
