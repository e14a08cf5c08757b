"""Allocate answers for each device list strategy, id strategy and passDeviceSpecs (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.driver_root import driver_dev

from gpuchain.api.config.v1.config import parse_config
from gpuchain.api.config.v1.flags import PluginFlags
from gpuchain.common.schema import validate
from gpuchain.deviceplugin.allocate import (
    VOLUME_MOUNT_ROOT,
    AllocationError,
    allocate_container,
)
from gpuchain.deviceplugin.resources import Resource, map_resources
from gpuchain.gpu.sim import SimBackend


def _flags(**plugin: object) -> PluginFlags:
    return validate(PluginFlags, plugin)


def _gpu(sim: SimBackend, text: str = "") -> Resource:
    return map_resources(sim.inventory(), parse_config(text))[0]


def test_envvar_lists_uuids(h100_sim: SimBackend) -> None:
    res = _gpu(h100_sim)
    ids = [res.devices[2].id, res.devices[5].id]
    alloc = allocate_container(res, ids=ids, flags=_flags())
    assert alloc.envs == {"NVIDIA_VISIBLE_DEVICES": ",".join(ids)}
    assert alloc.mounts == () and alloc.devices == () and alloc.cdi_devices == ()


def test_index_strategy(h100_sim: SimBackend, mig_sim: SimBackend) -> None:
    res = _gpu(h100_sim)
    alloc = allocate_container(res, ids=[res.devices[3].id], flags=_flags(deviceIDStrategy="index"))
    assert alloc.envs["NVIDIA_VISIBLE_DEVICES"] == "3"
    mig = next(
        r for r in map_resources(mig_sim.inventory(), parse_config("flags: {migStrategy: mixed}")) if r.mig_profile
    )
    alloc = allocate_container(mig, ids=[mig.devices[1].id], flags=_flags(deviceIDStrategy="index"))
    d = mig.devices[1]
    assert alloc.envs["NVIDIA_VISIBLE_DEVICES"] == f"{d.gpu_index}:{d.mig_index}"


def test_volume_mounts(h100_sim: SimBackend) -> None:
    res = _gpu(h100_sim)
    uuid = res.devices[0].id
    alloc = allocate_container(res, ids=[uuid], flags=_flags(deviceListStrategy="volume-mounts"))
    assert alloc.envs == {"NVIDIA_VISIBLE_DEVICES": VOLUME_MOUNT_ROOT}
    assert [(m.container_path, m.host_path, m.read_only) for m in alloc.mounts] == [
        (f"{VOLUME_MOUNT_ROOT}/{uuid}", "/dev/null", False)
    ]


def test_cdi_annotations_and_cri(h100_sim: SimBackend) -> None:
    res = _gpu(h100_sim)
    uuid = res.devices[0].id
    ann = allocate_container(res, ids=[uuid], flags=_flags(deviceListStrategy="cdi-annotations"))
    ((key, value),) = ann.annotations.items()
    assert key.startswith("cdi.k8s.io/nvidia-device-plugin_")
    assert value == f"k8s.device-plugin.nvidia.com/gpu={uuid}"
    assert ann.cdi_devices == () and "NVIDIA_VISIBLE_DEVICES" not in ann.envs
    cri = allocate_container(res, ids=[uuid], flags=_flags(deviceListStrategy="cdi-cri"))
    assert cri.cdi_devices == (f"k8s.device-plugin.nvidia.com/gpu={uuid}",) and not cri.annotations
    prefixed = allocate_container(
        res, ids=[uuid], flags=_flags(deviceListStrategy="cdi-annotations", cdiAnnotationPrefix="x.io/")
    )
    assert next(iter(prefixed.annotations)).startswith("x.io/")


def test_pass_device_specs(h100_sim: SimBackend, mig_sim: SimBackend, driver_root: Path) -> None:
    res = _gpu(h100_sim)
    alloc = allocate_container(
        res, ids=[res.devices[4].id], flags=_flags(passDeviceSpecs=True), dev_root=str(driver_root)
    )
    paths = [d.container_path for d in alloc.devices]
    assert paths == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia4"]
    assert {d.permissions for d in alloc.devices} == {"rw"}
    mig = next(
        r for r in map_resources(mig_sim.inventory(), parse_config("flags: {migStrategy: mixed}")) if r.mig_profile
    )
    alloc = allocate_container(mig, ids=[mig.devices[0].id], flags=_flags(passDeviceSpecs=True))
    caps = [d.container_path for d in alloc.devices if d.container_path.startswith("/dev/nvidia-caps/")]
    assert len(caps) == 2


def test_modeset_is_passed_when_the_driver_created_it(h100_sim: SimBackend, driver_root: Path) -> None:
    driver_dev(driver_root, "/dev/nvidia-modeset")
    res = _gpu(h100_sim)
    alloc = allocate_container(
        res, ids=[res.devices[4].id], flags=_flags(passDeviceSpecs=True), dev_root=str(driver_root)
    )
    paths = [d.container_path for d in alloc.devices]
    assert paths == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-modeset",
        "/dev/nvidia4",
    ]
    assert alloc.devices[3].host_path == f"{driver_root}/dev/nvidia-modeset"


def test_dev_root_prefixes_host_paths(h100_sim: SimBackend, driver_root: Path) -> None:
    res = _gpu(h100_sim)
    alloc = allocate_container(
        res, ids=[res.devices[0].id], flags=_flags(passDeviceSpecs=True), dev_root=str(driver_root)
    )
    assert alloc.devices[0].host_path == f"{driver_root}/dev/nvidiactl"
    assert alloc.devices[0].container_path == "/dev/nvidiactl"


def test_a_control_device_the_driver_has_not_made_is_left_out(h100_sim: SimBackend, tmp_path: Path) -> None:
    """As NVIDIA's plugin: /dev/nvidia-uvm before nvidia-modprobe ran would make the runtime refuse
    the container, so only the GPU's own node and the control nodes present are passed."""
    res = _gpu(h100_sim)
    root = driver_dev(tmp_path, "/dev/nvidiactl")
    alloc = allocate_container(res, ids=[res.devices[2].id], flags=_flags(passDeviceSpecs=True), dev_root=str(root))
    assert [d.container_path for d in alloc.devices] == ["/dev/nvidiactl", "/dev/nvidia2"]


def test_unknown_id_is_named(h100_sim: SimBackend) -> None:
    with pytest.raises(AllocationError, match="unknown device id 'GPU-nope'"):
        allocate_container(_gpu(h100_sim), ids=["GPU-nope"], flags=_flags())


def test_replicas_collapse_to_their_gpu(h100_sim: SimBackend) -> None:
    res = _gpu(h100_sim, "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 4}]}}")
    alloc = allocate_container(res, ids=[res.devices[0].id, res.devices[1].id, res.devices[4].id], flags=_flags())
    gpus = h100_sim.inventory().gpus
    assert alloc.envs["NVIDIA_VISIBLE_DEVICES"] == f"{gpus[0].uuid},{gpus[1].uuid}"


def test_oversized_shared_request_is_rejected(h100_sim: SimBackend) -> None:
    res = _gpu(
        h100_sim, "sharing: {timeSlicing: {failRequestsGreaterThanOne: true, resources: [{name: gpu, replicas: 4}]}}"
    )
    with pytest.raises(AllocationError, match="maximum request size for shared resources is 1"):
        allocate_container(res, ids=[res.devices[0].id, res.devices[1].id], flags=_flags())
    assert allocate_container(res, ids=[res.devices[0].id], flags=_flags()).envs


def test_repeated_id_is_rejected(h100_sim: SimBackend) -> None:
    res = _gpu(h100_sim)
    with pytest.raises(AllocationError, match="appears twice"):
        allocate_container(res, ids=[res.devices[0].id] * 2, flags=_flags())
