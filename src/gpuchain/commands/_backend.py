"""The `--backend/--preset/--topology` options shared by every command that looks at GPUs.

typer is imported by the option builders, not here: the node agent (``commands.node_agent``,
argparse) opens its backend through this module and never loads typer."""

from __future__ import annotations

import enum
from typing import Any

from gpuchain.agent.node import open_gpus
from gpuchain.commands._output import fail
from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.errors import GpuError

DEFAULT_PRESET = "h100-80gb-x8"


class BackendKind(enum.StrEnum):
    sim = "sim"
    nvml = "nvml"


def backend_option() -> Any:
    import typer

    return typer.Option(
        BackendKind.sim, "--backend", "-b", help="sim: simulated GPUs (no hardware needed); nvml: this node's GPUs."
    )


def preset_option() -> Any:
    import typer

    return typer.Option(None, "--preset", help=f"Simulated topology preset (default {DEFAULT_PRESET}).")


def topology_option() -> Any:
    import typer

    return typer.Option(None, "--topology", help="Simulated topology from a YAML file instead of a preset.")


def backend_problem(kind: BackendKind, *, preset: str | None, topology: str | None) -> str | None:
    """What is wrong with these options together, or None."""
    if kind is BackendKind.nvml and (preset or topology):
        return "--preset and --topology apply to --backend sim only"
    if preset and topology:
        return "give --preset or --topology, not both"
    return None


def open_backend(kind: BackendKind, *, preset: str | None = None, topology: str | None = None) -> GpuBackend:
    """Build the backend the options name. Raises typer's BadParameter for options that do not go
    together (``backend_problem``), ConfigFileError or GpuError with a clear message."""
    if problem := backend_problem(kind, preset=preset, topology=topology):
        import typer

        raise typer.BadParameter(problem)
    return open_gpus(kind.value, preset=preset, topology=topology, default_preset=DEFAULT_PRESET)


BACKEND_ERRORS = (ConfigFileError, GpuError)
"""What `open_backend` and backend calls raise on bad input or broken hardware."""


def backend_or_fail(kind: BackendKind, *, preset: str | None = None, topology: str | None = None) -> GpuBackend:
    """`open_backend`, with a bad topology or missing driver reported as one line, exit 2."""
    try:
        return open_backend(kind, preset=preset, topology=topology)
    except BACKEND_ERRORS as exc:
        fail(str(exc))
