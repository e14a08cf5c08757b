"""Resource mapping: MIG strategies, time-slicing replicas, renames (pure, on simulated inventories)."""

from __future__ import annotations

import pytest

from gpuchain.api.config.v1.config import parse_config
from gpuchain.api.config.v1.flags import MigStrategy
from gpuchain.deviceplugin.resources import (
    GPU_RESOURCE,
    ResourceMappingError,
    map_resources,
    mig_strategy_problems,
)
from gpuchain.gpu.sim import SimBackend


def _by_name(sim: SimBackend, text: str) -> dict[str, list[str]]:
    return {r.name: [d.id for d in r.devices] for r in map_resources(sim.inventory(), parse_config(text))}


def test_none_announces_every_gpu(h100_sim: SimBackend) -> None:
    resources = map_resources(h100_sim.inventory(), parse_config(""))
    assert [r.name for r in resources] == [GPU_RESOURCE]
    gpu = resources[0]
    assert [d.id for d in gpu.devices] == [g.uuid for g in h100_sim.inventory().gpus]
    assert gpu.endpoint == "nvidia-gpu.sock"
    assert {d.numa_node for d in gpu.devices} == {g.numa_node for g in h100_sim.inventory().gpus}


def test_none_ignores_mig_mode(mig_sim: SimBackend) -> None:
    assert list(_by_name(mig_sim, "flags: {migStrategy: none}")) == [GPU_RESOURCE]
    assert len(_by_name(mig_sim, "flags: {migStrategy: none}")[GPU_RESOURCE]) == 8


def test_mixed_gives_one_resource_per_profile(mig_sim: SimBackend) -> None:
    res = _by_name(mig_sim, "flags: {migStrategy: mixed}")
    assert {k: len(v) for k, v in res.items()} == {
        GPU_RESOURCE: 2,
        "nvidia.com/mig-1g.10gb": 4 * 2 + 2 * 7,
        "nvidia.com/mig-2g.20gb": 4,
        "nvidia.com/mig-3g.40gb": 4,
    }
    assert all(i.startswith("MIG-") for i in res["nvidia.com/mig-1g.10gb"])


def test_mixed_resource_endpoint_names(mig_sim: SimBackend) -> None:
    endpoints = {r.endpoint for r in map_resources(mig_sim.inventory(), parse_config("flags: {migStrategy: mixed}"))}
    assert "nvidia-mig-1g.10gb.sock" in endpoints


def test_single_is_invalid_when_profiles_differ_or_mig_mixes(mig_sim: SimBackend) -> None:
    problems = mig_strategy_problems(mig_sim.inventory(), MigStrategy.SINGLE)
    assert any("MIG disabled" in p for p in problems)
    assert any("more than one MIG profile" in p for p in problems)
    with pytest.raises(ResourceMappingError, match="migStrategy single"):
        map_resources(mig_sim.inventory(), parse_config("flags: {migStrategy: single}"))


def test_single_with_uniform_layout_announces_mig_devices_as_gpu(h100_sim: SimBackend) -> None:
    for i in range(8):
        h100_sim.set_mig_layout(i, {"1g.10gb": 7})
    res = _by_name(h100_sim, "flags: {migStrategy: single}")
    assert list(res) == [GPU_RESOURCE]
    assert len(res[GPU_RESOURCE]) == 56


def test_single_with_mig_enabled_but_empty_is_invalid(h100_sim: SimBackend) -> None:
    for i in range(8):
        h100_sim.set_mig_layout(i, {"1g.10gb": 7} if i else {})
    assert any("no MIG devices" in p for p in mig_strategy_problems(h100_sim.inventory(), MigStrategy.SINGLE))


def test_single_without_any_mig_falls_back_to_whole_gpus(h100_sim: SimBackend) -> None:
    assert len(_by_name(h100_sim, "flags: {migStrategy: single}")[GPU_RESOURCE]) == 8


def test_time_slicing_replica_ids(h100_sim: SimBackend) -> None:
    resources = map_resources(
        h100_sim.inventory(), parse_config("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 4}]}}")
    )
    (gpu,) = resources
    assert gpu.name == GPU_RESOURCE and gpu.shared and gpu.replicas == 4 and not gpu.renamed
    first = h100_sim.inventory().gpus[0].uuid
    assert [d.id for d in gpu.devices[:4]] == [f"{first}::{i}" for i in range(4)]
    assert len(gpu.devices) == 32
    assert gpu.sharing == "time-slicing"


def test_rename_by_default_and_explicit_rename(h100_sim: SimBackend) -> None:
    shared = _by_name(
        h100_sim, "sharing: {timeSlicing: {renameByDefault: true, resources: [{name: gpu, replicas: 2}]}}"
    )
    assert list(shared) == ["nvidia.com/gpu.shared"]
    renamed = _by_name(h100_sim, "sharing: {timeSlicing: {resources: [{name: gpu, rename: gpu.ts, replicas: 2}]}}")
    assert list(renamed) == ["nvidia.com/gpu.ts"]


def test_partial_device_selection_keeps_the_rest_whole(h100_sim: SimBackend) -> None:
    inv = h100_sim.inventory()
    text = f"""
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: gpu
      replicas: 3
      devices: [0, "{inv.gpus[1].uuid}"]
"""
    res = _by_name(h100_sim, text)
    assert len(res[GPU_RESOURCE]) == 6
    assert len(res["nvidia.com/gpu.shared"]) == 6
    assert {i.split("::")[0] for i in res["nvidia.com/gpu.shared"]} == {inv.gpus[0].uuid, inv.gpus[1].uuid}


def test_device_count_selects_the_first_gpus(h100_sim: SimBackend) -> None:
    res = _by_name(
        h100_sim, "sharing: {timeSlicing: {renameByDefault: true, resources: [{name: gpu, replicas: 2, devices: 3}]}}"
    )
    assert len(res["nvidia.com/gpu.shared"]) == 6 and len(res[GPU_RESOURCE]) == 5
    with pytest.raises(ResourceMappingError, match="asks to replicate 9 devices"):
        _by_name(h100_sim, "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: 9}]}}")


def test_mig_replicas_use_the_mig_uuid(mig_sim: SimBackend) -> None:
    text = "flags: {migStrategy: mixed}\nsharing: {timeSlicing: {resources: [{name: mig-1g.10gb, replicas: 2}]}}"
    res = _by_name(mig_sim, text)
    ids = res["nvidia.com/mig-1g.10gb"]
    assert len(ids) == 44 and all(i.startswith("MIG-") and "::" in i for i in ids)


def test_resource_patterns_rename_products(h100_sim: SimBackend) -> None:
    res = _by_name(h100_sim, "resources: {gpus: [{pattern: '*H100*', name: h100}]}")
    assert list(res) == ["nvidia.com/h100"]
