"""The `gpuchain demo` scenario: a simulated H100 node from GPUs to a running pod, a GPU failure and its recovery.

Everything runs in one process over real unix sockets: SimBackend -> device plugin (gRPC) ->
kubelet peer (gRPC) -> pod-resources API (gRPC). Each step is reported as a ``DemoStep`` the
moment it completes, so the CLI can print as it goes and ``-o json`` gets the same transcript.
A scenario played on simulated GPUs, so it lives in the simulator beside its DRA twin (`sim.dra_demo`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from gpuchain.api.config.v1.config import Config
from gpuchain.api.config.v1.health import Health
from gpuchain.gpu.model import HealthEvent
from gpuchain.gpu.xid import describe
from gpuchain.kubelet.node import DEFAULT_PRESET, start_sim_node
from gpuchain.kubelet.peer import ContainerRequest
from gpuchain.proto.podresources.v1 import api_pb2 as pr
from gpuchain.proto.podresources.v1 import api_pb2_grpc as pr_grpc

GPU = "nvidia.com/gpu"
DEMO_XID = 79


@dataclass(frozen=True, kw_only=True)
class DemoStep:
    """One thing that happened, with the numbers that prove it."""

    key: str
    title: str
    data: dict[str, Any] = field(default_factory=dict)
    elapsed_ms: float | None = None

    def __post_init__(self) -> None:
        if self.elapsed_ms is not None:
            object.__setattr__(self, "elapsed_ms", round(self.elapsed_ms, 3))


async def run_demo(
    on_step: Callable[[DemoStep], None] = lambda step: None,
    *,
    preset: str = DEFAULT_PRESET,
    quiet_seconds: float = 0.5,
    timeout: float = 5.0,
) -> list[DemoStep]:
    """Run the scenario; ``on_step`` sees each step as it completes. Returns the whole transcript."""
    steps: list[DemoStep] = []

    def report(step: DemoStep) -> None:
        steps.append(step)
        on_step(step)

    config = Config(health=Health(recovery_quiet_seconds=quiet_seconds))
    t0 = time.perf_counter()
    node = await start_sim_node(preset, config=config, timeout=timeout)
    try:
        kubelet = node.kubelet
        inv = node.backend.inventory()
        report(
            DemoStep(
                key="node",
                title="Node started: device plugin + kubelet peer over unix sockets",
                data={
                    "node": node.backend.topology.node,
                    "gpus": len(inv.gpus),
                    "model": inv.gpus[0].name if inv.gpus else "",
                    "driver": inv.driver.version,
                    "socket_dir": str(node.socket_dir),
                    "pod_resources_socket": str(node.pod_resources_socket),
                    "registered": [
                        {"resource": r.resource, "endpoint": r.endpoint, "devices": r.devices}
                        for r in node.plugin.registrations
                    ],
                },
                elapsed_ms=_ms(t0),
            )
        )
        report(
            DemoStep(
                key="capacity",
                title="Node resources as the kubelet reports them",
                data={"capacity": kubelet.capacity(), "allocatable": kubelet.allocatable()},
            )
        )

        t = time.perf_counter()
        pod = await kubelet.admit("default", name="cuda-vectoradd", containers=[ContainerRequest("cuda", {GPU: 1})])
        container = pod.containers[0]
        gpu_id = container.devices[GPU][0]
        gpu = inv.gpu(gpu_id)
        report(
            DemoStep(
                key="pod",
                title="Pod admitted: GetPreferredAllocation, then Allocate",
                data={
                    "pod": "default/cuda-vectoradd",
                    "device": gpu_id,
                    "gpu_index": gpu.index,
                    "env": dict(container.envs),
                },
                elapsed_ms=_ms(t),
            )
        )

        async with grpc.aio.insecure_channel(f"unix://{node.pod_resources_socket}") as channel:
            listed = await pr_grpc.PodResourcesListerStub(channel).List(pr.ListPodResourcesRequest(), timeout=timeout)
        report(
            DemoStep(
                key="pod-resources",
                title="Pod-resources API List (what exporter and remediation read)",
                data={
                    "pods": [
                        {
                            "pod": f"{p.namespace}/{p.name}",
                            "container": c.name,
                            "resource": d.resource_name,
                            "devices": list(d.device_ids),
                        }
                        for p in listed.pod_resources
                        for c in p.containers
                        for d in c.devices
                    ]
                },
            )
        )

        holders = sorted(
            {
                f"{p.namespace}/{p.name}"
                for p in listed.pod_resources
                for c in p.containers
                for d in c.devices
                if gpu_id in d.device_ids
            }
        )
        seen: list[HealthEvent] = []
        node.plugin.on_event = seen.append
        t = time.perf_counter()
        node.backend.lose_gpu(gpu.index)  # XID 79, then the GPU stops answering
        await kubelet.wait_for(lambda: kubelet.allocatable().get(GPU) == len(inv.gpus) - 1, timeout)
        propagation = _ms(t)
        info = describe(DEMO_XID)
        report(
            DemoStep(
                key="xid",
                title=f"GPU {gpu.index} falls off the bus (XID {DEMO_XID}): ListAndWatch marks it Unhealthy",
                data={
                    "xid": DEMO_XID,
                    "meaning": info.meaning,
                    "action": info.resolution.value,
                    "device": gpu_id,
                    "capacity": kubelet.capacity(),
                    "allocatable": kubelet.allocatable(),
                    "propagation_ms": round(propagation, 3),
                    "within_same_second": propagation < 1000,
                    "pod_on_failed_gpu": ", ".join(holders) or "none",
                },
                elapsed_ms=propagation,
            )
        )

        t = time.perf_counter()
        node.backend.recover_gpu(gpu.index)
        await kubelet.wait_for(lambda: kubelet.allocatable().get(GPU) == len(inv.gpus), timeout + quiet_seconds)
        report(
            DemoStep(
                key="recovery",
                title=f"GPU {gpu.index} back: healthy after a {quiet_seconds:g} s quiet period",
                data={
                    "events": [e.kind.value for e in seen],
                    "quiet_seconds": quiet_seconds,
                    "capacity": kubelet.capacity(),
                    "allocatable": kubelet.allocatable(),
                },
                elapsed_ms=_ms(t),
            )
        )
    finally:
        t = time.perf_counter()
        await node.stop()
    report(
        DemoStep(
            key="stop",
            title="Plugin and kubelet stopped, sockets removed",
            data={"total_ms": round(_ms(t0), 1)},
            elapsed_ms=_ms(t),
        )
    )
    return steps


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000
