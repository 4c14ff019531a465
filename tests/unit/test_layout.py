"""The shape ARCHITECTURE.md promises: no import cycle among the SDK's modules,
and no module but ``_client.py`` reaching into the Client's privates."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "liftbridge"


def _imports(path: Path) -> set[str]:
    """The ``liftbridge`` modules a module imports (``TYPE_CHECKING`` blocks too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "liftbridge":
                found.update(f"liftbridge.{alias.name}" for alias in node.names)
            elif node.module.startswith("liftbridge."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("liftbridge."))
    return found


def _graph() -> dict[str, set[str]]:
    modules = {
        "liftbridge." + p.relative_to(PACKAGE).with_suffix("").as_posix().replace("/", "."): p
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py"
    }
    return {name: _imports(path) & modules.keys() for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_the_sdk() -> None:
    graph = _graph()
    assert (
        "liftbridge._core._router" in graph and graph["liftbridge._client"]
    )  # the walk found them
    assert _cycle(graph) is None


def test_only_the_client_touches_its_privates() -> None:
    reach = re.compile(r"\b(?:self\._client|client)\._[a-z]\w*")
    offenders = [
        f"{path.name}: {match.group(0)}"
        for path in PACKAGE.rglob("*.py")
        if path.name != "_client.py"
        for match in reach.finditer(path.read_text())
    ]
    assert offenders == []
