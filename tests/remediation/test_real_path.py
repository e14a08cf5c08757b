"""The whole path on real parts: SimBackend -> device plugin -> kubelet peer (gRPC over unix sockets)
-> pod-resources API -> the publisher (running its event loop) -> Node -> the controller."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from gpuchain.api.config.v1.config import Config
from gpuchain.api.config.v1.health import Health
from gpuchain.exporter.podresources import PodResourcesClient
from gpuchain.kube.kinds import NODE, POD
from gpuchain.kube.memory import MemoryCluster
from gpuchain.kubelet.node import start_sim_node
from gpuchain.kubelet.peer import ContainerRequest
from gpuchain.remediation.controller import Remediator
from gpuchain.remediation.model import PODS_ANNOTATION, TAINT_KEY, decode_pods, find_condition
from gpuchain.remediation.publisher import GpuHealthPublisher
from gpuchain.sim.remediation import node_object, pod_object, simulated_policy_objects

GPU = "nvidia.com/gpu"


async def until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def test_xid79_through_kubelet_pod_resources_publisher_and_controller() -> None:
    sim = await start_sim_node(config=Config(health=Health(recovery_quiet_seconds=0)))
    client = PodResourcesClient(str(sim.pod_resources_socket))
    stop = asyncio.Event()
    task: asyncio.Task[None] | None = None
    try:
        name = sim.backend.topology.node
        others = (node_object(f"other-{i}") for i in range(3))
        cluster = MemoryCluster([node_object(name), *others, *simulated_policy_objects()])
        placed = {}
        for pod, count in (("train-a", 1), ("train-b", 2), ("train-c", 1)):
            assignment = await sim.kubelet.admit("ml", name=pod, containers=[ContainerRequest("main", {GPU: count})])
            placed[pod] = assignment.containers[0].devices[GPU]
            cluster.create(pod_object("ml", name=pod, node=name, gpus=count))
        publisher = GpuHealthPublisher(sim.backend, cluster=cluster, node_name=name, pods=client.list, quiet_seconds=0)
        task = asyncio.create_task(publisher.run(stop, resync=0.1))

        def published_pods() -> dict[str, tuple[str, ...]]:
            return decode_pods(cluster.get(NODE, name=name)["metadata"].get("annotations", {}).get(PODS_ANNOTATION))

        await until(lambda: len(published_pods()) == 4)  # 1 + 2 + 1 GPUs held
        victim = sim.backend.inventory().gpu(placed["train-a"][0])
        sim.backend.inject_xid(victim.index, xid=79, message="GPU has fallen off the bus")

        def unhealthy() -> bool:
            cond = find_condition(cluster.get(NODE, name=name))
            return cond is not None and cond.status == "False"

        await until(unhealthy)
        await until(lambda: sim.kubelet.allocatable()[GPU] == 7)  # the device plugin saw it too
        cond = find_condition(cluster.get(NODE, name=name))
        assert cond is not None and victim.uuid in cond.message and "XID 79" in cond.message

        report = await asyncio.to_thread(Remediator(cluster).run_once)
        left = {p["metadata"]["name"] for p in cluster.snapshot(POD)}
        assert left == {"train-b", "train-c"}
        assert [(o.action.kind.value, o.action.pod, o.result) for o in report.outcomes] == [
            ("taint", None, "done"),
            ("evict", "ml/train-a", "done"),
        ]
        assert [t["key"] for t in cluster.get(NODE, name=name)["spec"]["taints"]] == [TAINT_KEY]
    finally:
        stop.set()
        if task is not None:
            await task
        client.close()
        await sim.stop()
