"""Parse a gpuchain command line as the CLI would, without running the command.

``--help`` is no check of a command line: click answers it before any option's value is converted
or a required one is missed. ``parse`` goes through every group down to the command, converting
each option's value (types, choices, required ones), and returns the command's context, so a test
can also assert what the command would be given (``parse(argv).params["namespace"]``).
"""

from __future__ import annotations

import os
from typing import Any
from unittest import mock

import typer.main

from gpuchain.cli import app


def parse(argv: list[str], env: dict[str, str] | None = None) -> Any:
    """The (click) context of the command ``gpuchain <argv>`` names, its parameters parsed from
    ``argv`` and ``env`` (options that read an environment variable); raises click's usage error
    for an unknown option, a bad value or a missing one. (Typer carries its own copy of click, so
    the context is typed loosely.)"""
    command: Any = typer.main.get_command(app)
    with mock.patch.dict(os.environ, env or {}):
        ctx = command.make_context("gpuchain", list(argv))
        while hasattr(command, "resolve_command"):
            rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
            if not rest:
                break
            name, sub, rest = command.resolve_command(ctx, rest)
            assert sub is not None
            command = sub
            ctx = command.make_context(str(name), rest, parent=ctx)
    return ctx


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """A container's environment as its pod would get it: literal values as written, and a value
    the kubelet fills in (the downward API's node name, a ConfigMap key) as a stand-in naming it."""
    return {
        e["name"]: str(e["value"]) if "value" in e else f"<{next(iter(e.get('valueFrom') or {'unset': 0}))}>"
        for e in container.get("env") or []
    }
