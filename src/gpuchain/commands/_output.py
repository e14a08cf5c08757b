"""How every command answers: `-o table|wide|json|yaml`, errors as one line, logs as one line.

Output is for two readers. A person at a terminal gets rich tables sized to the terminal, with
long ids folded inside their cell rather than cut. A pipe, a file or a pod's log gets plain text:
no colour, no box drawing, no width limit, so ``gpuchain gpus | grep GPU-`` sees whole UUIDs and
a log line is never split in two. Nothing a command prints is ever read as rich markup or emoji
shortcodes: real PCI bus ids contain ``:AB:``, real log lines contain ``[brackets]``. Styling is
applied with :class:`rich.text.Text` styles, never with markup in data.

JSON and YAML use one key style for every command, Kubernetes' camelCase (``docs/output.md``):
dataclass and pydantic field names are converted here; keys of mappings are data (label names,
resource names, environment variables) and are kept as they are. YAML never has aliases.

typer is imported where an option or an exit needs it, not at the top: ``gpuchain node-agent``
(argparse) logs and fails through this module without loading typer.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import logging
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn

from gpuchain.commands._format import OutputFormat

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.text import Text


def output_option() -> Any:
    """The shared `-o/--output` option; table/wide for people, json/yaml for scripts."""
    import typer

    return typer.Option(
        OutputFormat.table,
        "-o",
        "--output",
        help="Output format: table (sized to the terminal), wide (nothing cut, extra columns), json or yaml.",
    )


def _console(stderr: bool = False) -> Console:
    """A console that renders for its reader (rich is imported only now)."""
    from gpuchain.commands._render import _console as make

    return make(stderr)


def __getattr__(name: str) -> Console:
    """``console`` and ``err_console``, the shared stdout/stderr consoles, made on first use."""
    if name in ("console", "err_console"):
        from gpuchain.commands import _render

        return getattr(_render, name)  # type: ignore[no-any-return]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def show(renderable: RenderableType, *, fmt: OutputFormat = OutputFormat.table, target: Console | None = None) -> None:
    """Print a rich renderable for its reader; ``-o wide`` on a terminal prints it at full width."""
    from gpuchain.commands._render import show as render

    render(renderable, fmt=fmt, target=target)


def say(line: str | Text, target: Console | None = None) -> None:
    """Print one line of a command's narrative (a plain string is printed as is, never as markup)."""
    from gpuchain.commands._render import console

    (target or console).print(line)


def emit(data: Any, *, fmt: OutputFormat, table: Callable[[], RenderableType]) -> None:
    """Print ``data`` as JSON/YAML, or the rich renderable ``table()`` builds for people."""
    if fmt in (OutputFormat.table, OutputFormat.wide):
        show(table(), fmt=fmt)
    else:
        emit_data(data, fmt)


_SNAKE = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)+")


def camel(name: str) -> str:
    """``snake_case`` -> ``camelCase`` (Kubernetes' API convention).

    Only lower-case snake identifiers change: ``NVIDIA_VISIBLE_DEVICES``, ``nvidia.com/gpu.product``
    and ``DCGM_FI_DEV_GPU_UTIL`` are names from elsewhere and stay as they are.
    """
    if not _SNAKE.fullmatch(name):
        return name
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def plain(obj: Any) -> Any:
    """Turn dataclasses, pydantic models, enums and tuples into JSON-ready values with camelCase field names.

    Field names (dataclass fields, keys a ``to_dict()`` returns) are the program's vocabulary
    and become camelCase; keys of plain mappings inside them are data and stay as they are.
    Pydantic models are file formats (topology, scenario, NVIDIA's configs): their own aliases
    already spell the keys as the file does.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        to_dict = getattr(obj, "to_dict", None)
        if callable(to_dict):
            return fields(to_dict())
        return {camel(f.name): plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    pydantic = sys.modules.get("pydantic")  # a process that never imported it holds no model
    if pydantic is not None and isinstance(obj, pydantic.BaseModel):
        return plain(obj.model_dump(mode="json", by_alias=True))
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [plain(v) for v in obj]
    return obj


def fields(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record of the program's own (its keys are field names): keys to camelCase, values :func:`plain`."""
    return {camel(str(k)): plain(v) for k, v in record.items()}


def records(obj: Any) -> Any:
    """:func:`plain`, then every lower-case snake key at any depth to camelCase.

    For transcripts whose nested dicts are all records of the program's own (the demo's steps,
    the GPU inventory); label, resource and variable names are left alone by :func:`camel`.
    """
    data = plain(obj)
    if isinstance(data, dict):
        return {camel(k): records(v) for k, v in data.items()}
    if isinstance(data, list):
        return [records(v) for v in data]
    return data


@functools.cache
def _no_aliases() -> Any:
    """The dumper class, made on first use: a node agent, which prints no YAML, loads no PyYAML."""
    import yaml

    class NoAliases(yaml.SafeDumper):
        """YAML for people and kubectl: a value used twice is written twice, never ``&id001``/``*id001``."""

        def ignore_aliases(self, data: Any) -> bool:
            return True

    return NoAliases


def to_yaml(data: Any) -> str:
    """Block-style YAML without aliases, keys in the order given."""
    import yaml

    return yaml.dump(data, Dumper=_no_aliases(), sort_keys=False, default_flow_style=False, allow_unicode=True)


def to_yaml_all(documents: list[Any]) -> str:
    """Several YAML documents separated by ``---``, without aliases (``kubectl apply -f -`` reads it)."""
    import yaml

    return yaml.dump_all(documents, Dumper=_no_aliases(), sort_keys=False, default_flow_style=False, allow_unicode=True)


def emit_data(data: Any, fmt: OutputFormat) -> None:
    """Print ``data`` as JSON or YAML for scripts; nothing for ``table`` (the command printed as it went)."""
    if fmt is OutputFormat.json:
        sys.stdout.write(json.dumps(plain(data), indent=2) + "\n")
    elif fmt is OutputFormat.yaml:
        sys.stdout.write(to_yaml(plain(data)))


def fail(message: str, *, code: int = 2, also: Sequence[str] = ()) -> NoReturn:
    """Report a user error in one line on stderr and exit (2: bad input, 1: something is broken).

    ``also``: further problems of the same input (the first line counts them), one line each after it,
    so a user fixes them all in one go.
    """
    from rich.text import Text

    from gpuchain.commands._render import err_console

    line = Text("error:", style="bold red")
    line.append(" " + " ".join(message.split("\n")))
    err_console.print(line, soft_wrap=True)
    for more in also:
        err_console.print(Text("  also: " + " ".join(more.split("\n"))), soft_wrap=True)
    import typer  # a node agent that fails loads typer only now

    raise typer.Exit(code)


class LogFormat(enum.StrEnum):
    text = "text"
    json = "json"


def log_format_option() -> Any:
    """The shared `--log-format` option of the long-running services."""
    import typer

    return typer.Option(
        LogFormat.text,
        "--log-format",
        envvar="GPUCHAIN_LOG_FORMAT",
        help="Log lines as text (one line per message) or json (one object per line, for log pipelines).",
    )


def _one_line(text: str) -> str:
    return text.replace("\r", "").replace("\n", " | ")


class TextLogFormatter(logging.Formatter):
    """``time LEVEL logger: message``; a multi-line message or traceback stays on its one line."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return _one_line(super().format(record))


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: ``ts`` (RFC 3339, UTC), ``level``, ``logger``, ``msg``, ``error`` when an exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class _ServiceHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The stderr handler :func:`configure_logging` installs (and replaces when called again)."""


#: Loggers of the libraries under gpuchain that log every HTTP request at INFO (httpx2, under
#: lightkube): a service's INFO lines are its own events, so these go to DEBUG. Before, 47 of the
#: 51 lines an operator resyncing once a second wrote in 3 s were "HTTP Request: GET ...".
PER_REQUEST_LOGGERS = ("httpx2",)


class _RequestsAtDebug(logging.Filter):
    """Lowers a per-request INFO record to DEBUG and keeps it only where the root logs DEBUG
    (the logger's own level let it through as INFO); WARNING and above pass unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO:
            record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return record.levelno > logging.DEBUG or logging.getLogger().isEnabledFor(logging.DEBUG)


def configure_logging(level: int = logging.INFO, fmt: LogFormat = LogFormat.text) -> None:
    """Route every log record to stderr, one line per message, as ``fmt``; HTTP requests are
    DEBUG (PER_REQUEST_LOGGERS), whoever handles the records.

    Like :func:`logging.basicConfig`, it leaves a root logger that someone else set up (a test's
    log capture, an embedding program) alone; a handler an earlier call installed is replaced.
    """
    for name in PER_REQUEST_LOGGERS:
        requests = logging.getLogger(name)
        if not any(isinstance(f, _RequestsAtDebug) for f in requests.filters):
            requests.addFilter(_RequestsAtDebug())
    root = logging.getLogger()
    if any(not isinstance(h, _ServiceHandler) for h in root.handlers):
        return
    handler = _ServiceHandler(sys.stderr)
    handler.setFormatter(JsonLogFormatter() if fmt is LogFormat.json else TextLogFormatter())
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
