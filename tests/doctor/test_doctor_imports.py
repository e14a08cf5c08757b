"""The doctor's modules import in one direction (issue 31): no circle among them, whether the import is
at the top, deferred into a function, or only for type checking; the shared types live below both sides
(`gpuchain.doctor.structs`)."""

from __future__ import annotations

import ast
from pathlib import Path

DOCTOR = Path(__file__).resolve().parents[2] / "src/gpuchain/doctor"


def _graph() -> dict[str, set[str]]:
    """Module -> the doctor modules it imports anywhere in its body (``from pkg import mod`` names the
    module ``mod``, any other name its package)."""
    src = DOCTOR.parents[1]
    modules = {
        ".".join(p.relative_to(src).with_suffix("").parts).removesuffix(".__init__"): p for p in DOCTOR.rglob("*.py")
    }
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = {
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                    for a in node.names
                }
            elif isinstance(node, ast.Import):
                targets = {a.name for a in node.names}
            else:
                continue
            graph[module] |= {t for t in targets if t in modules and t != module}
    return graph


def _circle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle in ``graph`` ([] when there is none)."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str]:
        for target in sorted(graph[module]):
            if target in path:
                return [*path[path.index(target) :], target]
            if target not in done:
                found = visit(target, [*path, target])
                if found:
                    return found
        done.add(module)
        return []

    for module in sorted(graph):
        found = visit(module, [module])
        if found:
            return found
    return []


def test_the_circle_finder_sees_a_deferred_circle() -> None:
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b"}, "b": set()}) == []


def test_no_doctor_module_imports_its_way_back_to_itself() -> None:
    graph = _graph()
    assert {"gpuchain.doctor.snapshot", "gpuchain.doctor.stacks", "gpuchain.doctor.links.driver"} <= set(graph)
    assert "gpuchain.doctor.structs" in graph["gpuchain.doctor.stacks.gpu_operator"]
    assert _circle(graph) == []
