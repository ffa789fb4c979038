"""The package's import graph, read from the source with `ast` (see `tests/test_layering.py` for what counts)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "contextwarden"


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    names: tuple[str, ...]
    """The names imported from ``target`` (empty for ``import target``)."""
    line: int
    kind: str
    """``module``, ``deferred`` (inside a function) or ``typing`` (under ``TYPE_CHECKING``)."""


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()
"""Dotted name -> file of every module of the package."""


def _resolve(name: str) -> str:
    """The module ``name`` is, or the nearest package or module it lies in."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, path: Path) -> Iterator[Import]:
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]

    def visit(node: ast.AST, kind: str) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    yield from visit_one(stmt, "typing")
                for stmt in child.orelse:
                    yield from visit_one(stmt, kind)
            else:
                yield from visit_one(child, kind)

    def visit_one(node: ast.AST, kind: str) -> Iterator[Import]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    yield Import(module, _resolve(alias.name), (), node.lineno, kind)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                origin = ".".join([*base, node.module] if node.module else base)
            else:
                origin = node.module or ""
            if origin.split(".")[0] != PACKAGE:
                return
            plain = [alias.name for alias in node.names if f"{origin}.{alias.name}" not in MODULES]
            for alias in node.names:
                if f"{origin}.{alias.name}" in MODULES:
                    yield Import(module, f"{origin}.{alias.name}", (), node.lineno, kind)
            if plain:
                yield Import(module, _resolve(origin), tuple(plain), node.lineno, kind)
        else:
            deferred = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) and kind == "module"
            yield from visit(node, "deferred" if deferred else kind)

    yield from visit(ast.parse(path.read_text(encoding="utf-8")), "module")


IMPORTS = [imp for module, path in MODULES.items() for imp in _imports(module, path)]
