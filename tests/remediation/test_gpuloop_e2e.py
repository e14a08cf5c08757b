"""The per-GPU repair loop end to end on real parts: SimBackend -> device plugin -> kubelet peer
(gRPC over unix sockets) -> pod-resources -> publisher -> Node -> remediator (evictions) and the
repair agent (reset, burn-in) -> quarantine annotation -> the device plugin again.

A reset-class fault on one of eight GPUs takes that GPU's pod off it, leaves the other seven
serving, resets and burns in the GPU and gives it back to the kubelet; a failed reset ends in a
reboot request and stays there.

With the NVML release board the device plugin holds NVML as on a real node, and the reset is
refused while any process does (as the driver refuses it, NVIDIA/mig-parted#181: "In use by
another client"): the plugin lets go through the board, the reset runs, it takes NVML back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fakes.fake_libcuda import FakeCuda
from fakes.fake_nvidia_smi import FakeNvidiaSmi
from fakes.fake_pynvml import FakeNvml

from gpuchain.api.config.v1.config import Config
from gpuchain.api.config.v1.health import Health
from gpuchain.common.supervise import cancel_and_wait
from gpuchain.deviceplugin.quarantine import QuarantineFollower
from gpuchain.exporter.podresources import PodResourcesClient
from gpuchain.gpu import cuda
from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.nvml import NvmlBackend
from gpuchain.gpu.nvmlrelease import Follower, ReleaseBoard
from gpuchain.gpu.quarantine import QUARANTINE_ANNOTATION
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.kinds import EVENT, NODE, POD
from gpuchain.kube.memory import MemoryCluster
from gpuchain.kube.objects import Obj
from gpuchain.kubelet.node import DEFAULT_PRESET, SimNode, start_sim_node
from gpuchain.kubelet.peer import ContainerRequest
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
from gpuchain.sim.remediation import node_object, pod_object, simulated_policy_objects

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
    view: GpuBackend | None = None
    """The device plugin's own handle on the GPUs, with the board."""

    def node(self) -> Obj:
        return self.cluster.get(NODE, name=self.name)

    def records(self) -> dict[str, GpuRecord]:
        return decode_records(self.node()["metadata"].get("annotations", {}).get(LOOP_ANNOTATION))

    def stage(self, uuid: str) -> Stage | None:
        """The GPU's stage; None before the loop first recorded it."""
        rec = self.records().get(uuid)
        return None if rec is None else rec.stage

    def pods(self) -> set[str]:
        return {p["metadata"]["name"] for p in self.cluster.snapshot(POD)}


def _driver_commands(sim: SimBackend) -> FakeNvidiaSmi:
    """What gpu-health runs on the node: the fake ``nvidia-smi`` bound to ``sim``, and the burn-in's
    CUDA child answered by gpuchain.gpu.cuda's own checks over the fake libcuda (as
    tests/gpu/test_nvml_repair.py does)."""

    def cuda_child(argv: Sequence[str], deadline: float) -> subprocess.CompletedProcess[str]:
        assert "gpuchain.gpu.cuda" in argv, f"not the CUDA check: {argv}"
        bus = argv[list(argv).index("--bus-id") + 1]
        config = cuda.CudaCheckConfig(arith_elements=1024, min_memory_bytes=4096)
        result = cuda.run_checks(FakeCuda([bus]), bus_id=bus, config=config)  # type: ignore[arg-type]
        return subprocess.CompletedProcess(list(argv), 0, json.dumps(result.to_json()) + "\n", "")

    return FakeNvidiaSmi(sim, others=cuda_child)


@contextlib.asynccontextmanager
async def rig(board: Path | None = None, follow: bool = True) -> AsyncIterator[Rig]:
    """One simulated 8-GPU node with one single-GPU pod per GPU, three more GPU nodes, and every
    agent running: device plugin + kubelet, publisher, quarantine follower, repair agent, remediator.

    With ``board`` (the NVML release board's directory): the device plugin and gpu-health each
    run ``NvmlBackend`` over a ``FakeNvml`` of their own (one per process) on the node's
    SimBackend, gpu-health resets through the fake ``nvidia-smi``, which refuses while any process
    holds NVML, and through the board, which (with ``follow``) the device plugin follows."""
    backend: SimBackend | None = None
    view: GpuBackend | None = None
    health: NvmlBackend | None = None
    if board is not None:
        backend = SimBackend.from_preset(DEFAULT_PRESET)
        view = NvmlBackend(nvml=FakeNvml(backend), probe_interval=0.05)
        health = NvmlBackend(
            nvml=FakeNvml(backend), probe_interval=0.05, run_command=_driver_commands(backend), reset_wait_s=1.0
        )
        health.allow_reset = True
    sim = await start_sim_node(
        config=Config(health=Health(recovery_quiet_seconds=0)), backend=backend, plugin_backend=view
    )
    client = PodResourcesClient(str(sim.pod_resources_socket))
    name = sim.backend.topology.node
    node = node_object(name)
    node["status"]["nodeInfo"] = {"bootID": "boot-1"}
    cluster = MemoryCluster([node, *(node_object(f"other-{i}") for i in range(3)), *simulated_policy_objects()])
    release_board = ReleaseBoard(board) if board is not None else None
    gpus: GpuBackend = health or sim.backend
    agent = GpuLoopAgent(gpus, cluster=cluster, node_name=name, board=release_board, release_wait=5.0)
    r = Rig(sim, cluster, name, agent, view=view)
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    try:
        for i in range(8):
            assignment = await sim.kubelet.admit("ml", name=f"w-{i}", containers=[ContainerRequest("main", {GPU: 1})])
            r.placed[f"w-{i}"] = assignment.containers[0].devices[GPU][0]
            cluster.create(pod_object("ml", name=f"w-{i}", node=name, gpus=1))

        async def kubelet_forgets_deleted_pods() -> None:
            while True:
                alive = r.pods()
                for pod in [p for p in r.placed if p not in alive]:
                    sim.kubelet.remove_pod("ml", pod)
                r.allocatable.append(sim.kubelet.allocatable()[GPU])
                r.taints.append([t["key"] for t in (r.node()["spec"].get("taints") or [])])
                await asyncio.sleep(TICK)

        publisher = GpuHealthPublisher(gpus, cluster=cluster, node_name=name, pods=client.list, quiet_seconds=0)
        follower = QuarantineFollower(cluster, node_name=name, apply=sim.plugin.set_quarantined)
        tasks = [
            asyncio.create_task(kubelet_forgets_deleted_pods()),
            asyncio.create_task(publisher.run(stop, resync=TICK)),
            asyncio.create_task(follower.follow()),
            asyncio.create_task(agent.run(stop, interval=TICK)),
            asyncio.create_task(Remediator(cluster).run(interval=TICK, stop=stop)),
        ]
        if release_board is not None and view is not None and follow:
            tasks.append(
                asyncio.create_task(Follower(release_board, backend=view, component="device-plugin", poll=TICK).run())
            )
            await until(lambda: len(release_board.holders()) == 1)
        await until(lambda: sim.kubelet.allocatable()[GPU] == 8)
        await until(lambda: PODS_ANNOTATION in r.node()["metadata"].get("annotations", {}))  # publisher subscribed
        yield r
    finally:
        stop.set()
        await cancel_and_wait(*tasks)
        client.close()
        await sim.stop()
        for own in (view, health):
            if own is not None:
                own.close()


def victim(r: Rig, pod: str = "w-3") -> tuple[str, int]:
    uuid = r.placed[pod]
    return uuid, r.sim.backend.snapshot_gpu(uuid).index


async def test_reset_class_fault_on_one_of_eight_gpus_is_repaired_while_seven_keep_serving() -> None:
    async with rig() as r:
        uuid, index = victim(r)
        r.sim.backend.inject_xid(index, xid=48, message="double-bit ECC error")  # NVIDIA's resolution: reset the GPU

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
        r.sim.backend.inject_xid(index, xid=48, message="double-bit ECC error")

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
            r.sim.backend.inject_xid(index, xid=48, message="double-bit ECC error")
        await until(lambda: r.stage(uuid) is Stage.REBOOT)

        # the reboot: the GPU answers again, the kubelet reports a new boot ID
        r.sim.backend.fail_reset(index, times=0)
        r.sim.backend.recover_gpu(index)
        r.cluster.patch_status(NODE, name=r.name, status={"nodeInfo": {"bootID": "boot-2"}})

        await until(lambda: r.stage(uuid) is Stage.HEALTHY)
        await until(lambda: r.sim.kubelet.allocatable()[GPU] == 8)
        await until(lambda: not (r.node()["spec"].get("taints") or []))
        stages = [s.stage for s in r.records()[uuid].timeline]
        assert stages[-4:] == [Stage.REBOOT, Stage.BURN_IN, Stage.BURN_IN, Stage.HEALTHY]
        cond = find_condition(r.node(), REBOOT_CONDITION)
        assert cond is not None and cond.status == "False"


async def _serving_while(r: Rig, done: Callable[[], bool]) -> list[int]:
    """Until ``done``: how many devices the plugin served, look after look."""
    seen: list[int] = []
    servicer = r.sim.plugin.servicer(GPU)
    deadline = time.monotonic() + 20.0
    while not done():
        assert time.monotonic() < deadline, "the repair did not finish in time"
        seen.append(r.sim.kubelet.allocatable()[GPU])
        assert len(servicer.resource.devices) == 8  # ListAndWatch keeps the cached device list
        await asyncio.sleep(TICK / 2)
    return seen


@pytest.mark.timeout(60)
async def test_done_when_through_nvml_one_fake_library_per_process(tmp_path: Path) -> None:
    """The issue's Done-when through the NVML adapter: a reset-class fault on one of eight GPUs;
    the device plugin (its own NvmlBackend) lets go via the board, nvidia-smi's reset runs (it
    would refuse while any process held NVML), the other seven serve throughout (ListAndWatch and
    Allocate), and the GPU is back in allocatable."""
    async with rig(board=tmp_path) as r:
        uuid, index = victim(r)
        smi: FakeNvidiaSmi = r.agent.backend._run_command  # type: ignore[attr-defined]
        assert r.view is not None
        view = r.view
        # Whether the plugin had let go as nvidia-smi was asked: sampled from the loop below, a
        # short release could fall between two looks on a loaded machine.
        let_go: list[bool] = []
        smi.before_each = lambda _tries: let_go.append(view.released)
        r.sim.backend.inject_xid(index, xid=48, message="double-bit ECC error")
        seen = await _serving_while(r, lambda: r.stage(uuid) is Stage.HEALTHY)
        await until(lambda: r.sim.kubelet.allocatable()[GPU] == 8, timeout=20.0)

        assert let_go and all(let_go), "the device plugin had not let go of NVML when the GPU was reset"
        assert min(seen) == 7
        assert not view.released
        resets = [c for c in smi.calls if "--gpu-reset" in c or "-r" in c]
        assert len(resets) == 1 and resets[0][-1] == uuid  # not refused once: every holder had let go
        rec = r.records()[uuid]
        assert [s.stage for s in rec.timeline][:4] == [Stage.QUARANTINED, Stage.DRAINED, Stage.RESET, Stage.BURN_IN]
        assert r.agent.metrics.outcomes["reset-ok"] == 1 and r.agent.metrics.outcomes["readmitted"] == 1
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
            f"holder.{h.name}.{ext}" for h in ReleaseBoard(tmp_path).holders() for ext in ("json", "lock")
        )  # the request is cleared; only the plugin's registration stays
        # the repaired GPU is the only free one: a new container gets it, through Allocate
        assignment = await r.sim.kubelet.admit("ml", name="after", containers=[ContainerRequest("main", {GPU: 1})])
        assert assignment.containers[0].devices[GPU] == (uuid,)


@pytest.mark.timeout(60)
async def test_through_nvml_an_agent_that_does_not_let_go_is_named_beside_nvidia_smis_refusal(tmp_path: Path) -> None:
    async with rig(board=tmp_path, follow=False) as r:
        stuck = ReleaseBoard(tmp_path).register("exporter")  # on the board, never answers
        try:
            r.agent.release_wait = 0.2
            uuid, index = victim(r)
            r.sim.backend.inject_xid(index, xid=48, message="double-bit ECC error")
            await until(lambda: r.stage(uuid) is Stage.REBOOT, timeout=30.0)
        finally:
            stuck.close()
        note = r.records()[uuid].timeline[-1].note
        assert note.startswith(f"reset failed: GPU {index}: nvidia-smi --gpu-reset -i {uuid} still refused")
        assert "In use by another client" in note
        assert "did not let go of NVML within 0 s: exporter (pod " in note and "pid " in note
        assert r.view is not None and not r.view.released  # the plugin never let go: not on the board
        messages = [e["message"] for e in r.cluster.snapshot(EVENT) if e["reason"] == "GPURebootRequested"]
        assert any("exporter (pod " in m for m in messages)
        assert "exporter (pod " in r.node()["metadata"]["annotations"][REBOOT_ANNOTATION]
