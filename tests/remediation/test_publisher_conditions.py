"""The publisher writes GPUHealthy alone: a kubelet condition written between its read and its write survives."""

from __future__ import annotations

from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import NODE, Kind, MemoryCluster
from gpuchain.kube.objects import Obj
from gpuchain.remediation.model import CONDITION_TYPE, find_condition
from gpuchain.remediation.publisher import GpuHealthPublisher
from gpuchain.sim.remediation import node_object


class KubeletBetweenReadAndWrite(MemoryCluster):
    """Every Node the publisher reads back (get, or the annotation patch's answer) is stale at
    once: a kubelet heartbeat that flips Ready lands right after it."""

    def __init__(self, objects: list[Obj]) -> None:
        super().__init__(objects)
        self.heartbeats = 0

    def _heartbeat(self, name: str) -> None:
        self.heartbeats += 1
        ready = {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": f"beat {self.heartbeats}"}
        self.set_condition(NODE, name=name, condition=ready)

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj:
        got = super().get(kind, name=name, namespace=namespace)
        if kind == NODE:
            self._heartbeat(name)
        return got

    def patch(self, kind: Kind, name: str, patch: Obj, namespace: str | None = None) -> Obj:
        got = super().patch(kind, name=name, patch=patch, namespace=namespace)
        if kind == NODE:
            self._heartbeat(name)
        return got


def test_a_kubelet_heartbeat_between_read_and_write_is_kept(h100_sim: SimBackend) -> None:
    cluster = KubeletBetweenReadAndWrite([node_object("n0")])
    publisher = GpuHealthPublisher(h100_sim, cluster=cluster, node_name="n0")
    publisher.handle(h100_sim.inject_xid(3, xid=79))
    assert publisher.publish().condition_written
    node = cluster.snapshot(NODE)[0]
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["message"]) == ("False", f"beat {cluster.heartbeats}"), (
        "the publisher must not write back its stale Ready"
    )
    gpu = find_condition(node)
    assert gpu is not None and gpu.status == "False" and "XID 79" in gpu.message
    assert [c["type"] for c in node["status"]["conditions"]].count(CONDITION_TYPE) == 1


def test_transition_time_moves_only_when_the_status_flips(h100_sim: SimBackend) -> None:
    cluster = MemoryCluster([node_object("n0")])
    publisher = GpuHealthPublisher(h100_sim, cluster=cluster, node_name="n0")
    publisher.publish()
    cluster.set_condition(
        NODE,
        name="n0",
        condition={"type": CONDITION_TYPE, "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"},
    )
    publisher.handle(h100_sim.inject_xid(3, xid=79))
    publisher.publish()
    flipped = next(c for c in cluster.get(NODE, name="n0")["status"]["conditions"] if c["type"] == CONDITION_TYPE)
    assert flipped["lastTransitionTime"] != "2020-01-01T00:00:00Z"
    publisher.handle(h100_sim.inject_xid(4, xid=79))
    publisher.publish()
    again = next(c for c in cluster.get(NODE, name="n0")["status"]["conditions"] if c["type"] == CONDITION_TYPE)
    assert "GPU-" in again["message"] and again["lastTransitionTime"] == flipped["lastTransitionTime"]
