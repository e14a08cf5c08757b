"""`gpuchain gpus`: what the GPU layer sees on this node (or a simulated one)."""

from __future__ import annotations

import typer
from rich.console import Group
from rich.table import Table

from gpuchain.commands._backend import (
    BACKEND_ERRORS,
    BackendKind,
    backend_option,
    open_backend,
    preset_option,
    topology_option,
)
from gpuchain.commands._cluster import SIMULATED
from gpuchain.commands._format import OutputFormat
from gpuchain.commands._output import emit, fail, output_option, records
from gpuchain.gpu.model import Inventory


def _tables(inv: Inventory, simulated: bool, wide: bool = False) -> Group:
    """GPUs, MIG devices, topology; ``wide`` adds the device node minor and the PCI device id."""
    title = f"Driver {inv.driver.version}, CUDA {inv.driver.cuda_version}" + (f" ({SIMULATED})" if simulated else "")
    gpus = Table(title=title, title_justify="left")
    extra = ("Minor", "PCI device id") if wide else ()
    for col in ("GPU", "UUID", "Name", "Memory MiB", "CC", "NUMA", "PCI bus", "MIG", *extra):
        gpus.add_column(col)
    for g in inv.gpus:
        mig = "enabled" if g.mig_enabled else ("disabled" if g.mig_capable else "n/a")
        numa = "-" if g.numa_node is None else str(g.numa_node)
        cc = f"{g.compute_capability[0]}.{g.compute_capability[1]}"
        more = (str(g.minor_number), f"0x{g.pci_device_id:08X}") if wide else ()
        gpus.add_row(str(g.index), g.uuid, g.name, str(g.memory_mib), cc, numa, g.pci_bus_id, mig, *more)
    parts: list[Table] = [gpus]
    if inv.mig_devices:
        migs = Table(title="MIG devices", title_justify="left")
        for col in ("GPU", "MIG", "Profile", "UUID", "GI", "CI", "Memory MiB"):
            migs.add_column(col)
        for m in inv.mig_devices:
            migs.add_row(
                str(m.parent_index), str(m.index), m.profile, m.uuid, str(m.gi_id), str(m.ci_id), str(m.memory_mib)
            )
        parts.append(migs)
    if inv.links:
        topo = Table(title="Topology (NVLink lanes / PCIe common ancestor)", title_justify="left")
        topo.add_column("")
        for g in inv.gpus:
            topo.add_column(f"GPU{g.index}")
        for a in inv.gpus:
            cells = []
            for b in inv.gpus:
                link = inv.link(a.index, b.index)
                cells.append("X" if link is None else (f"NV{link.nvlinks}" if link.nvlinks else link.level.short))
            topo.add_row(f"GPU{a.index}", *cells)
        parts.append(topo)
    return Group(*parts)


def gpus(
    backend: BackendKind = backend_option(),
    *,
    preset: str | None = preset_option(),
    topology: str | None = topology_option(),
    output: OutputFormat = output_option(),
) -> None:
    """List GPUs, MIG devices and the GPU-to-GPU topology.

    Runs on a simulated H100 node by default; try --preset h100-80gb-x8-mig-mixed, or
    --backend nvml on a machine with NVIDIA GPUs.
    """
    try:
        b = open_backend(backend, preset=preset, topology=topology)
        try:
            inv = b.inventory()
        finally:
            b.close()
    except BACKEND_ERRORS as exc:
        fail(str(exc))
    simulated = backend is BackendKind.sim
    data = {**records(inv), SIMULATED: simulated}
    emit(data, fmt=output, table=lambda: _tables(inv, simulated, wide=output is OutputFormat.wide))


def register(app: typer.Typer) -> None:
    app.command("gpus")(gpus)
