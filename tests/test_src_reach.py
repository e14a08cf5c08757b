"""Nothing under src/gpuchain is there only for the tests or the benchmarks: every module is reached
from the ``gpuchain`` executable's entry points through the imports the code makes.

Test doubles and the tests' own simulators live in tests/ (tests/fakes, tests/doctor/sim_fixes.py);
a module only a test or a bench imports belongs there too. The walk follows every import, at a
module's top, inside a function or under TYPE_CHECKING (the graph of `test_import_graph`), the
packages that run on the way, and the two imports by name the code makes: the commands by their
module names (``cli.COMMANDS``) and the node agent's roles (``agent.build``:
``f"gpuchain.agent.roles.{module}"`` with the module names as strings in the same file)."""

from __future__ import annotations

import ast

from test_import_graph import SRC, _graph, _modules

ENTRY_POINTS = ("gpuchain.entry", "gpuchain.__main__")  # pyproject's [project.scripts] and python -m gpuchain


def _by_name(module: str, tree: ast.Module, modules: set[str]) -> set[str]:
    """What a module loads beyond the import graph's edges: the modules it names to import them by
    name (a string that is a module's name; for an f-string ``"pkg.{...}"`` each ``pkg.<s>`` that is a
    module, for the strings ``s`` in the same module), and the packages an import statement runs on
    its way (``gpuchain.proto`` for ``from gpuchain.proto.podresources.v1 import api_pb2``)."""
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    found = strings & modules
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            prefix = str(node.values[0].value)
            if prefix.endswith("."):
                found |= {prefix + s for s in strings} & modules
        paths = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            paths = [node.module]
        for path in paths:
            parts = path.split(".")
            found |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & modules
    return found - {module}


def _unreached(graph: dict[str, set[str]], by_name: dict[str, set[str]], entries: tuple[str, ...]) -> set[str]:
    """The modules no chain of imports from ``entries`` reaches (importing ``a.b.c`` runs ``a`` and ``a.b``)."""
    seen: set[str] = set()
    todo = list(entries)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for target in graph.get(module, set()) | by_name.get(module, set()):
            parts = target.split(".")
            todo += [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return set(graph) - seen


def test_every_module_under_src_is_reached_from_the_gpuchain_command() -> None:
    modules = _modules()
    names = set(modules)
    by_name = {m: _by_name(m, ast.parse(path.read_text()), names) for m, path in modules.items()}
    assert sorted(_unreached(_graph(), by_name, ENTRY_POINTS)) == []


def test_the_walk_finds_a_module_only_tests_import() -> None:
    graph = {"p.entry": {"p.cli"}, "p.cli": set(), "p": set(), "p.helper": set(), "p.roles.a": set()}
    assert _unreached(graph, {"p.cli": {"p.roles.a"}}, ("p.entry",)) == {"p.helper"}
    tree = ast.parse('from p.stubs.v1 import api\nROLES = {"x": "a"}\nmod = f"p.roles.{ROLES[0]}"')
    assert _by_name("p.build", tree, {"p.roles.a", "p.roles.b", "p.stubs"}) == {"p.roles.a", "p.stubs"}
    assert (SRC / "gpuchain" / "entry.py").exists()  # the entry point the real walk starts from
