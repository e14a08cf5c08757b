"""The checklist's gpu-test pod on a simulated cluster: admitted by the kubelet peer, nvidia-smi from the backend.

A node with a free GPU is picked as the scheduler would; its device plugin and kubelet peer are
started for real, the pod is admitted through Allocate, and the ``nvidia-smi`` the container
would print is rendered from the SimBackend for exactly the devices Allocate exposed
(``NVIDIA_VISIBLE_DEVICES``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuchain.gpu.model import Inventory
from gpuchain.kubelet.node import start_sim_node
from gpuchain.kubelet.peer import AdmissionError, ContainerRequest
from gpuchain.sim import chain
from gpuchain.sim.build import SimCluster
from gpuchain.sim.chain import backend_for, plugin_config


@dataclass(frozen=True, kw_only=True)
class GpuTestRun:
    """What happened to gpu-test: the node it ran on and what nvidia-smi printed (the shape verify reads)."""

    ok: bool
    node: str | None
    output: str
    reason: str = ""


def nvidia_smi(inventory: Inventory, visible: str) -> str:
    """``nvidia-smi -L`` style output for the GPUs a container sees (ids: UUIDs or indexes)."""
    wanted = {v.strip() for v in visible.split(",") if v.strip()}
    lines = [
        f"NVIDIA-SMI {inventory.driver.version}   Driver Version: {inventory.driver.version}   "
        f"CUDA Version: {inventory.driver.cuda_version}"
    ]
    shown = 0
    for gpu in inventory.gpus:
        if visible == "all" or gpu.uuid in wanted or str(gpu.index) in wanted:
            lines.append(f"GPU {shown}: {gpu.name} (UUID: {gpu.uuid})")
            shown += 1
        for mig in gpu.mig_devices:
            if mig.uuid in wanted:
                lines.append(f"  MIG {mig.profile} Device {mig.index}: (UUID: {mig.uuid})")
                shown += 1
    if shown == 0:
        return "No devices were found"
    return "\n".join(lines)


async def run_test_pod(sim: SimCluster, *, resource: str = "nvidia.com/gpu", timeout: float = 5.0) -> GpuTestRun:
    """Run gpu-test on the first node with a free ``resource`` (as the scheduler's first fit would)."""
    used: dict[str, int] = {}
    for where, ids in sim.placements.values():
        used[where] = used.get(where, 0) + len(ids)
    target = next(
        (p for p in sim.plans if p.plugin == chain.OK and p.allocatable.get(resource, 0) - used.get(p.name, 0) > 0),
        None,
    )
    if target is None:
        n = len(sim.plans)
        return GpuTestRun(
            ok=False, node=None, output="", reason=f"0/{n} nodes are available: {n} Insufficient {resource}"
        )
    group = target.group
    layout = group.mig.config if group.mig is not None and group.mig.state.value == "success" else None
    backend = backend_for(group.preset, node=target.name, driver_version=target.driver_version, mig_layout=layout)
    node = await start_sim_node(
        backend=backend, config=plugin_config(sim.scenario, policy=sim.policy, key=target.config_key), timeout=timeout
    )
    try:
        for (ns, name), (where, ids) in sorted(sim.placements.items()):
            if where == target.name:
                await node.kubelet.admit(ns, name=name, containers=[ContainerRequest("main", {resource: len(ids)})])
        for index in sorted(target.lost):
            backend.lose_gpu(index)
        try:
            assignment = await node.kubelet.admit(
                "default", name="gpu-test", containers=[ContainerRequest("cuda", {resource: 1})]
            )
        except AdmissionError as exc:
            return GpuTestRun(ok=False, node=target.name, output="", reason=str(exc))
        env = assignment.containers[0].envs
        visible = env.get("NVIDIA_VISIBLE_DEVICES", "")
        output = nvidia_smi(backend.inventory(), visible)
        return GpuTestRun(
            ok=output != "No devices were found",
            node=target.name,
            output=output,
            reason=f"NVIDIA_VISIBLE_DEVICES={visible}",
        )
    finally:
        await node.stop()
