"""`gpuchain mig apply|assert|config`: mig-parted's verbs over the MIG layer.

With no `-f` the built-in layouts (all-disabled, all-enabled, all-balanced, all-<profile>) are
used. `MIG_PARTED_CONFIG_FILE` and `MIG_PARTED_SELECTED_CONFIG` work as in mig-parted.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import typer

from gpuchain.commands._backend import (
    BACKEND_ERRORS,
    BackendKind,
    backend_option,
    backend_or_fail,
    preset_option,
    topology_option,
)
from gpuchain.commands._cluster import SIMULATED
from gpuchain.commands._format import OutputFormat
from gpuchain.commands._output import emit, fail, output_option
from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.model import Inventory
from gpuchain.mig.apply import ApplyResult, MigApplyError, ResetRequiredError, apply, check
from gpuchain.mig.config import LayoutError, MigPartedConfig, config_or_default

if TYPE_CHECKING:
    from rich.console import Group
    from rich.table import Table

mig_app = typer.Typer(
    help="Declarative MIG layouts (mig-parted v1 config): apply one, assert one, print the built-in config.",
    no_args_is_help=True,
)


def _file_option() -> Any:
    return typer.Option(
        None,
        "-f",
        "--config-file",
        envvar="MIG_PARTED_CONFIG_FILE",
        help="mig-parted v1 config file (default: the built-in layouts).",
    )


def _name_option() -> Any:
    return typer.Option(
        ..., "-c", "--selected-config", envvar="MIG_PARTED_SELECTED_CONFIG", help="Name of the layout to use."
    )


def mig_config(path: str | None) -> MigPartedConfig:
    """The config file ``path``, or the built-in layouts; a bad file exits 2 naming file and line."""
    try:
        return config_or_default(path)
    except ConfigFileError as exc:
        fail(str(exc), also=exc.others)


def _after(result: ApplyResult, inv: Inventory) -> list[dict[str, Any]]:
    """Each GPU as the apply leaves it: read back after a real apply, planned on a dry run
    (the GPUs the layout selects get their target; the others stay as they are)."""
    planned = {t.index: t for t in result.targets} if not result.applied else {}
    rows: list[dict[str, Any]] = []
    for g in inv.gpus:
        target = planned.get(g.index)
        if target is not None:
            enabled = target.enabled
            names = [n for p in target.placements for n in p.device_names]
        else:
            enabled = g.mig_enabled
            names = [m.profile for m in g.mig_devices]
        mig = ("enabled" if enabled else "disabled") if g.mig_capable else "n/a"
        rows.append({"index": g.index, "name": g.name, "mig": mig, "devices": dict(Counter(names))})
    return rows


def _devices_table(result: ApplyResult, inv: Inventory, simulated: bool) -> Table:
    from rich.table import Table

    planned = result.steps and not result.applied
    title = "GPUs after apply (planned; nothing was changed)" if planned else "GPUs after apply"
    title += f" ({SIMULATED})" if simulated else ""
    table = Table(title=title, title_justify="left")
    for col in ("GPU", "Name", "MIG", "MIG devices"):
        table.add_column(col)
    for row in _after(result, inv):
        devices = ", ".join(f"{c}x {p}" for p, c in row["devices"].items()) or "-"
        table.add_row(str(row["index"]), row["name"], row["mig"], devices)
    return table


def _apply_view(result: ApplyResult, inv: Inventory, simulated: bool) -> Group:
    from rich.console import Group
    from rich.text import Text

    if not result.steps:
        head = Text(f"node already has MIG layout {result.config!r}; nothing to do")
    else:
        verb = "applied" if result.applied else "would apply (dry run)"
        lines = [f"{verb} MIG layout {result.config!r}: {len(result.steps)} steps on GPU "]
        lines[0] += ", ".join(map(str, result.changed_gpus))
        lines.extend(f"  {s.describe()}" for s in result.steps)
        head = Text("\n".join(lines))
    return Group(head, _devices_table(result, inv, simulated))


@mig_app.command("apply")
def apply_cmd(
    config_file: str | None = _file_option(),
    *,
    selected: str = _name_option(),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the steps without changing anything."),
    backend: BackendKind = backend_option(),
    preset: str | None = preset_option(),
    topology: str | None = topology_option(),
    output: OutputFormat = output_option(),
) -> None:
    """Give this node's GPUs the named layout; touches only GPUs that differ (idempotent).

    Exit 0 on success, 2 on a bad config or a layout the GPUs cannot hold (nothing changed),
    1 when the hardware refused (the node is restored) or a GPU reset is needed.
    """
    config = mig_config(config_file)
    b = backend_or_fail(backend, preset=preset, topology=topology)
    try:
        result = apply(b, config=config, name=selected, dry_run=dry_run)
        inv = b.inventory()
    except LayoutError as exc:
        fail(str(exc))
    except (ResetRequiredError, MigApplyError) as exc:
        fail(str(exc), code=1)
    except BACKEND_ERRORS as exc:
        fail(str(exc), code=1)
    finally:
        _close(b)
    simulated = backend is BackendKind.sim
    data: dict[str, Any] = {
        "config": result.config,
        "applied": result.applied,
        "steps": [s.describe() for s in result.steps],
        "gpus": inv.gpus,
        SIMULATED: simulated,
    }
    if dry_run:
        data["planned"] = _after(result, inv)
    emit(data, fmt=output, table=lambda: _apply_view(result, inv, simulated))


@mig_app.command("assert")
def assert_cmd(
    config_file: str | None = _file_option(),
    *,
    selected: str = _name_option(),
    backend: BackendKind = backend_option(),
    preset: str | None = preset_option(),
    topology: str | None = topology_option(),
    output: OutputFormat = output_option(),
) -> None:
    """Exit 0 only if the node already has the named layout; otherwise list what differs (exit 1)."""
    config = mig_config(config_file)
    b = backend_or_fail(backend, preset=preset, topology=topology)
    try:
        diffs = check(b, config=config, name=selected)
    except LayoutError as exc:
        fail(str(exc))
    except BACKEND_ERRORS as exc:
        fail(str(exc), code=1)
    finally:
        _close(b)
    ok = not diffs
    simulated = backend is BackendKind.sim
    mark = f" ({SIMULATED})" if simulated else ""
    text = f"node has MIG layout {selected!r}{mark}"
    if not ok:
        text = "\n".join([f"node lacks MIG layout {selected!r}{mark}:", *diffs])
    from rich.text import Text

    emit(
        {"config": selected, "matches": ok, "differences": diffs, SIMULATED: simulated},
        fmt=output,
        table=lambda: Text(text),
    )
    if not ok:
        raise typer.Exit(1)


@mig_app.command("config")
def config_cmd(config_file: str | None = _file_option()) -> None:
    """Print the config (validated) in mig-parted's format: the built-in layouts by default."""
    typer.echo(mig_config(config_file).to_yaml(), nl=False)


def _close(backend: GpuBackend) -> None:
    backend.close()


def register(app: typer.Typer) -> None:
    app.add_typer(mig_app, name="mig")
