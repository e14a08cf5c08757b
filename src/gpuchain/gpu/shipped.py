"""The data files shipped in ``gpuchain.gpu`` (the XID table, the MIG catalog, the simulator's
presets), read without PyYAML.

The YAML files are the source: people edit them, with their comments and sources. A node agent
reads them before it serves (the device plugin needs the XID table), and parsing YAML would load
PyYAML with libyaml into every agent, and leave the parser's garbage behind: about 1.8 MiB of a
device plugin that needs nothing else of it. So each file's data is also kept as JSON under
``parsed/`` (``parsed/xids.json`` for ``xids.yaml``), generated from the YAML by
``python -m gpuchain.gpu.shipped``; ``tests/gpu/test_shipped.py`` fails when they differ. JSON, not
a Python literal: the C parser builds only the objects asked for, and a module would keep its data
alive as long as the process (1.3 MiB more in the device plugin). As JSON writes it, a mapping's
integer keys (the XID codes) are strings.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PARSED = HERE / "parsed"
SOURCES = ("xids.yaml", "mig_catalog.yaml", "presets/*.yaml")
"""The shipped YAML files, relative to this package (globs allowed)."""


def data(name: str) -> Any:
    """The data of the shipped file ``name`` (``xids.yaml``, ``presets/l4-x2.yaml``), parsed anew
    on each call (callers keep what they build from it); KeyError for a file that is not shipped."""
    path = PARSED / Path(name).with_suffix(".json")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KeyError(name) from None


def names(folder: str) -> list[str]:
    """The shipped files in ``folder`` (``presets``), by name without folder and suffix, sorted."""
    return sorted(p.stem for p in (PARSED / folder).glob("*.json"))


def generate() -> dict[Path, str]:
    """What ``PARSED`` must hold: every file of ``SOURCES`` parsed as the YAML it is, as JSON text."""
    from gpuchain.common.yamlfile import load_shipped

    files = sorted({p for pattern in SOURCES for p in HERE.glob(pattern)})
    return {
        PARSED / p.relative_to(HERE).with_suffix(".json"): json.dumps(
            load_shipped(p.read_text(encoding="utf-8")), ensure_ascii=False, separators=(",", ":")
        )
        + "\n"
        for p in files
    }


if __name__ == "__main__":
    for stale in PARSED.rglob("*.json"):
        stale.unlink()
    for target, text in generate().items():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        print(f"wrote {target}", file=sys.stderr)
