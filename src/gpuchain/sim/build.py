"""Build a simulated cluster from a scenario: rendered objects on a MemoryCluster, optionally made live.

Two speeds, one truth:

- ``build()`` is synthetic and fast (1,000 nodes in about a second): each node's chain is planned
  from its facts (`gpuchain.sim.chain`) and rendered into objects (`gpuchain.sim.render`).
  Capacity and labels still come from the device plugin's and GFD's own functions over a
  SimBackend inventory, but no gRPC runs.
- ``go_live()`` then runs the device-plugin link for real on chosen nodes: a SimBackend with the
  node's driver and MIG layout, the gpuchain device plugin with the node's config and a kubelet
  peer over unix sockets (`gpuchain.kubelet.node.start_sim_node`); workload pods are admitted
  through the peer, lost GPUs fall off the bus through the backend, and the kubelet's capacity and
  allocatable are written into the Node status. Everything else (driver, toolkit, operand pod
  states, Events) stays rendered.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuchain.doctor.logs import cluster_log_reader
from gpuchain.kube import NODE, POD, MemoryCluster
from gpuchain.kubelet.node import all_registered, start_sim_node
from gpuchain.kubelet.peer import ContainerRequest, KubeletPeer
from gpuchain.operator.policy import ClusterPolicySpec
from gpuchain.sim import chain
from gpuchain.sim.chain import NodePlan, backend_for, plan_node, plugin_config, policy_of
from gpuchain.sim.render import render
from gpuchain.sim.scenario import Scenario


@dataclass(kw_only=True)
class SimCluster:
    """A built scenario: the API server (objects and container logs), and the per-node plans behind it."""

    scenario: Scenario
    policy: ClusterPolicySpec
    plans: list[NodePlan]
    cluster: MemoryCluster
    placements: dict[tuple[str, str], tuple[str, tuple[str, ...]]]
    build_seconds: float = 0.0
    live: list[LiveNode] = field(default_factory=list)

    def read_log(self, namespace: str, pod: str, container: str, previous: bool = False) -> str | None:
        """The doctor's log reader on this cluster: through the port, as on a live one (None: no log)."""
        return cluster_log_reader(self.cluster)(namespace, pod, container, previous)

    def plan(self, node: str) -> NodePlan:
        """The plan of one node (KeyError naming it if absent)."""
        for p in self.plans:
            if p.name == node:
                return p
        raise KeyError(f"no node {node!r} in scenario {self.scenario.name!r}")


@dataclass(frozen=True, kw_only=True)
class LiveNode:
    """What the kubelet peer reported for a node once the device plugin ran for real."""

    node: str
    endpoints: dict[str, str]  #: resource -> socket file the plugin registered
    capacity: dict[str, int]
    allocatable: dict[str, int]
    rendered_capacity: dict[str, int]
    rendered_allocatable: dict[str, int]
    admitted: dict[str, tuple[str, ...]]  #: "ns/pod" -> device ids the kubelet allocated

    @property
    def agrees(self) -> bool:
        """Do the live numbers equal the rendered ones?"""
        return self.capacity == self.rendered_capacity and self.allocatable == self.rendered_allocatable


def build(scenario: Scenario) -> SimCluster:
    """Plan and render every node, and load the objects into a fresh MemoryCluster (calls reset to 0)."""
    started = time.perf_counter()
    policy = policy_of(scenario)
    # An operator that never ran deployed nothing: every node is planned as with no stack installed.
    deployed = policy_of(scenario.model_copy(update={"stack": "none"})) if scenario.operator_pending else policy
    plans = []
    for group in scenario.nodes:
        # Nodes of a group share every fact but their name: plan once, rename the rest.
        first = plan_node(scenario, policy=deployed, group=group, name=group.node_names()[0])
        plans += [first] + [dataclasses.replace(first, name=name) for name in group.node_names()[1:]]
    out = render(scenario, plans=plans, policy=policy)
    cluster = MemoryCluster(out.objects)
    for (namespace, pod, container), text in out.logs.items():
        cluster.set_logs(pod, namespace=namespace, container=container, text=text)
    return SimCluster(
        scenario=scenario,
        policy=policy,
        plans=plans,
        cluster=cluster,
        placements=out.placements,
        build_seconds=time.perf_counter() - started,
    )


async def go_live(sim: SimCluster, *, limit: int = 8, timeout: float = 5.0) -> list[LiveNode]:
    """Run the device plugin + kubelet peer for up to ``limit`` nodes whose plugin runs, and
    write the kubelet's capacity/allocatable into their Node status.

    Nodes are chosen so that each distinct node group is covered first. Returns what each
    node's kubelet reported next to the rendered numbers (``LiveNode.agrees``).
    """
    chosen: list[NodePlan] = []
    seen: set[str] = set()
    for plan in sim.plans:
        if plan.plugin == chain.OK and plan.group.name not in seen:
            chosen.append(plan)
            seen.add(plan.group.name)
    chosen += [p for p in sim.plans if p.plugin == chain.OK and p not in chosen]
    results = []
    for plan in chosen[:limit]:
        results.append(await _live_node(sim, plan, timeout))
    sim.live = results
    return results


async def _live_node(sim: SimCluster, plan: NodePlan, timeout: float) -> LiveNode:
    group = plan.group
    config = plugin_config(sim.scenario, policy=sim.policy, key=plan.config_key)
    layout = group.mig.config if group.mig is not None and group.mig.state.value == "success" else None
    backend = backend_for(group.preset, node=plan.name, driver_version=plan.driver_version, mig_layout=layout)
    node = await start_sim_node(backend=backend, config=config, timeout=timeout)
    try:
        admitted: dict[str, tuple[str, ...]] = {}
        for (ns, pod), (where, _ids) in sorted(sim.placements.items()):
            if where != plan.name:
                continue
            pod_obj = sim.cluster.get_or_none(POD, name=pod, namespace=ns)
            limits = pod_obj["spec"]["containers"][0]["resources"]["limits"] if pod_obj else {}
            request = ContainerRequest("main", {k: int(v) for k, v in limits.items()})
            assignment = await node.kubelet.admit(ns, name=pod, containers=[request])
            admitted[f"{ns}/{pod}"] = tuple(i for c in assignment.containers for v in c.devices.values() for i in v)
        for index in sorted(plan.lost):
            before = sum(node.kubelet.allocatable().values())
            backend.lose_gpu(index)
            await node.kubelet.wait_for(_fewer_than(node.kubelet, before), timeout)
        await node.kubelet.wait_for(all_registered(node), timeout)
        capacity, allocatable = node.kubelet.capacity(), node.kubelet.allocatable()
        endpoints = {name: ep.endpoint for name, ep in node.kubelet.endpoints.items()}
    finally:
        await node.stop()
    live_node = sim.cluster.get(NODE, name=plan.name)
    status = live_node["status"]
    cap = {**{k: v for k, v in status["capacity"].items() if "/" not in k}, **{k: str(v) for k, v in capacity.items()}}
    alloc = {
        **{k: v for k, v in status["allocatable"].items() if "/" not in k},
        **{k: str(v) for k, v in allocatable.items()},
    }
    sim.cluster.patch_status(NODE, name=plan.name, status={"capacity": cap, "allocatable": alloc})
    sim.cluster.calls.reset()
    return LiveNode(
        node=plan.name,
        endpoints=endpoints,
        capacity=capacity,
        allocatable=allocatable,
        rendered_capacity=plan.capacity,
        rendered_allocatable=plan.allocatable,
        admitted=admitted,
    )


def _fewer_than(kubelet: KubeletPeer, before: int) -> Callable[[], bool]:
    """A predicate: the kubelet's healthy device count dropped below ``before``."""
    return lambda: sum(kubelet.allocatable().values()) < before
