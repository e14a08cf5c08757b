"""The `gpuchain` entry point loads commands lazily: its table must match what the modules register,
and parsing, ``--help`` and ``--version`` must not import what only a command uses."""

from __future__ import annotations

import importlib
import os
import pkgutil
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

import gpuchain.commands
from gpuchain.cli import COMMANDS, app


def _registered() -> dict[str, tuple[str, str]]:
    """Every command the command modules register: name -> (module, first paragraph of its help)."""
    found: dict[str, tuple[str, str]] = {}
    for info in pkgutil.iter_modules(gpuchain.commands.__path__):
        if info.name.startswith("_"):
            continue
        module = f"gpuchain.commands.{info.name}"
        sub = typer.Typer()
        importlib.import_module(module).register(sub)
        for name, command in typer.main.get_group(sub).commands.items():
            first = (command.help or "").strip().split("\n\n")[0]
            found[name] = (module, " ".join(first.split()))
    return found


def test_the_table_names_every_command_with_its_own_help() -> None:
    table = {name: (entry.module, entry.help) for name, entry in COMMANDS.items()}
    assert table == _registered()


HEAVY = ("kopf", "aiohttp", "lightkube", "matplotlib", "gpuchain.operator", "gpuchain.doctor", "gpuchain.sim")


def _imported(*args: str, code: str | None = None) -> set[str]:
    """The modules a real `gpuchain ARGS` process (or ``python -c CODE``) imports, from ``python -X importtime``."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *(["-c", code] if code else ["-m", "gpuchain", *args])],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "100"},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    modules = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            modules.add(line.rsplit("|", 1)[1].strip())
    assert "gpuchain.cli" in modules  # the parse worked: this is the real entry point's list
    return modules


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY))


@pytest.mark.parametrize("args", [["--help"], ["--version"]])
def test_root_help_and_version_import_no_command(args: list[str]) -> None:
    modules = _imported(*args)
    assert _heavy(modules) == []
    assert not [m for m in modules if m.startswith("gpuchain.commands.")]
    assert "grpc" not in modules and "pydantic" not in modules


AGENTS = ["device-plugin", "gfd", "exporter", "gpu-health", "dra-plugin", "mig-manager"]


@pytest.mark.parametrize("agent", AGENTS)
def test_node_agent_help_imports_no_operator_or_kubernetes_framework(agent: str) -> None:
    assert _heavy(_imported(agent, "--help")) == []


@pytest.mark.parametrize("agent", AGENTS)
def test_a_node_agent_loads_no_table_renderer_and_no_demo(agent: str) -> None:
    """What an agent holds for weeks: rich (tables, help) and the demos load only when used."""
    modules = _imported(code=f"from gpuchain.cli import load; load({agent!r})")
    assert _heavy(modules) == []
    assert sorted(m for m in modules if m == "rich" or m.startswith("rich.")) == []
    assert [m for m in ("gpuchain.commands._render", "gpuchain.sim.dra_demo") if m in modules] == []


def test_help_lists_every_command_with_its_whole_help() -> None:
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for name, entry in COMMANDS.items():
        assert f"{name} {entry.help}" in text


def test_a_command_runs_and_a_typo_is_answered_with_the_nearest_name() -> None:
    assert CliRunner().invoke(app, ["gpus", "-o", "json"]).exit_code == 0
    typo = CliRunner().invoke(app, ["gfx"])
    assert typo.exit_code == 2
    assert "Did you mean 'gfd'?" in typo.output


@pytest.mark.parametrize("agent", ["device-plugin", "exporter", "gfd"])
def test_an_agent_on_real_gpus_does_not_load_the_simulator(agent: str) -> None:
    """The simulated backend and its topology files are imported by ``--backend sim`` alone."""
    modules = _imported(code=f"from gpuchain.cli import load; load({agent!r})")
    assert {"gpuchain.gpu.sim", "gpuchain.gpu.topology"} & modules == set()
