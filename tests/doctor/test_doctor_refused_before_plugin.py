"""GPU pods the kubelet refused at admission for a GPU resource its node had not announced yet (bound before the
device plugin registered): the node is the root, the pod is made again, and the component that bound it early is
named.

Facts: the kubelet's refusal, reason OutOf<resource> and "Node didn't have enough resource: %s, requested: %d, used:
%d, capacity: %d" (kubernetes pkg/kubelet/lifecycle/predicate.go, InsufficientResourcePrefix and
InsufficientResourceError); Karpenter bound pods to the nodes it launched until v0.11.0, whose upgrade guide says the
kubelet zeroed the resources and pods no longer bind before the device plugin (aws/karpenter-provider-aws
website/content/en/v0.11.0/upgrade-guide/_index.md@v0.11.0; v0.10.1 still binds, provisioner.go@v0.10.1); the node
label karpenter.sh/provisioner-name is v1alpha5's. tests/sim/heldout36 (aws/karpenter-provider-aws#1914) had an EKS
1.20 node; these vary the node, the resource count, the binder and its release.
"""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor.links.outof_gpu import FINDING
from gpuchain.doctor.model import FixOp, Severity
from gpuchain.kube import NODE, POD
from gpuchain.sim.build import SimCluster


def made(obj: dict[str, Any]) -> Any:
    """An edit: ``obj`` created with its status (as the API server keeps a pod's status apart)."""

    def edit(sim: SimCluster) -> None:
        sim.cluster.create(obj)
        ns = obj["metadata"].get("namespace")
        sim.cluster.patch_status(POD, name=obj["metadata"]["name"], status=obj["status"], namespace=ns)

    return edit


CLUSTER = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: g6-node-3, preset: l4-x2}\n"


def refused(used: int = 0, capacity: int = 0, labels: dict[str, str] | None = None) -> list[Any]:
    """Edits: a bare pod asking for 2 GPUs bound to g6-node-3 and refused by its kubelet, with the kubelet's Event."""
    words = f"Node didn't have enough resource: nvidia.com/gpu, requested: 2, used: {used}, capacity: {capacity}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "vllm-0", "namespace": "serve"},
        "spec": {
            "nodeName": "g6-node-3",
            "containers": [
                {"name": "vllm", "image": "vllm/vllm-openai:v0.6.3", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
            ],
        },
        "status": {"phase": "Failed", "reason": "OutOfnvidia.com/gpu", "message": f"Pod {words}"},
    }

    def label(sim: SimCluster) -> None:
        if labels:
            sim.cluster.patch(NODE, name="g6-node-3", patch={"metadata": {"labels": labels}})

    event = {"reason": "OutOfnvidia.com/gpu", "count": 1, "message": words}
    return [
        label,
        made(pod),
        {"do": "pod", "daemonset": "vllm", "namespace": "serve", "node": "g6-node-3", "events": [event]},
    ]


def controller(tag: str) -> Any:
    return made(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "karpenter-5b8c7d-x1", "namespace": "karpenter"},
            "spec": {"containers": [{"name": "controller", "image": f"public.ecr.aws/karpenter/controller:{tag}"}]},
            "status": {"phase": "Running"},
        }
    )


KARPENTER = {"karpenter.sh/provisioner-name": "gpu"}


def test_a_pod_refused_before_the_plugin_registered_on_a_karpenter_node_is_recreated_and_karpenter_upgraded() -> None:
    report = diagnosed(CLUSTER, controller("v0.10.1"), *refused(labels=KARPENTER))
    (found,) = [f for f in report.findings if f.id == FINDING]
    assert found.node == "g6-node-3" and found.link == "node" and found.root
    assert found.action is not None and found.action.op is FixOp.DELETE
    assert found.fix.startswith("kubectl -n serve delete pod vllm-0")
    assert "Karpenter to v0.11.0 or later (it runs v0.10.1)" in found.fix
    assert any("upgrade-guide" in e for e in found.evidence)


def test_a_pod_bound_by_hand_is_recreated_and_left_to_kube_scheduler() -> None:
    report = diagnosed(CLUSTER, *refused())
    (found,) = [f for f in report.findings if f.id == FINDING]
    assert "Karpenter" not in found.fix and "let kube-scheduler bind" in found.fix


def test_a_karpenter_that_no_longer_binds_is_not_named() -> None:
    report = diagnosed(CLUSTER, controller("v0.11.0"), *refused(labels=KARPENTER))
    (found,) = [f for f in report.findings if f.id == FINDING]
    assert "upgrade Karpenter" not in found.fix


def test_a_refusal_for_gpus_all_in_use_is_no_early_binding() -> None:
    report = diagnosed(CLUSTER, *refused(used=1, capacity=2))
    assert not [f for f in report.findings if f.id == FINDING]


def test_a_node_that_still_announces_no_gpu_leaves_it_to_the_walk() -> None:
    def unannounced(sim: SimCluster) -> None:
        node = sim.cluster.get(NODE, name="g6-node-3")
        status = {**node["status"], "allocatable": {**node["status"]["allocatable"], "nvidia.com/gpu": "0"}}
        sim.cluster.patch_status(NODE, name="g6-node-3", status=status)

    report = diagnosed(CLUSTER, *refused(), unannounced)
    assert not [f for f in report.findings if f.id == FINDING]


def test_a_healthy_node_with_its_gpu_pods_running_stays_quiet() -> None:
    report = diagnosed(CLUSTER + "workloads:\n  - {name: app, namespace: ml, count: 1, gpus: 1, node: g6-node-3}\n")
    assert [f for f in report.findings if f.severity is Severity.ERROR] == []
