"""The tool outputs a coding agent reads in the demo session: Python files, grep hits, pytest logs with
tracebacks, git logs, pip freeze and Chinese docs, each drawn from the generator's one `random.Random`.
"""

from __future__ import annotations

import random

__all__ = [
    "MODULES",
    "NOUNS",
    "PACKAGES",
    "TYPES",
    "VERBS",
    "WORDS",
    "ZH",
    "docs_zh",
    "file_path",
    "git_log",
    "grep_output",
    "hex_digits",
    "ident",
    "pip_freeze",
    "pytest_log",
    "python_file",
    "sentence",
    "traceback_lines",
]

PACKAGES = ("ledger", "billing", "payouts", "refunds", "invoices", "settlement", "fx", "accounts", "risk", "notify")
MODULES = (
    "reconcile",
    "batch_writer",
    "models",
    "service",
    "handlers",
    "schemas",
    "repository",
    "rounding",
    "scheduler",
    "exporter",
    "client",
    "validators",
)
VERBS = ("apply", "compute", "load", "validate", "merge", "emit", "flush", "resolve", "split", "normalize", "post")
NOUNS = (
    "refund",
    "batch",
    "entry",
    "payout",
    "invoice",
    "balance",
    "currency",
    "window",
    "ledger_line",
    "adjustment",
    "fee",
    "settlement",
)
TYPES = ("Decimal", "int", "str", "datetime", "list[Entry]", "dict[str, Decimal]", "Batch | None", "bool")
WORDS = (
    "the",
    "batch",
    "refund",
    "entry",
    "is",
    "posted",
    "before",
    "after",
    "rounding",
    "currency",
    "amount",
    "when",
    "ledger",
    "we",
    "must",
    "keep",
    "idempotent",
    "retry",
    "window",
    "partial",
    "settled",
    "value",
    "check",
    "line",
    "total",
    "debit",
    "credit",
    "per",
    "account",
    "order",
)
ZH = (
    "这个批次在对账时出现了不平衡，需要先确认借方和贷方的舍入规则。",
    "测试环境的数据库昨天做过迁移，部分索引可能还没有重建。",
    "退款流程分为三步：冻结、冲正、入账，每一步都要写审计日志。",
    "请在修改之前先跑一遍完整的测试，特别是对账相关的用例。",
    "日志里显示重试了三次，但幂等键没有变化，说明客户端没有问题。",
    "汇率服务偶尔超时，我们在调度器里加了指数退避。",
    "这个接口的响应时间在高峰期超过两秒，需要看一下慢查询。",
    "文档需要同步更新，尤其是部分退款的示例。",
)


def ident(rng: random.Random) -> str:
    return f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}"


def file_path(rng: random.Random) -> str:
    return f"src/{rng.choice(PACKAGES)}/{rng.choice(MODULES)}.py"


def sentence(rng: random.Random, n: int) -> str:
    words = [rng.choice(WORDS) for _ in range(n)]
    return " ".join(words).capitalize() + "."


def hex_digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


# --- tool outputs -----------------------------------------------------------------------------------


def python_file(rng: random.Random, path: str, *, functions: int, plant: str | None = None) -> str:
    """Plausible Python source: imports, a dataclass, functions with docstrings and bodies."""
    module = path.rsplit("/", 1)[-1].removesuffix(".py")
    lines = [
        f'"""{module.replace("_", " ").capitalize()}: {sentence(rng, 8)}"""',
        "",
        "from __future__ import annotations",
        "",
        "import logging",
        "from dataclasses import dataclass",
        "from decimal import ROUND_HALF_EVEN, Decimal",
        "",
        f"from ..{rng.choice(PACKAGES)}.{rng.choice(MODULES)} import {rng.choice(NOUNS).title().replace('_', '')}",
        "",
        "logger = logging.getLogger(__name__)",
        "",
        "",
        "@dataclass(frozen=True)",
        f"class {rng.choice(NOUNS).title().replace('_', '')}Record:",
    ]
    for _ in range(rng.randint(3, 7)):
        lines.append(f"    {rng.choice(NOUNS)}: {rng.choice(TYPES)}")
    names = [ident(rng) for _ in range(functions)]
    if plant is not None:
        names[rng.randrange(len(names))] = plant
    for name in names:
        args = ", ".join(f"{rng.choice(NOUNS)}: {rng.choice(TYPES)}" for _ in range(rng.randint(1, 3)))
        lines += [
            "",
            "",
            f"def {name}({args}) -> {rng.choice(TYPES)}:",
            f'    """{sentence(rng, rng.randint(6, 14))}"""',
        ]
        for _ in range(rng.randint(4, 14)):
            kind = rng.random()
            var = rng.choice(NOUNS)
            if kind < 0.3:
                lines.append(f"    {var} = {rng.choice(NOUNS)}.quantize(Decimal('0.01'), rounding=ROUND_HALF_EVEN)")
            elif kind < 0.5:
                lines.append(f"    if {var} is None or {var} < 0:")
                lines.append(f"        raise ValueError(f'invalid {var}: {{{var}!r}}')")
            elif kind < 0.7:
                lines.append(f"    logger.debug('{ident(rng)} %s', {var})")
            elif kind < 0.85:
                lines.append(f"    for item in {var}s:")
                lines.append(f"        total += item.{rng.choice(NOUNS)}")
            else:
                lines.append(f"    # {sentence(rng, rng.randint(5, 12))}")
        lines.append(f"    return {rng.choice(NOUNS)}")
    return "\n".join(f"{i + 1:>4}  {line}" for i, line in enumerate(lines))


def grep_output(rng: random.Random, pattern: str, *, hits: int, plant: str | None = None) -> str:
    rows = []
    for _ in range(hits):
        rows.append(f"{file_path(rng)}:{rng.randint(3, 480)}:    {ident(rng)}({rng.choice(NOUNS)}, {pattern})")
    if plant is not None:
        rows.insert(rng.randrange(len(rows) + 1), plant)
    return "\n".join(rows)


def traceback_lines(rng: random.Random, error: str, *, frames: int) -> list[str]:
    lines = ["Traceback (most recent call last):"]
    for _ in range(frames):
        lines.append(f'  File "/app/{file_path(rng)}", line {rng.randint(10, 600)}, in {ident(rng)}')
        lines.append(f"    {rng.choice(NOUNS)} = {ident(rng)}({rng.choice(NOUNS)})")
    lines.append(error)
    return lines


def pytest_log(
    rng: random.Random, *, tests: int, failures: list[tuple[str, str]], seconds: float, chinese: bool = False
) -> str:
    """pytest output with progress lines, a failures section with tracebacks and a summary."""
    files = sorted({f"tests/{rng.choice(PACKAGES)}/test_{rng.choice(MODULES)}.py" for _ in range(max(3, tests // 25))})
    lines = [
        "============================= test session starts ==============================",
        "platform linux -- Python 3.11.7, pytest-8.3.4, pluggy-1.5.0",
        "rootdir: /app",
        "configfile: pyproject.toml",
        "plugins: anyio-4.6.2, hypothesis-6.118.0",
        f"collected {tests} items",
        "",
    ]
    per = max(1, tests // len(files))
    done = 0
    for f in files:
        marks = "".join(rng.choice("....................F.s") if failures else "." for _ in range(per))
        done += per
        lines.append(f"{f} {marks}{' ' * max(1, 60 - len(f) - len(marks))}[{min(100, done * 100 // tests):>3}%]")
    if failures:
        lines += ["", "=================================== FAILURES ==================================="]
        for test_id, error in failures:
            name = test_id.rsplit("::", 1)[-1]
            lines.append(f"________________________________ {name} ________________________________")
            lines.append("")
            lines += traceback_lines(rng, error, frames=rng.randint(3, 7))
            lines.append(f"E       {error}")
            if chinese:
                lines.append("-" * 30 + " Captured log call " + "-" * 31 + "\n" + rng.choice(ZH))
            lines.append("")
        lines.append("=========================== short test summary info ============================")
        for test_id, error in failures:
            lines.append(f"FAILED {test_id} - {error[:70]}")
    passed = tests - len(failures)
    tail = f"{len(failures)} failed, {passed} passed" if failures else f"{passed} passed"
    lines.append(f"======================== {tail} in {seconds:.2f}s ========================")
    return "\n".join(lines)


def git_log(rng: random.Random, n: int, plant: str | None = None) -> str:
    rows = []
    for _ in range(n):
        rows.append(
            f"{hex_digits(rng, 8)} {rng.choice(('fix', 'feat', 'chore', 'refactor', 'test'))}({rng.choice(PACKAGES)}): "
            f"{sentence(rng, rng.randint(4, 9)).rstrip('.').lower()}"
        )
    if plant is not None:
        rows.insert(rng.randrange(1, len(rows)), plant)
    return "\n".join(rows)


def pip_freeze(rng: random.Random) -> str:
    pkgs = (
        "alembic",
        "anyio",
        "asyncpg",
        "attrs",
        "boto3",
        "celery",
        "fastapi",
        "httpx",
        "pydantic",
        "pytest",
        "redis",
        "sqlalchemy",
        "structlog",
        "tenacity",
        "uvicorn",
        "orjson",
        "prometheus-client",
        "babel",
    )
    return "\n".join(f"{p}=={rng.randint(0, 4)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}" for p in pkgs)


def docs_zh(rng: random.Random) -> str:
    paras = [rng.choice(ZH) + rng.choice(ZH) for _ in range(rng.randint(6, 14))]
    return "# 部分退款（Partial refunds）\n\n" + "\n\n".join(paras)


# --- the session --------------------------------------------------------------------------------------
