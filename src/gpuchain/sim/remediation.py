"""Simulated clusters for remediation demos and tests: MemoryCluster + one SimBackend per node.

Each node gets a real ``GpuHealthPublisher`` fed by its SimBackend's events; the pod map comes
from a stand-in for the kubelet's pod-resources answer (the pods placed on each GPU that still
exist in the cluster, as the kubelet forgets a pod once it is gone). ``gpuchain remediator
--scenario NAME`` runs the named scenario and then one controller pass on it; ``gpuchain
gpu-health --dry-run`` publishes onto one such Node. It is simulation, so it lives in the
simulator; the remediation layer it drives never imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuchain.common.labels import GPU_PRESENT
from gpuchain.exporter.podresources import Assignment, PodRef
from gpuchain.gpu.model import HealthEvent
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.kinds import POD
from gpuchain.kube.memory import MemoryCluster
from gpuchain.kube.objects import Obj
from gpuchain.remediation.admission import POLICY_NAME, VAP, VAP_BINDING
from gpuchain.remediation.publisher import GpuHealthPublisher

GPU_RESOURCE = "nvidia.com/gpu"
SIM_PRESET = "h100-80gb-x8"


def node_object(name: str, gpus: int = 8) -> Obj:
    """A Ready GPU Node as the API server would hold it after the device plugin registered."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {GPU_PRESENT: "true", "kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "capacity": {GPU_RESOURCE: str(gpus)},
            "allocatable": {GPU_RESOURCE: str(gpus)},
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is ready"}
            ],
        },
    }


def pod_object(namespace: str, *, name: str, node: str, gpus: int = 1, labels: Mapping[str, str] | None = None) -> Obj:
    """A Running, Ready pod bound to ``node`` asking for ``gpus`` whole GPUs (as a kubelet reports it:
    a budget counts only Ready pods as healthy)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {"app": name})},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "resources": {"limits": {GPU_RESOURCE: str(gpus)}}}],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def simulated_policy_objects() -> list[Obj]:
    """The policy and binding as the chart installs them (the fields the remediator checks), for
    simulated clusters; the real ones come from charts/gpuchain/templates/remediation-admission.yaml."""
    return [
        {
            "apiVersion": VAP.api_version,
            "kind": VAP.kind,
            "metadata": {"name": POLICY_NAME},
            "spec": {"failurePolicy": "Fail"},
        },
        {
            "apiVersion": VAP_BINDING.api_version,
            "kind": VAP_BINDING.kind,
            "metadata": {"name": POLICY_NAME},
            "spec": {"policyName": POLICY_NAME, "validationActions": ["Deny"]},
        },
    ]


def pdb_object(namespace: str, *, name: str, match_labels: Mapping[str, str], min_available: int | str) -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": dict(match_labels)}},
    }


@dataclass(kw_only=True)
class SimCluster:
    """A simulated GPU cluster: the API (MemoryCluster), each node's GPUs and health publisher."""

    cluster: MemoryCluster
    backends: dict[str, SimBackend] = field(default_factory=dict)
    publishers: dict[str, GpuHealthPublisher] = field(default_factory=dict)
    placements: dict[str, list[Assignment]] = field(default_factory=dict)

    def add_node(self, name: str, preset: str = SIM_PRESET) -> SimBackend:
        backend = SimBackend.from_preset(preset, node=name)
        self.cluster.create(node_object(name, len(backend.inventory().gpus)))
        publisher = GpuHealthPublisher(
            backend, cluster=self.cluster, node_name=name, pods=self._pod_source(name), quiet_seconds=0
        )

        def feed(event: HealthEvent) -> None:
            publisher.handle(event)

        backend.add_listener(feed)
        self.backends[name] = backend
        self.publishers[name] = publisher
        self.placements[name] = []
        publisher.publish()
        return backend

    def _pod_source(self, node: str) -> Callable[[], list[Assignment]]:
        def rows() -> list[Assignment]:
            alive = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in self.cluster.snapshot(POD)}
            return [a for a in self.placements[node] if (a.ref.namespace, a.ref.pod) in alive]

        return rows

    def add_pod(
        self,
        node: str,
        *,
        namespace: str,
        name: str,
        gpu_indexes: tuple[int, ...],
        labels: Mapping[str, str] | None = None,
    ) -> Obj:
        """Create the Pod and record that its container holds these GPUs (what Allocate would have done)."""
        inventory = self.backends[node].inventory()
        pod = self.cluster.create(pod_object(namespace, name=name, node=node, gpus=len(gpu_indexes), labels=labels))
        ref = PodRef(namespace, name, "main")
        self.placements[node].extend(Assignment(GPU_RESOURCE, inventory.gpu(i).uuid, ref) for i in gpu_indexes)
        return pod

    def publish(self) -> None:
        """Every node's publisher writes what it knows (as its resync would)."""
        for publisher in self.publishers.values():
            publisher.publish()

    def gpu_uuid(self, node: str, index: int) -> str:
        return self.backends[node].inventory().gpu(index).uuid


def build(nodes: int = 4, preset: str = SIM_PRESET) -> SimCluster:
    """``nodes`` healthy GPU nodes named node-0, node-1, ... with nothing running."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}
    sim = SimCluster(cluster=MemoryCluster([namespace, *simulated_policy_objects()]))
    for i in range(nodes):
        sim.add_node(f"node-{i}", preset)
    return sim


def _workloads(sim: SimCluster) -> None:
    """Training on node-0 GPUs 0 and 1, a system pod on GPU 0, inference on node-1."""
    sim.add_pod("node-0", namespace="ml", name="train-0", gpu_indexes=(0,), labels={"app": "train"})
    sim.add_pod("node-0", namespace="ml", name="train-1", gpu_indexes=(1,), labels={"app": "train"})
    sim.add_pod("node-0", namespace="kube-system", name="gpu-burn-check", gpu_indexes=(0,))
    sim.add_pod("node-1", namespace="ml", name="infer-0", gpu_indexes=(0,), labels={"app": "infer"})


def xid79(sim: SimCluster) -> None:
    """GPU 0 of node-0 falls off the bus (XID 79): evict train-0 only, taint node-0, leave kube-system alone."""
    _workloads(sim)
    sim.backends["node-0"].inject_xid(0, xid=79, message="GPU has fallen off the bus")


def pdb(sim: SimCluster) -> None:
    """As xid79, but a PodDisruptionBudget (minAvailable 1 of the one 'serve' pod) protects the pod on GPU 0."""
    _workloads(sim)
    sim.add_pod("node-0", namespace="ml", name="serve-0", gpu_indexes=(0,), labels={"app": "serve"})
    sim.cluster.create(pdb_object("ml", name="serve-pdb", match_labels={"app": "serve"}, min_available=1))
    sim.backends["node-0"].inject_xid(0, xid=79, message="GPU has fallen off the bus")


def pdb_spread(sim: SimCluster) -> None:
    """As xid79, with a 'serve' Deployment of three replicas (minAvailable 2): one on the failed
    GPU, two on healthy nodes. The budget allows one disruption, so the pod on the dead GPU goes."""
    _workloads(sim)
    sim.add_pod("node-0", namespace="ml", name="serve-0", gpu_indexes=(0,), labels={"app": "serve"})
    sim.add_pod("node-1", namespace="ml", name="serve-1", gpu_indexes=(1,), labels={"app": "serve"})
    sim.add_pod("node-2", namespace="ml", name="serve-2", gpu_indexes=(0,), labels={"app": "serve"})
    sim.cluster.create(pdb_object("ml", name="serve-pdb", match_labels={"app": "serve"}, min_available=2))
    sim.backends["node-0"].inject_xid(0, xid=79, message="GPU has fallen off the bus")


def storm(sim: SimCluster) -> None:
    """Double-bit ECC errors (XID 48) on half the nodes at once: the breaker opens, nothing is touched."""
    _workloads(sim)
    for node in list(sim.backends)[: max(1, len(sim.backends) // 2)]:
        sim.backends[node].inject_xid(0, xid=48, message="double-bit ECC error")


def app_xid(sim: SimCluster) -> None:
    """An application error (XID 13) on node-0 GPU 0: the GPU is fine, nothing happens."""
    _workloads(sim)
    sim.backends["node-0"].inject_xid(0, xid=13, message="illegal address")


def healthy(sim: SimCluster) -> None:
    """Workloads running, no faults: nothing to do."""
    _workloads(sim)


SCENARIOS: dict[str, Callable[[SimCluster], Any]] = {
    "xid79": xid79,
    "pdb": pdb,
    "pdb-spread": pdb_spread,
    "storm": storm,
    "app-xid": app_xid,
    "healthy": healthy,
}


def run_scenario(name: str, nodes: int = 4) -> SimCluster:
    """Build a cluster, play scenario ``name`` on it and let every publisher write. Raises KeyError
    naming the known scenarios."""
    play = SCENARIOS.get(name)
    if play is None:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    sim = build(nodes)
    play(sim)
    sim.publish()
    return sim
