"""The child side of ``bench.agents.imports``: run one command with every module load metered.

Kept to the few stdlib modules it needs, so that what it measures is the command's own imports.

    python -m bench.agents._meter OUT SETTLE -c CODE | -m MODULE ARGS...
"""

from __future__ import annotations

import ctypes
import importlib.abc
import json
import os
import sys
import threading
import time
from collections import defaultdict
from typing import Any


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _mappings_kib() -> dict[str, int]:
    """Resident KiB per mapping of this process, by file name (a shared library, the main ``[heap]``)
    or ``[anon]`` for anonymous memory (pymalloc's 1 MiB arenas, malloc's thread arenas, thread stacks):
    what the per-import figures cannot split, such as a library's code pages first run while serving."""
    found: dict[str, int] = defaultdict(int)
    name = ""
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(maxsplit=5)
            if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
                name = os.path.basename(head[5].strip()) if len(head) == 6 else "[anon]"
            elif head and head[0] == "Rss:":
                found[name] += int(head[1])
    return dict(sorted(found.items(), key=lambda kv: -kv[1]))


def _package(name: str) -> str:
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "gpuchain" else parts[0]


class _Meter(importlib.abc.MetaPathFinder):
    """Wraps every loader the finders after it return, so each module's load is measured."""

    def __init__(self) -> None:
        self.self_kib: dict[str, int] = defaultdict(int)
        self.modules: dict[str, int] = defaultdict(int)
        self.by_module: dict[str, int] = defaultdict(int)
        self.parent: dict[str, str] = {}
        self._names: list[str] = []
        self._stack: list[int] = []  # growth of the nested loads, per open load

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, self, fullname)
                return spec
        return None

    def measure(self, name: str, step: Any) -> Any:
        """Run one load step; its own growth (less nested loads') goes to the module's package."""
        before = _rss_kib()
        if name not in self.parent:
            self.parent[name] = self._names[-1] if self._names else "-"
        self._stack.append(0)
        self._names.append(name)
        try:
            return step()
        finally:
            self._names.pop()
            nested = self._stack.pop()
            grown = _rss_kib() - before
            self.self_kib[_package(name)] += grown - nested
            self.by_module[name] += grown - nested
            if self._stack:
                self._stack[-1] += grown


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: Any, meter: _Meter, name: str) -> None:
        self.inner, self.meter, self.name = inner, meter, name

    def create_module(self, spec: Any) -> Any:
        return self.meter.measure(self.name, lambda: self.inner.create_module(spec))

    def exec_module(self, module: Any) -> None:
        module.__loader__ = module.__spec__.loader = self.inner  # the module keeps its real loader
        self.meter.modules[_package(self.name)] += 1
        self.meter.measure(self.name, lambda: self.inner.exec_module(module))

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)


def child(out: str, settle: float, argv: list[str]) -> None:
    """Run ``argv`` (``-m MODULE ARGS`` or ``-c CODE``) metered; write the table after ``settle`` s."""
    start = _rss_kib()
    meter = _Meter()
    sys.meta_path.insert(0, meter)

    def dump() -> None:
        time.sleep(settle)
        table = dict(sorted(meter.self_kib.items(), key=lambda kv: -kv[1]))
        end = _rss_kib()
        mappings = _mappings_kib()
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # what glibc holds free but resident
        data = {
            "start_kib": start,
            "end_kib": end,
            "trimmed_kib": _rss_kib(),
            "threads": len(os.listdir("/proc/self/task")),
            "mappings": mappings,
            "packages": table,
            "modules": meter.modules,
            "by_module": meter.by_module,
            "imported_by": meter.parent,
        }
        with open(out, "w") as f:
            json.dump(data, f)

    threading.Thread(target=dump, daemon=True).start()
    if argv[0] == "-c":
        sys.argv = ["-c"]
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
    else:
        import runpy

        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    child(sys.argv[1], float(sys.argv[2]), sys.argv[3:])
