"""Subcommands of `gpuchain`: one module each, exposing ``register(app: typer.Typer) -> None``.

Modules whose name starts with ``_`` are helpers shared by the commands, not commands.
"""
