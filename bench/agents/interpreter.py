"""The interpreter the node agent benches run gpuchain with: gpuchain's runtime dependencies only.

The test venv (``.venv``, ``scripts/setup --test``) holds the test extras too (pytest, kmock,
hypothesis, grpcio-tools...). A package there that no runtime dependency asks for can still be
loaded by one that finds it installed, so a figure taken there is not what a user's node runs.
A node runs the image's install: the wheel and what its ``[project] dependencies`` pull in
(``Dockerfile``). ``runtime_python`` builds that once, a venv of those dependencies alone under
``~/.cache/gpuchain-bench`` (keyed by the interpreter's version and the dependency list, so a
changed ``pyproject.toml`` builds a new one), and each process runs the tree's ``src`` from
``PYTHONPATH`` (``tree_env``): the tree under test and a ``--baseline`` tree on the same install.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
"""This tree's ``src``: what the benches measure unless told another tree."""
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpuchain-bench"


def runtime_python(pyproject: Path = REPO / "pyproject.toml") -> Path:
    """The interpreter of a venv holding ``pyproject``'s runtime dependencies and nothing else (no
    test extras, not gpuchain itself: ``tree_env`` puts a tree's ``src`` first); built on first use."""
    deps = sorted(tomllib.loads(pyproject.read_text())["project"]["dependencies"])
    key = hashlib.sha256(json.dumps([sys.version, deps]).encode()).hexdigest()[:12]
    venv = CACHE / f"runtime-{key}"
    python = venv / "bin" / "python"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another bench may be building the same one
        if not (venv / "complete").is_file():
            shutil.rmtree(venv, ignore_errors=True)  # a build cut short
            print(f"building {venv}: gpuchain's runtime dependencies (once)", file=sys.stderr)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(python), "-m", "pip", "install", "-q", *deps], check=True)
            (venv / "complete").write_text(json.dumps(deps))
    return python


def tree_env(env: dict[str, str], src: Path = SRC) -> dict[str, str]:
    """``env`` for a gpuchain process of the tree whose ``src`` is ``src``: it first on the path."""
    return {**env, "PYTHONPATH": str(src)}


def add_python_option(ap: argparse.ArgumentParser) -> None:
    """``--python``: the interpreter a bench runs gpuchain's processes under (``python_of``)."""
    ap.add_argument(
        "--python",
        default=None,
        help="the interpreter every measured process runs under (default: a venv of gpuchain's runtime "
        "dependencies alone, built once under ~/.cache/gpuchain-bench, as the image installs them; the test "
        "venv also holds what only the tests need, which a package that finds it installed may load; give "
        ".venv/bin/python to measure there)",
    )


def python_of(args: argparse.Namespace) -> str:
    """The interpreter ``--python`` names, else ``runtime_python()``'s."""
    return str(Path(args.python).absolute()) if args.python else str(runtime_python())
