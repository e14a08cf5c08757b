"""Topology files: a declarative description of one node's GPUs, for the simulated backend.

A topology names GPU models from the catalog, how many, their NUMA nodes, how they are wired
and, optionally, a MIG layout per group. Presets are topology files shipped in
``gpuchain/gpu/presets/``; ``gpuchain gpus --topology FILE`` reads a user's own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from gpuchain.common.schema import define, spec
from gpuchain.common.uuid5 import NAMESPACE_URL, uuid5
from gpuchain.common.yamlfile import load_yaml_file, validate_data
from gpuchain.gpu import catalog, shipped
from gpuchain.gpu.errors import InvalidConfigError
from gpuchain.gpu.model import DriverInfo, GpuLink, TopologyLevel

_LEVELS = {lvl.short: lvl for lvl in TopologyLevel if lvl is not TopologyLevel.INTERNAL}


@define
class DriverSpec:
    version: str = "570.86.15"
    cuda_version: str = spec(default="12.8", key="cudaVersion", pattern=r"^\d+\.\d+$")


def _known_model(v: str, _: Mapping[str, Any]) -> str:
    return catalog.model(v).key


def _one_numa_node_each(v: list[int] | None, data: Mapping[str, Any]) -> list[int] | None:
    count = data.get("count")
    if v is not None and count is not None and len(v) != count:
        raise ValueError(f"{len(v)} entries for {count} GPUs")
    return v


def _layout_fits(v: dict[str, int] | None, data: Mapping[str, Any]) -> dict[str, int] | None:
    if v is not None and "model" in data:
        catalog.place_layout(catalog.model(data["model"]), v)
    return v


@define
class GpuGroup:
    """``count`` GPUs of one model. ``mig`` set means MIG enabled with that layout."""

    model: str = spec(check=_known_model)
    count: int = spec(default=1, ge=1, le=64)
    numa_nodes: list[int] | None = spec(default=None, key="numaNodes", check=_one_numa_node_each)
    mig: dict[str, int] | None = spec(default=None, check=_layout_fits)


@define
class LinkSpec:
    """An explicit link between two GPU indexes, overriding the derived one."""

    gpus: tuple[int, int]
    level: Literal["PIX", "PXB", "PHB", "NODE", "SYS"] = "NODE"
    nvlinks: int = spec(default=0, ge=0)


def _links_in_range(v: list[LinkSpec], data: Mapping[str, Any]) -> list[LinkSpec]:
    n = sum(g.count for g in data.get("gpus", []))
    for i, link in enumerate(v):
        a, b = link.gpus
        if a == b or not (0 <= a < n and 0 <= b < n):
            raise ValueError(f"entry {i}: gpus {list(link.gpus)} must name two different GPUs in 0..{n - 1}")
    return v


@define(kw_only=True)
class Topology:
    """One node's GPUs. ``interconnect`` decides NVLink wiring when ``links`` does not."""

    node: str = "sim-node"
    driver: DriverSpec = DriverSpec()
    interconnect: Literal["nvswitch", "pcie"] | None = None
    gpus: list[GpuGroup] = spec(min_length=1)
    links: list[LinkSpec] = spec(default_factory=list, check=_links_in_range)

    @property
    def gpu_count(self) -> int:
        return sum(g.count for g in self.gpus)

    def driver_info(self) -> DriverInfo:
        return DriverInfo(self.driver.version, self.driver.cuda_version)

    def expanded(self) -> list[SimGpuSpec]:
        """One spec per GPU, in index order, with UUIDs stable for this node name."""
        out: list[SimGpuSpec] = []
        total = self.gpu_count
        for group in self.gpus:
            for j in range(group.count):
                i = len(out)
                numa = group.numa_nodes[j] if group.numa_nodes is not None else (0 if i < (total + 1) // 2 else 1)
                out.append(
                    SimGpuSpec(
                        index=i,
                        uuid=stable_uuid("GPU", f"{self.node}/{i}"),
                        model=catalog.model(group.model),
                        numa_node=numa,
                        mig=dict(group.mig) if group.mig is not None else None,
                        pci_bus_id=f"{i // len(_BUS_IDS):08X}:{_BUS_IDS[i % len(_BUS_IDS)]:02X}:00.0",
                    )
                )
        return out

    def gpu_links(self) -> tuple[GpuLink, ...]:
        """Pairwise links: explicit ``links`` win; otherwise NVSwitch or PCIe by the rules below.

        PCIe: GPUs 2k and 2k+1 share a PCIe switch (PXB), others on one NUMA node meet at the
        host (NODE), across NUMA nodes at the system (SYS). NVSwitch: every pair gets the
        smaller of the two cards' NVLink counts.
        """
        specs = self.expanded()
        explicit = {tuple(sorted(link.gpus)): link for link in self.links}
        interconnect = self.interconnect or (
            "nvswitch" if all(s.model.nvlinks for s in specs) and len(specs) > 1 else "pcie"
        )
        links = []
        for a in specs:
            for b in specs[a.index + 1 :]:
                spec = explicit.get((a.index, b.index))
                if spec is not None:
                    links.append(GpuLink(a=a.index, b=b.index, level=_LEVELS[spec.level], nvlinks=spec.nvlinks))
                    continue
                if a.numa_node != b.numa_node:
                    level = TopologyLevel.SYSTEM
                elif a.index // 2 == b.index // 2:
                    level = TopologyLevel.MULTIPLE
                else:
                    level = TopologyLevel.NODE
                nvlinks = min(a.model.nvlinks, b.model.nvlinks) if interconnect == "nvswitch" else 0
                links.append(GpuLink(a=a.index, b=b.index, level=level, nvlinks=nvlinks))
        return tuple(links)


@define
class SimGpuSpec:
    """One expanded GPU of a topology."""

    index: int
    uuid: str
    model: catalog.GpuModel
    numa_node: int
    mig: dict[str, int] | None
    pci_bus_id: str


# Bus numbers of the eight GPUs on an HGX baseboard, so simulated ids look like real ones.
_BUS_IDS = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def stable_uuid(prefix: str, seed: str) -> str:
    """A UUID string in NVML's format (``GPU-…``/``MIG-…``) derived from ``seed``.

    Deterministic, so a simulated node keeps its UUIDs across restarts as a real one does.
    """
    return f"{prefix}-{uuid5(NAMESPACE_URL, 'gpuchain:' + seed)}"


def preset_names() -> list[str]:
    """Names of the shipped presets (``presets/*.yaml``)."""
    return shipped.names("presets")


def load_preset(name: str, node: str | None = None) -> Topology:
    """A shipped preset by name (its data as ``gpu.shipped`` keeps it: a simulated node agent loads
    no PyYAML); ``node`` renames the node (and so reseeds its UUIDs)."""
    try:
        data = shipped.data(f"presets/{name}.yaml")
    except KeyError:
        raise InvalidConfigError(f"unknown preset {name!r}; available presets: {', '.join(preset_names())}") from None
    topo = validate_data(Topology, data=data, source=f"preset {name}")
    return dataclasses.replace(topo, node=node) if node else topo


def load_topology(path: str) -> Topology:
    """A user's topology file; raises ConfigFileError with file, line and field."""
    return load_yaml_file(Topology, path=path)
