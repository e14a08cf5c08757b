"""An operand pod the node's kubelet refused at admission: the node (its kubelet's setting, or its release) is the
root, not the operand. The reasons and their words are the kubelet's own: TopologyAffinityError and "Resources cannot
be allocated with Topology locality" (kubernetes pkg/kubelet/cm/topologymanager/topology_manager.go@v1.34.4),
OutOfpods and "Node didn't have enough resource: pods, requested: 1, used: 110, capacity: 110" (pkg/kubelet/lifecycle/
predicate.go@v1.34.4, InsufficientResourceError); the kubelet marks such a pod Failed and posts a Warning Event with the
reason on it (pkg/kubelet/kubelet.go rejectPod). The release defect is kubernetes CHANGELOG/CHANGELOG-1.16.md (v1.16.5:
best-effort pods refused by the single-numa-node policy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from doctor.small_cluster import built, diagnosed

from gpuchain.doctor import diagnose
from gpuchain.doctor.admission import FINDING
from gpuchain.doctor.dump import read_dump, write_dump
from gpuchain.doctor.model import Finding, Report, Severity
from gpuchain.kube import POD
from gpuchain.sim.build import SimCluster

PLUGIN = (
    "name: t\nstack: nvidia-device-plugin\nnodes:\n"
    "  - {name: numa-a, preset: a100-40gb-x8, hostDriver: 550.54.15}\n"
    "  - {name: numa-b, preset: a100-40gb-x8, hostDriver: 550.54.15}\n"
)
DS = "nvidia-device-plugin-daemonset"
TOPOLOGY = "Resources cannot be allocated with Topology locality"
OUT_OF_PODS = "Node didn't have enough resource: pods, requested: 1, used: 110, capacity: 110"


def _silent(node: str, kubelet: str) -> dict[str, Any]:
    """``node`` announcing no GPU (its plugin never started), on kubelet ``kubelet``."""
    return {
        "do": "node",
        "node": node,
        "capacity": {"nvidia.com/gpu": None},
        "allocatable": {"nvidia.com/gpu": None},
        "nodeInfo": {"kubeletVersion": kubelet},
    }


def _no_plugin_pod(node: str) -> Any:
    def edit(sim: SimCluster) -> None:
        for pod in sim.cluster.list(POD):
            if pod["metadata"]["name"].startswith(DS) and pod["spec"].get("nodeName") == node:
                sim.cluster.delete(POD, name=pod["metadata"]["name"], namespace=pod["metadata"]["namespace"])

    return edit


def _refused_pod(node: str, reason: str, message: str, resources: dict[str, Any] | None = None) -> Any:
    """The plugin's pod on ``node`` as the kubelet leaves one it refused: Failed with its reason and message."""
    container: dict[str, Any] = {
        "name": "nvidia-device-plugin-ctr",
        "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
    }
    if resources:
        container["resources"] = resources

    def edit(sim: SimCluster) -> None:
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{DS}-r{node[-1]}x9z",
                    "namespace": "kube-system",
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": DS, "controller": True}],
                },
                "spec": {"nodeName": node, "containers": [container]},
                "status": {"phase": "Failed", "reason": reason, "message": f"Pod was rejected: {message}"},
            },
        )

    return edit


def _rejection_event(node: str, reason: str, message: str) -> Any:
    """The kubelet's Warning Event on a plugin pod it refused (the pod itself already gone)."""

    def edit(sim: SimCluster) -> None:
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{DS}-q7.{reason.lower()}", "namespace": "kube-system"},
                "involvedObject": {"kind": "Pod", "name": f"{DS}-q7", "namespace": "kube-system"},
                "type": "Warning",
                "reason": reason,
                "message": message,
                "count": 1,
                "source": {"component": "kubelet", "host": node},
            },
        )

    return edit


def _refused(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.id == FINDING]


def _without_plugin(node: str, kubelet: str, refusal: Any) -> Report:
    """The doctor's report where ``node``'s plugin pod is gone and ``refusal`` (a Failed pod, an Event) says why."""
    return diagnosed(PLUGIN, _no_plugin_pod(node), refusal, _silent(node, kubelet))


def test_a_best_effort_plugin_pod_refused_by_single_numa_node_on_an_affected_kubelet_names_the_patch_release() -> None:
    report = _without_plugin("numa-a", "v1.16.3", _refused_pod("numa-a", "TopologyAffinityError", TOPOLOGY))
    (found,) = _refused(report)
    assert (found.node, found.link, found.severity, found.root) == ("numa-a", "node", Severity.ERROR, True)
    assert "v1.16.5" in found.fix and "topologyManagerPolicy: best-effort" in found.fix
    assert "kubelet.topology-refuses-besteffort" in " ".join(found.evidence)
    # The node is the root: the plugin's missing registration is not named as a second one.
    assert not [f for f in report.findings if f.id == "device-plugin.not-registered"]


def test_on_a_fixed_kubelet_the_topology_refusal_is_the_policy_not_the_release() -> None:
    limits = {"limits": {"cpu": "50m", "memory": "64Mi"}}
    report = _without_plugin("numa-b", "v1.31.4", _refused_pod("numa-b", "TopologyAffinityError", TOPOLOGY, limits))
    (found,) = _refused(report)
    assert found.node == "numa-b" and "topologyManagerPolicy" in found.fix and "upgrade" not in found.fix


def test_the_kubelets_event_alone_names_an_out_of_pods_refusal_and_its_repair() -> None:
    report = _without_plugin("numa-a", "v1.30.2", _rejection_event("numa-a", "OutOfpods", OUT_OF_PODS))
    (found,) = _refused(report)
    assert "OutOfpods" in found.cause and "maxPods" in found.fix and "system-node-critical" in found.fix


def test_a_refusal_the_running_plugin_pod_replaced_is_history() -> None:
    # numa-a announces no GPU (so the refused pods are read) while a new plugin pod runs there: the refusal is past.
    report = diagnosed(PLUGIN, _refused_pod("numa-a", "TopologyAffinityError", TOPOLOGY), _silent("numa-a", "v1.16.3"))
    assert _refused(report) == []
    assert [f.id for f in report.findings if f.root and f.node == "numa-a"] == ["device-plugin.not-registered"]


def test_a_failed_pod_whose_reason_is_not_an_admission_refusal_is_not_read_as_one() -> None:
    deadline = "Pod was active on the node longer than the specified deadline"
    report = _without_plugin("numa-a", "v1.30.2", _refused_pod("numa-a", "DeadlineExceeded", deadline))
    assert _refused(report) == []


def test_the_refused_pods_cost_one_list_only_where_a_daemonset_counts_pods_it_does_not_list() -> None:
    quiet = diagnosed(PLUGIN, _silent("numa-a", "v1.30.2"))  # a silent node whose plugin pod lives: no extra list
    refused = _without_plugin("numa-a", "v1.30.2", _refused_pod("numa-a", "TopologyAffinityError", TOPOLOGY))
    assert refused.api_calls["list"] == quiet.api_calls["list"] + 1


def test_a_dump_keeps_the_refused_pod_the_live_doctor_reads(tmp_path: Path) -> None:
    sim = built(
        PLUGIN,
        _no_plugin_pod("numa-a"),
        _refused_pod("numa-a", "TopologyAffinityError", TOPOLOGY),
        _silent("numa-a", "v1.16.3"),
    )
    write_dump(sim.cluster, tmp_path)
    (found,) = _refused(diagnose(read_dump(tmp_path)))
    assert found.node == "numa-a" and "v1.16.5" in found.fix
