"""The package's import graph points one way, and no module reaches for another module's private names.

The graph is read from the source with `ast`, not by importing anything, so it is the same whatever
extras are installed. Every ``import``/``from ... import`` of a ``contextwarden`` module is an arrow,
wherever it stands:

* at module level, inside ``try``/``if`` blocks included;
* inside a function (an import deferred to call time is still a dependency: deferring it hides a
  cycle, it does not remove one);
* under ``if TYPE_CHECKING:`` (a module whose signatures name another module's types depends on it,
  even though Python never runs that import).

An arrow leads to the module that defines the imported name when the name is a submodule
(``from .stores import redis``), else to the module named after ``from``. Importing ``a.b`` also runs
``a/__init__.py``; that implicit arrow is not drawn, or every module would sit in a cycle with the
package's ``__init__``.

Two checks run over the graph: no cycle between modules, and none between the units of the tree
(each subpackage of ``contextwarden`` and each top-level module counts as one unit), so
``compaction`` and ``summarize`` cannot lean on each other through different modules.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict

import pytest

from _import_graph import IMPORTS, MODULES, SRC

ALLOWED_EDGES: dict[tuple[str, str], str] = {
    ("contextwarden.llm._http", "contextwarden.llm"): (
        "reads `contextwarden.llm.ALLOW_MODEL_REQUESTS` when a request is sent: users and test suites flip the"
        " switch on the package, so it can live nowhere else"
    ),
}
"""Arrows left out of the cycle check, each with the reason it cannot point the other way."""


def _unit(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def _graph(level: str) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for imp in IMPORTS:
        if (imp.source, imp.target) in ALLOWED_EDGES:
            continue
        a, b = (imp.source, imp.target) if level == "module" else (_unit(imp.source), _unit(imp.target))
        if a != b:
            graph[a].add(b)
    return graph


def _explain(component: list[str], level: str) -> str:
    members = set(component)
    lines = [
        f"  {imp.source}:{imp.line} -> {imp.target} ({imp.kind})"
        for imp in IMPORTS
        if (imp.source, imp.target) not in ALLOWED_EDGES
        and (imp.source if level == "module" else _unit(imp.source)) in members
        and (imp.target if level == "module" else _unit(imp.target)) in members
        and (level == "module" or _unit(imp.source) != _unit(imp.target))
    ]
    return " <-> ".join(component) + "\n" + "\n".join(lines)


def test_the_graph_is_read() -> None:
    # A reader that found nothing would pass every check below.
    assert len(MODULES) > 150
    assert len(IMPORTS) > 500
    kinds = {imp.kind for imp in IMPORTS}
    assert kinds == {"module", "deferred", "typing"}
    assert any(
        imp.source == "contextwarden.compaction.summarize" and imp.target == "contextwarden.summarize.base"
        for imp in IMPORTS
    )


@pytest.mark.parametrize("level", ["module", "unit"])
def test_no_import_cycles(level: str) -> None:
    cycles = _cycles(_graph(level))
    assert not cycles, "import cycles (break them by moving the shared piece one floor down):\n" + "\n".join(
        _explain(c, level) for c in cycles
    )


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_allowed_edges_exist() -> None:
    # An allowance for an arrow that is gone would hide the next one drawn there.
    drawn = {(imp.source, imp.target) for imp in IMPORTS}
    assert set(ALLOWED_EDGES) <= drawn


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_imports_another_modules_private_names() -> None:
    # A private module (`_json`, `_session`) may be imported within the package; the names in it that
    # other modules use are public names of that module.
    found = [
        f"{imp.source}:{imp.line} imports {name} from {imp.target}"
        for imp in IMPORTS
        for name in imp.names
        if _private(name) and imp.target != imp.source
    ]
    assert not found, "make these names public in their module (or move the code):\n" + "\n".join(found)


ENGINE_OWNERS = (
    "contextwarden.compaction",
    "contextwarden._session",
    "contextwarden._session_budget",
    "contextwarden._session_delegation",
    "contextwarden._session_tools",
    "contextwarden.async_session",
    "contextwarden.session",
    "contextwarden.session_state",
)
"""The modules that may touch a session's engine; everything else reads ``session.state``."""


def _reaches_into_engine(source: str) -> list[int]:
    """Lines of ``source`` that read through an engine: ``x.engine.<name>``, ``engine.book``, ``engine.transcript``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        inner = node.value
        if isinstance(inner, ast.Attribute) and inner.attr == "engine":
            lines.append(node.lineno)
        elif isinstance(inner, ast.Name) and inner.id == "engine" and node.attr in ("book", "transcript"):
            lines.append(node.lineno)
    return lines


def _owns_engine(module: str) -> bool:
    return any(module == owner or module.startswith(owner + ".") for owner in ENGINE_OWNERS)


def test_only_the_session_reaches_into_its_engine() -> None:
    # The service, health, recall, the command line and the benchmarks read what a session holds through
    # `SessionState`; the engine and its round book can then change without them.
    files = {name: path for name, path in MODULES.items() if not _owns_engine(name)}
    files.update({f"benchmarks/{p.name}": p for p in sorted((SRC.parent / "benchmarks").rglob("*.py"))})
    sources = {name: path.read_text(encoding="utf-8") for name, path in sorted(files.items())}
    found = [
        f"{name}:{line}"
        for name, source in sources.items()
        if "engine" in source  # parse only the files that name an engine at all
        for line in _reaches_into_engine(source)
    ]
    assert not found, "read these through `session.state` (contextwarden.session_state):\n" + "\n".join(found)


def test_the_engine_check_finds_a_reach() -> None:
    assert _reaches_into_engine(
        "n = len(session.engine.transcript)\nv = engine.book.view\nok = session.state.view\n"
    ) == [
        1,
        2,
    ]
    assert _reaches_into_engine("engine = make()\nengine.status()\n") == []


TESTS = SRC.parent / "tests"


def test_no_test_imports_another_test_module() -> None:
    # A test module imported by another is collected twice when it defines tests under the imported
    # names, and couples two files that read as independent: shared pieces live in `_helpers`-style modules.
    found: dict[str, str] = {}
    for path in sorted(TESTS.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if not re.search(r"^\s*from\s+[\w.]*test_", source, flags=re.M):  # parse only possible offenders
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1].startswith("test_"):
                found[path.relative_to(TESTS).as_posix()] = (node.module or "").split(".")[-1]
    assert not found, f"move what these share into a helpers module: {found}"


MAX_LINES = 600
OVER_SIZE_LEFT: set[str] = set()
"""Modules over the size that are more than one concept: none (split a module that grows past it)."""


def test_a_module_over_600_lines_says_it_is_one_concept() -> None:
    over = {
        name
        for name, path in MODULES.items()
        if len(path.read_text(encoding="utf-8").splitlines()) > MAX_LINES
        and "one concept" not in (ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "")
    }
    assert over == OVER_SIZE_LEFT, (
        f"over {MAX_LINES} lines: split by concept, or say in the docstring that the module is one concept "
        f"and why: {sorted(over - OVER_SIZE_LEFT)}; back under (drop from the list): {sorted(OVER_SIZE_LEFT - over)}"
    )
