"""MPS sharing with a control daemon, as NVIDIA's plugin runs it (k8s-device-plugin v0.18.0,
``cmd/mps-control-daemon/mps/daemon.go`` and ``internal/plugin/mps.go``).

The control program and nvidia-smi are stand-ins on PATH that record what they are told
(``fakes.mps``).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import grpc
import pytest
from fakes.mps import daemon_pid, record

from gpuchain.api.config.v1.config import parse_config, unsupported_settings
from gpuchain.deviceplugin.allocate import ContainerAllocation
from gpuchain.deviceplugin.mps import daemon_commands, with_mps
from gpuchain.deviceplugin.resources import map_resources
from gpuchain.gpu.sim import SimBackend
from gpuchain.kubelet.node import SimNode, start_sim_node

GPU = "nvidia.com/gpu"
MIB = 1024 * 1024


def _nvidia_limits(memory_bytes: dict[int, int], replicas: dict[int, int]) -> list[str]:
    """NVIDIA's ``perDevicePinnedDeviceMemoryLimits`` and ``activeThreadPercentage`` written out."""
    out = [
        f"set_default_device_pinned_mem_limit {i} {memory_bytes[i] // replicas[i] // 1024 // 1024}M"
        for i in sorted(replicas)
    ]
    per_gpu = sum(replicas.values()) // len(replicas)
    return [*out, f"set_default_active_thread_percentage {100 // per_gpu}"]


@pytest.mark.parametrize(("preset", "replicas"), [("h100-80gb-x8", 3), ("a100-40gb-x8", 4), ("l4-x2", 2)])
def test_the_daemon_gets_nvidias_limits_for_the_same_config(preset: str, replicas: int) -> None:
    config = parse_config(f"sharing: {{mps: {{resources: [{{name: nvidia.com/gpu, replicas: {replicas}}}]}}}}")
    inventory = SimBackend.from_preset(preset).inventory()
    (res,) = map_resources(inventory, config)
    assert len(res.devices) == replicas * len(inventory.gpus)
    expected = _nvidia_limits(
        {g.index: g.memory_mib * MIB for g in inventory.gpus}, {g.index: replicas for g in inventory.gpus}
    )
    assert daemon_commands(res, {g.uuid: g.memory_mib for g in inventory.gpus}) == expected
    if preset == "h100-80gb-x8":  # 81559 MiB in three: NVIDIA's integer division, not a rounded third
        assert expected[0] == "set_default_device_pinned_mem_limit 0 27186M"
        assert expected[-1] == "set_default_active_thread_percentage 33"


def test_a_container_of_an_mps_share_gets_nvidias_pipe_and_shm_mounts() -> None:
    alloc = with_mps(
        ContainerAllocation(envs={"NVIDIA_VISIBLE_DEVICES": "GPU-x"}), resource=GPU, host_root="/run/nvidia/mps"
    )
    assert alloc.envs == {"NVIDIA_VISIBLE_DEVICES": "GPU-x", "CUDA_MPS_PIPE_DIRECTORY": "/mps/nvidia.com/gpu/pipe"}
    assert [(m.container_path, m.host_path, m.read_only) for m in alloc.mounts] == [
        ("/mps/nvidia.com/gpu/pipe", "/run/nvidia/mps/nvidia.com/gpu/pipe", False),
        ("/dev/shm", "/run/nvidia/mps/shm", False),
    ]


DAEMON = 60.0
"""Seconds for the plugin to see a daemon start, die or come back: a start runs some twenty stand-in
programs (nvidia-smi per GPU, the control program per limit), which a loaded 2-core machine took
over 10 s to run (the first wait below timed out there)."""
SHARED_TWICE = "sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}"


async def _mps_node(root: Path) -> SimNode:
    """A simulated H100 node whose plugin keeps MPS daemons under ``root``, asking their health often."""
    node = await start_sim_node(config=parse_config(f"flags: {{mpsRoot: {root}}}\n{SHARED_TWICE}"), wait=False)
    node.plugin.mps_health_interval = 0.1
    return node


async def test_the_plugin_starts_the_daemon_holds_devices_while_it_is_down_and_restarts_it(
    mps_stand_ins: Path, tmp_path: Path
) -> None:
    node = await _mps_node(mps_stand_ins)
    try:
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable() == {GPU: 16}, DAEMON)
        res = node.plugin.resources[0]
        memory = {g.uuid: g.memory_mib for g in node.backend.inventory().gpus}
        assert record(mps_stand_ins, GPU)[:10] == ["-d", *daemon_commands(res, memory)]
        uuids = [g.uuid for g in node.backend.inventory().gpus]
        assert (tmp_path / "smi").read_text().splitlines() == [f"-i {u} -c EXCLUSIVE_PROCESS" for u in uuids]
        assert (mps_stand_ins / GPU / ".started").exists()

        response = await node.kubelet.allocate_raw(GPU, [res.devices[0].id])
        container = response.container_responses[0]
        assert container.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/gpu/pipe"
        assert {(m.container_path, m.host_path) for m in container.mounts} >= {
            ("/mps/nvidia.com/gpu/pipe", f"{mps_stand_ins}/nvidia.com/gpu/pipe"),
            ("/dev/shm", f"{mps_stand_ins}/shm"),
        }

        os.kill(daemon_pid(mps_stand_ins, GPU), signal.SIGKILL)
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable() == {GPU: 0}, DAEMON)
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable() == {GPU: 16}, DAEMON)
        assert record(mps_stand_ins, GPU).count("-d") == 2
    finally:
        await node.stop()
    assert record(mps_stand_ins, GPU)[-1] == "quit"
    assert (tmp_path / "smi").read_text().splitlines()[-8:] == [f"-i {u} -c DEFAULT" for u in uuids]
    assert not (mps_stand_ins / GPU / ".started").exists()


async def test_allocate_is_refused_while_the_daemon_is_down(mps_stand_ins: Path) -> None:
    """A daemon that dies and cannot be started again leaves every share Unhealthy, and Allocate
    says why, instead of handing a container a pipe nobody listens on."""
    node = await _mps_node(mps_stand_ins)
    try:
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable() == {GPU: 16}, DAEMON)
        pipe = mps_stand_ins / GPU / "pipe"
        (pipe / "refuse").touch()
        os.kill(daemon_pid(mps_stand_ins, GPU), signal.SIGKILL)
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable() == {GPU: 0}, DAEMON)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await node.kubelet.allocate_raw(GPU, [node.plugin.resources[0].devices[0].id])
        assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "MPS control daemon does not answer" in (err.value.details() or "")
        (pipe / "refuse").unlink()
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable() == {GPU: 16}, DAEMON)
    finally:
        await node.stop()


def test_without_an_mps_root_the_plugin_says_it_runs_no_daemon() -> None:
    notes = unsupported_settings(parse_config(SHARED_TWICE))
    assert any("no flags.mpsRoot" in n for n in notes)
    with_root = parse_config(f"flags: {{mpsRoot: /run/nvidia/mps}}\n{SHARED_TWICE}")
    assert not any("MPS" in n for n in unsupported_settings(with_root))


async def test_a_missing_control_program_is_named_with_where_it_comes_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gpuchain image carries no nvidia-cuda-mps-control (it is the node driver's): without the
    NVIDIA runtime's compute capability the error says so, not just ENOENT."""
    from gpuchain.gpu.mps import MpsControl, MpsError, MpsRoot

    monkeypatch.setenv("PATH", str(tmp_path))
    control = MpsControl(resource=GPU, root=MpsRoot(str(tmp_path / "mps")))
    with pytest.raises(MpsError) as err:
        await control.ask("get_default_active_thread_percentage")
    assert str(err.value).startswith("nvidia-cuda-mps-control: not found on PATH")
    assert "NVIDIA_DRIVER_CAPABILITIES including compute" in str(err.value)
    assert not await control.healthy()
