"""`gpuchain validate driver|toolkit|cuda|plugin|wait`: the operator's init containers, usable by hand.

Each check prints what it found; on success it writes ``<dir>/<link>-ready`` and exits 0,
on failure it says what is wrong and exits 1 (so the init container restarts and retries).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from gpuchain.commands._backend import BACKEND_ERRORS, BackendKind, open_backend, preset_option, topology_option
from gpuchain.commands._cluster import (
    SIMULATED,
    BackendChoice,
    mark,
    node_backend_option,
    open_cluster,
    refuse_implicit_sim,
    resolve_backend,
)
from gpuchain.commands._format import OutputFormat
from gpuchain.commands._output import emit, fail, output_option
from gpuchain.gpu.backend import GpuBackend
from gpuchain.validator import CheckResult, ReadyFiles, check_cuda, check_driver, check_plugin, check_toolkit
from gpuchain.validator.ready import DEFAULT_DIR

validate_app = typer.Typer(
    help="Validate one link of the GPU chain and write its ready file (the operator's init containers).",
    no_args_is_help=True,
)


def _dir_option() -> Any:
    return typer.Option(DEFAULT_DIR, "--dir", help="Validations directory holding the <link>-ready files.")


def _simulated(result: CheckResult, choice: BackendChoice) -> CheckResult:
    """The result marked as coming from simulated GPUs (message, details and so the ready file)."""
    if not choice.simulated:
        return result
    return CheckResult(
        link=result.link,
        ok=result.ok,
        message=mark(result.message, choice),
        details={**result.details, SIMULATED: True},
    )


def _check_backend(
    link: str,
    check: Callable[[GpuBackend], CheckResult],
    backend: BackendKind | None,
    preset: str | None,
    topology: str | None,
    directory: Path,
    output: OutputFormat,
) -> None:
    """Run a check that needs the GPUs; a simulated default never writes the real ready-file directory."""
    choice = resolve_backend(backend)
    if directory == DEFAULT_DIR:
        refuse_implicit_sim(choice, target=f"the node's ready files ({DEFAULT_DIR})", elsewhere="pass --dir DIR")
    try:
        b = open_backend(choice.kind, preset=preset, topology=topology)
    except BACKEND_ERRORS as exc:
        _finish(CheckResult(link=link, ok=False, message=str(exc)), directory, output)
        return
    try:
        _finish(_simulated(check(b), choice), directory, output)
    finally:
        b.close()


def _finish(result: CheckResult, directory: Path, output: OutputFormat) -> None:
    """Write the ready file on success, print the result, exit 1 on failure."""
    data: dict[str, Any] = {"link": result.link, "ok": result.ok, "message": result.message, **result.details}
    files = ReadyFiles(directory)
    if result.ok:
        data["readyFile"] = str(files.write(result.link, result.details))
    else:
        files.clear(result.link)

    def table() -> Table:
        t = Table(show_header=False, box=None)
        verdict = Text("ok", style="green") if result.ok else Text("failed", style="red")
        t.add_row(Text(result.link, style="bold"), verdict, result.message)
        if result.ok:
            t.add_row("", "ready file", data["readyFile"])
        return t

    emit(data, fmt=output, table=table)
    if not result.ok:
        fail(f"{result.link} validation failed: {result.message}", code=1)


@validate_app.command("driver")
def driver(
    backend: BackendKind | None = node_backend_option(),
    *,
    preset: str | None = preset_option(),
    topology: str | None = topology_option(),
    directory: Path = _dir_option(),
    output: OutputFormat = output_option(),
) -> None:
    """The driver works: NVML loads and lists GPUs. Writes driver-ready."""
    _check_backend("driver", check_driver, backend, preset, topology, directory, output)


@validate_app.command("toolkit")
def toolkit(
    backend: BackendKind | None = node_backend_option(),
    *,
    preset: str | None = preset_option(),
    topology: str | None = topology_option(),
    dev_dir: Path = typer.Option(Path("/dev"), "--dev-dir", help="Where the runtime injects GPU device nodes."),
    directory: Path = _dir_option(),
    output: OutputFormat = output_option(),
) -> None:
    """The container runtime injects GPUs: device nodes present and NVML works. Writes toolkit-ready."""
    _check_backend("toolkit", lambda b: check_toolkit(b, dev_dir), backend, preset, topology, directory, output)


@validate_app.command("cuda")
def cuda(directory: Path = _dir_option(), output: OutputFormat = output_option()) -> None:
    """CUDA initialises and sees devices (cuInit on libcuda.so.1). Writes cuda-ready."""
    _finish(check_cuda(), directory, output)


@validate_app.command("plugin")
def plugin(
    node: str = typer.Option("", "--node", envvar="NODE_NAME", help="Node to check (default $NODE_NAME)."),
    *,
    server: str | None = typer.Option(None, "--server", help="API server URL (default: in-cluster or kubeconfig)."),
    kubeconfig: str | None = typer.Option(
        None, "--kubeconfig", help="kubeconfig file (default: in-cluster, $KUBECONFIG, ~/.kube/config)."
    ),
    context: str | None = typer.Option(None, "--context", help="kubeconfig context to use."),
    tries: int = typer.Option(30, "--tries", min=1, help="How many times to look before giving up."),
    interval: float = typer.Option(5.0, "--interval", min=0, help="Seconds between tries."),
    directory: Path = _dir_option(),
    output: OutputFormat = output_option(),
) -> None:
    """The device plugin registered: the node advertises nvidia.com/gpu or mig resources. Writes plugin-ready."""
    if not node:
        fail("no node: pass --node or set NODE_NAME (the operator sets it from spec.nodeName)")
    cluster = open_cluster(kubeconfig, context=context, server=server, hint="or pass --kubeconfig or --server")
    result = check_plugin(cluster, node)
    for _ in range(tries - 1):
        if result.ok:
            break
        time.sleep(interval)
        result = check_plugin(cluster, node)
    _finish(result, directory, output)


@validate_app.command("wait")
def wait(
    link: str = typer.Argument(..., help="driver, toolkit, cuda or plugin"),
    *,
    timeout: float | None = typer.Option(None, "--timeout", help="Give up after this many seconds (exit 1)."),
    interval: float = typer.Option(5.0, "--interval", min=0.01, help="Seconds between looks."),
    directory: Path = _dir_option(),
) -> None:
    """Block until <link>-ready exists (init containers of the links above it)."""
    files = ReadyFiles(directory)
    try:
        ok = files.wait(link, timeout=timeout, interval=interval)
    except ValueError as exc:
        fail(str(exc))
    if not ok:
        fail(f"{files.path(link)} did not appear within {timeout}s: validate {link} has not passed", code=1)
    typer.echo(f"{link} ready ({files.path(link)})")


def register(app: typer.Typer) -> None:
    app.add_typer(validate_app, name="validate")
