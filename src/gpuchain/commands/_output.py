"""How every command answers: `-o table|json|yaml`, and errors as one line with exit code 2."""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

import typer
import yaml
from pydantic import BaseModel
from rich.console import Console, RenderableType


class OutputFormat(enum.StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


def output_option() -> Any:
    """The shared `-o/--output` option; table for people, json/yaml for scripts."""
    return typer.Option(OutputFormat.table, "-o", "--output", help="Output format: table, json or yaml.")


console = Console()
err_console = Console(stderr=True)


def plain(obj: Any) -> Any:
    """Turn dataclasses, pydantic models, enums and tuples into JSON-ready values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        to_dict = getattr(obj, "to_dict", None)
        if callable(to_dict):
            return plain(to_dict())
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, BaseModel):
        return plain(obj.model_dump(mode="json", by_alias=True))
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [plain(v) for v in obj]
    return obj


def emit(data: Any, fmt: OutputFormat, table: Callable[[], RenderableType]) -> None:
    """Print ``data`` as JSON/YAML, or the rich renderable ``table()`` builds for people."""
    if fmt is OutputFormat.table:
        console.print(table())
    else:
        emit_data(data, fmt)


def emit_data(data: Any, fmt: OutputFormat) -> None:
    """Print ``data`` as JSON or YAML for scripts; nothing for ``table`` (the command printed as it went)."""
    if fmt is OutputFormat.json:
        sys.stdout.write(json.dumps(plain(data), indent=2) + "\n")
    elif fmt is OutputFormat.yaml:
        sys.stdout.write(yaml.safe_dump(plain(data), sort_keys=False))


def fail(message: str, code: int = 2, also: Sequence[str] = ()) -> NoReturn:
    """Report a user error in one line on stderr and exit (2: bad input, 1: something is broken).

    ``also``: further problems of the same input (the first line counts them), one line each after it,
    so a user fixes them all in one go.
    """
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    for line in also:
        err_console.print(f"  also: {line}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)
