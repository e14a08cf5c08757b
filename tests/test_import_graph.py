"""No import circle under src/gpuchain, deferred or not: each package's layers import only downward.

The graph counts every import in a module, at its top, inside a function or under TYPE_CHECKING,
because a deferred import that closes a circle is still a circle (the module order of the layers
in DESIGN.md only holds if no module needs one above it). Importing ``a.b.c`` also runs the
``__init__`` of ``a`` and ``a.b``, so a circle through a package's ``__init__`` counts too."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _modules() -> dict[str, Path]:
    found = {}
    for path in (SRC / "gpuchain").rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        if ".proto." not in name:
            found[name] = path
    return found


def _packages_of(module: str) -> set[str]:
    """The packages whose ``__init__`` Python runs before ``module``: ``a`` and ``a.b`` for ``a.b.c``."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def _with_packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """``graph`` with an edge to each package an import runs the ``__init__`` of, except the
    importer's own packages (Python has those in hand, half-initialised, before the importer runs)."""
    return {
        name: targets
        | {p for t in targets for p in _packages_of(t) if p in graph and p != name and p not in _packages_of(name)}
        for name, targets in graph.items()
    }


def _graph() -> dict[str, set[str]]:
    """Module -> the gpuchain modules it imports (``from pkg import mod`` counts as importing ``pkg.mod``),
    and the packages whose ``__init__`` those imports run."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return _with_packages(graph)


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return circles


def test_no_import_circle() -> None:
    assert _circles(_graph()) == []


def test_the_check_finds_a_deferred_circle() -> None:
    graph = {"a.peer": {"a.podresources"}, "a.podresources": {"a.peer"}, "a.state": set()}
    assert _circles(graph) == [["a.peer", "a.podresources"]]
    through_init = {"a": set(), "a.x": {"b.y"}, "b": {"b.z"}, "b.y": set(), "b.z": {"a.x"}}
    assert _circles(through_init) == []  # a.x imports b.y, which runs b/__init__, which imports b.z
    assert _circles(_with_packages(through_init)) == [["a.x", "b", "b.z"]]
    pairs = {
        ("gpuchain.kubelet.peer", "gpuchain.kubelet.state"),
        ("gpuchain.operator.compat", "gpuchain.operator.spec"),
        ("gpuchain.doctor.stacks.gpu_operator", "gpuchain.doctor.structs"),
    }
    real = _graph()
    assert all(b in real[a] for a, b in pairs)  # the graph sees real imports
