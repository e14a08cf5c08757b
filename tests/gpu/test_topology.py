"""Topology files and presets: what they build, and how bad files are reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.gpu.errors import InvalidConfigError
from gpuchain.gpu.model import TopologyLevel
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.topology import load_preset, load_topology, preset_names

REQUIRED = {"a100-40gb-x8", "a100-80gb-x8", "h100-80gb-x8", "h200-141gb-x8", "l4-x2", "h100-80gb-x8-mig-mixed"}


def test_required_presets_ship() -> None:
    assert set(preset_names()) >= REQUIRED


def test_h100_preset_is_eight_nvswitch_gpus() -> None:
    inv = SimBackend(load_preset("h100-80gb-x8")).inventory()
    assert len(inv.gpus) == 8
    assert len({g.uuid for g in inv.gpus}) == 8
    assert all(g.memory_mib == 81559 and g.name == "NVIDIA H100 80GB HBM3" for g in inv.gpus)
    assert len(inv.links) == 28
    assert all(link.nvlinks == 18 for link in inv.links)
    assert inv.link(0, 1).level is TopologyLevel.MULTIPLE  # type: ignore[union-attr]
    assert inv.link(0, 7).level is TopologyLevel.SYSTEM  # type: ignore[union-attr]


def test_l4_preset_is_pcie_only() -> None:
    inv = SimBackend(load_preset("l4-x2")).inventory()
    assert [g.mig_capable for g in inv.gpus] == [False, False]
    assert inv.links[0].nvlinks == 0


def test_mig_preset_lists_profiles() -> None:
    inv = SimBackend(load_preset("h100-80gb-x8-mig-mixed")).inventory()
    profiles = [m.profile for m in inv.mig_devices]
    assert profiles.count("1g.10gb") == 4 * 2 + 2 * 7
    assert profiles.count("2g.20gb") == 4
    assert profiles.count("3g.40gb") == 4
    assert all(m.uuid.startswith("MIG-") for m in inv.mig_devices)
    assert [g.mig_enabled for g in inv.gpus] == [True] * 6 + [False] * 2


def test_node_name_seeds_uuids() -> None:
    a = SimBackend(load_preset("h100-80gb-x8", node="node-a")).inventory()
    b = SimBackend(load_preset("h100-80gb-x8", node="node-b")).inventory()
    again = SimBackend(load_preset("h100-80gb-x8", node="node-a")).inventory()
    assert {g.uuid for g in a.gpus}.isdisjoint({g.uuid for g in b.gpus})
    assert a == again


def test_unknown_preset_lists_the_available_ones() -> None:
    with pytest.raises(InvalidConfigError, match="unknown preset 'h300'.*h100-80gb-x8"):
        load_preset("h300")


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "node.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("text", "line", "field", "reason"),
    [
        ("gpus:\n  - model: H100-80GB\n    count: 8\n    colour: red\n", 4, "gpus.0.colour", "unknown field"),
        ("gpus:\n  - model: V100\n", 2, "gpus.0.model", "unknown GPU model 'V100'"),
        ("gpus:\n  - model: H100-80GB\n    mig: {1g.10gb: 8}\n", 3, "gpus.0.mig", "at most 7 per GPU"),
        ("driver:\n  cudaVersion: twelve\ngpus:\n  - model: L4\n", 2, "driver.cudaVersion", "should match pattern"),
        ("gpus: []\n", 1, "gpus", "at least 1 item"),
        ("gpus:\n  - model: L4\n    count: 2\n    numaNodes: [0]\n", 4, "gpus.0.numaNodes", "1 entries for 2 GPUs"),
        (
            "gpus:\n  - model: L4\nlinks:\n  - {gpus: [0, 3]}\n",
            3,
            "links",
            "entry 0: gpus [0, 3] must name two different GPUs in 0..0",
        ),
        ("gpus: [\n", 2, "", "not valid YAML"),
    ],
)
def test_bad_topology_names_line_and_field(tmp_path: Path, text: str, line: int, field: str, reason: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigFileError) as info:
        load_topology(path)
    err = info.value
    assert (err.line, err.field) == (line, field)
    assert reason in err.reason
    assert str(err).startswith(f"{path}:{line}: ")
    assert "\n" not in str(err)


def test_explicit_links_override(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "interconnect: pcie\ngpus:\n  - model: L4\n    count: 3\n    numaNodes: [0, 0, 0]\n"
        "links:\n  - {gpus: [0, 2], level: PIX, nvlinks: 2}\n",
    )
    inv = SimBackend(load_topology(path)).inventory()
    assert inv.link(2, 0).level is TopologyLevel.SINGLE  # type: ignore[union-attr]
    assert inv.link(0, 2).nvlinks == 2  # type: ignore[union-attr]
    assert inv.link(0, 1).nvlinks == 0  # type: ignore[union-attr]
