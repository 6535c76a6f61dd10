"""No import circles between didactyl_tui's modules. Every import statement counts: at the top level, under
``if TYPE_CHECKING:`` (a circle hidden there is still a circle in the design: each module needs the other to be
read) and inside functions (deferred for the first frame's sake, still a dependency). An import of a submodule is
an edge to that module, not to the packages above it (their ``__init__`` files import nothing of their own)."""

from __future__ import annotations

import ast
from pathlib import Path

import didactyl_tui

ROOT = Path(didactyl_tui.__file__).parent


def module_files() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = ["didactyl_tui", *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    modules = module_files()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = here
                    for _ in range(node.level - 1):
                        package = package.rpartition(".")[0]
                    base = f"{package}.{base}" if base else package
                # ``from package import sub`` imports the submodule; ``from module import name``, the module.
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        work = [(start, iter(sorted(graph[start])))]
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while not component or component[-1] != node:
                        component.append(stack.pop())
                        on_stack.discard(component[-1])
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_circles_are_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_imports_under_type_checking_and_in_functions_are_edges() -> None:
    graph = import_graph()
    assert "didactyl_tui.service.screen_api" in graph["didactyl_tui.tui.host"]  # under TYPE_CHECKING
    assert "didactyl_tui.service.app" in graph["didactyl_tui.tui.app"]  # inside _service_class()


def test_no_import_circles() -> None:
    assert circles(import_graph()) == []
