"""The one `gpuchain` command. Thin by design: each subcommand lives in ``gpuchain.commands.<name>``
and only parses arguments, calls a layer and renders the answer.

Command modules register themselves through ``register(app)``; they are found by listing the
``gpuchain.commands`` package, so adding a command never means editing this file.
"""

from __future__ import annotations

import importlib
import pkgutil

import typer

import gpuchain.commands
from gpuchain import __version__

app = typer.Typer(
    name="gpuchain",
    help=(
        "The Kubernetes GPU chain (driver -> toolkit -> device plugin -> discovery/exporter/MIG), "
        "with a doctor that names the broken link. Every command runs on simulated GPUs by default; "
        "pass --backend nvml on a real node."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpuchain {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """gpuchain: make GPUs real, schedulable, observable and healthy resources on Kubernetes."""


def _register_commands() -> None:
    for info in sorted(pkgutil.iter_modules(gpuchain.commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"gpuchain.commands.{info.name}")
        module.register(app)


_register_commands()


def main() -> None:
    """Console entry point."""
    app()
