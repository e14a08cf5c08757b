"""The per-GPU repair loop end to end on real parts: SimBackend -> device plugin -> kubelet peer
(gRPC over unix sockets) -> pod-resources -> publisher -> Node -> remediator (evictions) and the
repair agent (reset, burn-in) -> quarantine annotation -> the device plugin again.

A reset-class fault on one of eight GPUs takes that GPU's pod off it, leaves the other seven
serving, resets and burns in the GPU and gives it back to the kubelet; a failed reset ends in a
reboot request and stays there.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from gpuchain.deviceplugin.config import Config, Health
from gpuchain.deviceplugin.quarantine import QuarantineFollower
from gpuchain.exporter.podresources import PodResourcesClient
from gpuchain.gpu.quarantine import QUARANTINE_ANNOTATION
from gpuchain.kube.kinds import EVENT, NODE, POD
from gpuchain.kube.memory import MemoryCluster
from gpuchain.kube.objects import Obj
from gpuchain.kubelet.node import SimNode, start_sim_node
from gpuchain.kubelet.peer import ContainerRequest
from gpuchain.remediation.admission import simulated_policy_objects
from gpuchain.remediation.controller import Remediator
from gpuchain.remediation.gpuloop import (
    LOOP_ANNOTATION,
    REBOOT_ANNOTATION,
    REBOOT_CONDITION,
    GpuRecord,
    Stage,
    decode_records,
)
from gpuchain.remediation.loopagent import GpuLoopAgent
from gpuchain.remediation.model import PODS_ANNOTATION, TAINT_KEY, find_condition
from gpuchain.remediation.publisher import GpuHealthPublisher
from gpuchain.remediation.scenario import node_object, pod_object

GPU = "nvidia.com/gpu"
TICK = 0.02


async def until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(TICK)


@dataclass
class Rig:
    sim: SimNode
    cluster: MemoryCluster
    name: str
    agent: GpuLoopAgent
    placed: dict[str, str] = field(default_factory=dict)
    """pod name -> the GPU UUID the kubelet gave it."""
    allocatable: list[int] = field(default_factory=list)
    taints: list[list[str]] = field(default_factory=list)

    def node(self) -> Obj:
        return self.cluster.get(NODE, self.name)

    def records(self) -> dict[str, GpuRecord]:
        return decode_records(self.node()["metadata"].get("annotations", {}).get(LOOP_ANNOTATION))

    def stage(self, uuid: str) -> Stage | None:
        """The GPU's stage; None before the loop first recorded it."""
        rec = self.records().get(uuid)
        return None if rec is None else rec.stage

    def pods(self) -> set[str]:
        return {p["metadata"]["name"] for p in self.cluster.snapshot(POD)}


@contextlib.asynccontextmanager
async def rig() -> AsyncIterator[Rig]:
    """One simulated 8-GPU node with one single-GPU pod per GPU, three more GPU nodes, and every
    agent running: device plugin + kubelet, publisher, quarantine follower, repair agent, remediator."""
    sim = await start_sim_node(config=Config(health=Health(recovery_quiet_seconds=0)))
    client = PodResourcesClient(str(sim.pod_resources_socket))
    name = sim.backend.topology.node
    node = node_object(name)
    node["status"]["nodeInfo"] = {"bootID": "boot-1"}
    cluster = MemoryCluster([node, *(node_object(f"other-{i}") for i in range(3)), *simulated_policy_objects()])
    agent = GpuLoopAgent(sim.backend, cluster, name)
    r = Rig(sim, cluster, name, agent)
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    try:
        for i in range(8):
            assignment = await sim.kubelet.admit("ml", f"w-{i}", [ContainerRequest("main", {GPU: 1})])
            r.placed[f"w-{i}"] = assignment.containers[0].devices[GPU][0]
            cluster.create(pod_object("ml", f"w-{i}", name, 1))

        async def kubelet_forgets_deleted_pods() -> None:
            while True:
                alive = r.pods()
                for pod in [p for p in r.placed if p not in alive]:
                    sim.kubelet.remove_pod("ml", pod)
                r.allocatable.append(sim.kubelet.allocatable()[GPU])
                r.taints.append([t["key"] for t in (r.node()["spec"].get("taints") or [])])
                await asyncio.sleep(TICK)

        publisher = GpuHealthPublisher(sim.backend, cluster, name, client.list, quiet_seconds=0)
        follower = QuarantineFollower(cluster, name, sim.plugin.set_quarantined)
        tasks = [
            asyncio.create_task(kubelet_forgets_deleted_pods()),
            asyncio.create_task(publisher.run(stop, resync=TICK)),
            asyncio.create_task(follower.follow()),
            asyncio.create_task(agent.run(stop, interval=TICK)),
            asyncio.create_task(Remediator(cluster).run(interval=TICK, stop=stop)),
        ]
        await until(lambda: sim.kubelet.allocatable()[GPU] == 8)
        await until(lambda: PODS_ANNOTATION in r.node()["metadata"].get("annotations", {}))  # publisher subscribed
        yield r
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        client.close()
        await sim.stop()


def victim(r: Rig, pod: str = "w-3") -> tuple[str, int]:
    uuid = r.placed[pod]
    return uuid, r.sim.backend.snapshot_gpu(uuid).index


async def test_reset_class_fault_on_one_of_eight_gpus_is_repaired_while_seven_keep_serving() -> None:
    async with rig() as r:
        uuid, index = victim(r)
        r.sim.backend.inject_xid(index, 48, "double-bit ECC error")  # NVIDIA's resolution: reset the GPU

        await until(lambda: r.stage(uuid) is Stage.HEALTHY)
        await until(lambda: r.sim.kubelet.allocatable()[GPU] == 8)

        assert r.pods() == {f"w-{i}" for i in range(8)} - {"w-3"}  # only the faulted GPU's pod left
        assert min(r.allocatable) == 7  # the other seven never left allocatable
        assert not any(TAINT_KEY in keys for keys in r.taints)  # a GPU reset needs no node taint
        rec = r.records()[uuid]
        assert [s.stage for s in rec.timeline] == [
            Stage.QUARANTINED,
            Stage.DRAINED,
            Stage.RESET,
            Stage.BURN_IN,
            Stage.BURN_IN,
            Stage.HEALTHY,
        ]
        assert rec.timeline[-2].note.startswith("passed: nvml: ok; cuda: ok; memory: ok")
        times = [s.at for s in rec.timeline]
        assert times == sorted(times)
        annotations = r.node()["metadata"]["annotations"]
        assert QUARANTINE_ANNOTATION not in annotations and REBOOT_ANNOTATION not in annotations
        assert set(r.agent.metrics.durations) == {"quarantined", "drained", "reset", "burn-in"}
        assert r.agent.metrics.outcomes["readmitted"] == 1
        text = r.agent.metrics.prometheus()
        for stage in ("quarantined", "drained", "reset", "burn-in"):
            assert f'gpuchain_gpu_repair_stage_seconds_count{{stage="{stage}",node="{r.name}"}} 1' in text
        assert f'gpuchain_gpu_repair_outcomes_total{{outcome="readmitted",node="{r.name}"}} 1' in text
        assert f'gpuchain_gpu_repair_outcomes_total{{outcome="reset-ok",node="{r.name}"}} 1' in text
        reasons = [e["reason"] for e in r.cluster.snapshot(EVENT) if e["involvedObject"]["name"] in (r.name, "w-3")]
        for reason in ("GPUQuarantined", "GPUWorkloadEvicted", "GPUDrained", "GPUResetStarted", "GPUBurnInPassed"):
            assert reason in reasons
        assert "GPUReadmitted" in reasons


async def test_a_failed_reset_requests_a_reboot_once_and_never_loops() -> None:
    async with rig() as r:
        uuid, index = victim(r)
        r.sim.backend.fail_reset(index)
        r.sim.backend.inject_xid(index, 48, "double-bit ECC error")

        await until(lambda: r.stage(uuid) is Stage.REBOOT)
        await until(lambda: any(TAINT_KEY in keys for keys in r.taints))
        await asyncio.sleep(20 * TICK)  # many more passes of every agent

        rec = r.records()[uuid]
        assert rec.stage is Stage.REBOOT
        assert [s.stage for s in rec.timeline] == [Stage.QUARANTINED, Stage.DRAINED, Stage.RESET, Stage.REBOOT]
        assert r.agent.metrics.outcomes["reset-failed"] == 1  # one reset tried, not a loop of them
        node = r.node()
        assert uuid in node["metadata"]["annotations"][REBOOT_ANNOTATION]
        cond = find_condition(node, REBOOT_CONDITION)
        assert cond is not None and cond.status == "True"
        taint = next(t for t in node["spec"]["taints"] if t["key"] == TAINT_KEY)
        assert taint["value"] == "reboot-node"
        assert r.sim.kubelet.allocatable()[GPU] == 7  # still withheld
        assert r.pods() == {f"w-{i}" for i in range(8)} - {"w-3"}


@pytest.mark.parametrize("lost", [False, True])
async def test_after_the_reboot_the_gpu_is_burned_in_and_readmitted(lost: bool) -> None:
    async with rig() as r:
        uuid, index = victim(r)
        if lost:
            r.sim.backend.lose_gpu(index)  # fell off the bus: no reset can reach it
        else:
            r.sim.backend.fail_reset(index)
            r.sim.backend.inject_xid(index, 48, "double-bit ECC error")
        await until(lambda: r.stage(uuid) is Stage.REBOOT)

        # the reboot: the GPU answers again, the kubelet reports a new boot ID
        r.sim.backend.fail_reset(index, 0)
        r.sim.backend.recover_gpu(index)
        r.cluster.patch_status(NODE, r.name, {"nodeInfo": {"bootID": "boot-2"}})

        await until(lambda: r.stage(uuid) is Stage.HEALTHY)
        await until(lambda: r.sim.kubelet.allocatable()[GPU] == 8)
        await until(lambda: not (r.node()["spec"].get("taints") or []))
        stages = [s.stage for s in r.records()[uuid].timeline]
        assert stages[-4:] == [Stage.REBOOT, Stage.BURN_IN, Stage.BURN_IN, Stage.HEALTHY]
        cond = find_condition(r.node(), REBOOT_CONDITION)
        assert cond is not None and cond.status == "False"
