"""User GPU pods the scheduler places on no GPU node: the doctor reads the scheduler's words and the pod's and
nodes' objects, names what keeps the pod off, and the fix is the change that lets it on (the toleration on its
owner's template, the selector value the GPU nodes carry, the DRA driver that publishes devices), never the
capacity advice of a full cluster.

Where the texts come from (facts, the scheduler's strings): kubernetes pkg/scheduler/framework/types.go@v1.34.4
(``NoNodeAvailableMsg`` "0/%v nodes are available", the ". preemption: ..." PostFilter part), plugins/
tainttoleration/taint_toleration.go@v1.34.4 ("node(s) had untolerated taint(s)"; releases before it wrote
"node(s) had untolerated taint {%s: %s}"), nodeaffinity/node_affinity.go@v1.34.4 (ErrReasonPod "node(s) didn't
match Pod's node affinity/selector"), noderesources/fit.go@v1.34.4 ("Insufficient %v"), dynamicresources/
dynamicresources.go@v1.34.4 ("cannot allocate all claims"). ResourceSlice and device taints:
k8s.io/api resource/v1 types.go@v0.34.4 (Device.taints, DeviceTaint key/value/effect).
"""

from __future__ import annotations

import json
from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor.model import FixOp, Report
from gpuchain.kube import NODE, POD
from gpuchain.sim.build import SimCluster

OPERATOR = "name: t\nstack: gpu-operator\nnodes:\n  - {name: gpu, count: 2}\n"
TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def tainted(*nodes: str, taint: dict[str, str] = TAINT) -> Any:
    """An edit: ``nodes`` carry ``taint`` (as `kubectl taint nodes` leaves them)."""

    def edit(sim: SimCluster) -> None:
        for node in nodes:
            sim.cluster.patch(NODE, name=node, patch={"spec": {"taints": [taint]}})

    return edit


def pending_pod(name: str, message: str, spec: dict[str, Any] | None = None, owner: str = "") -> Any:
    """An edit: a user's pod asking for one GPU, Pending as kube-scheduler leaves it (PodScheduled=False,
    Unschedulable, ``message``); owned by ReplicaSet ``owner``-5d8f7c (a Deployment's) when given."""

    def edit(sim: SimCluster) -> None:
        meta: dict[str, Any] = {"name": name, "namespace": "ml"}
        if owner:
            meta["labels"] = {"pod-template-hash": "5d8f7c"}
            meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": f"{owner}-5d8f7c", "controller": True}]
        container = {"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3"}
        body = {"containers": [{**container, "resources": {"limits": {"nvidia.com/gpu": "1"}}}], **(spec or {})}
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": body,
            "status": {"phase": "Pending", "conditions": [condition]},
        }
        sim.cluster.create(pod)
        sim.cluster.patch_status(POD, name=name, status=pod["status"], namespace="ml")

    return edit


def _one(report: Report, fid: str) -> Any:
    (found,) = [f for f in report.findings if f.id == fid]
    return found


TAINT_MSG = (
    "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint(s). preemption: 0/3 "
    "nodes are available: 3 Preemption is not helpful for scheduling."
)


def test_a_gpu_deployment_that_does_not_tolerate_the_gpu_nodes_taint_gets_the_toleration_on_its_template() -> None:
    report = diagnosed(OPERATOR, tainted("gpu-0", "gpu-1"), pending_pod("train-5d8f7c-abcde", TAINT_MSG, owner="train"))
    found = _one(report, "workload.untolerated-taint")
    assert found.root and found.link == "node"
    assert any("nvidia.com/gpu=present:NoSchedule" in e for e in found.evidence)
    assert found.action is not None and found.action.op is FixOp.PATCH_WORKLOAD
    assert found.action.target == "Deployment/ml/train"
    patch = {
        "spec": {
            "template": {
                "spec": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
            }
        }
    }
    assert (
        found.fix
        == f"kubectl -n ml patch deployment train --type merge -p '{json.dumps(patch, separators=(',', ':'))}'"
    )
    # Explained: not also told it waits for GPUs.
    assert not [f for f in report.findings if f.id == "workload.insufficient-gpu"]


def test_a_bare_pod_gets_the_toleration_on_itself_and_a_node_condition_taint_is_never_tolerated() -> None:
    report = diagnosed(OPERATOR, tainted("gpu-0", "gpu-1"), pending_pod("job", TAINT_MSG))
    found = _one(report, "workload.untolerated-taint")
    assert found.fix.startswith("kubectl -n ml patch pod job --type merge")
    down = {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}
    report = diagnosed(OPERATOR, tainted("gpu-0", "gpu-1", taint=down), pending_pod("job", TAINT_MSG))
    assert not [f for f in report.findings if f.id == "workload.untolerated-taint"]


def test_a_taint_on_some_gpu_nodes_only_is_no_placement_fault() -> None:
    """One GPU node admits the pod: it waits for GPUs there, no toleration is wanted."""
    report = diagnosed(OPERATOR, tainted("gpu-0"), pending_pod("job", TAINT_MSG))
    assert not [f for f in report.findings if f.id.startswith("workload.untolerated")]


AFFINITY_MSG = (
    "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are "
    "available: 2 Preemption is not helpful for scheduling."
)


def test_a_selector_on_a_product_the_gpu_nodes_do_not_have_gets_the_value_they_carry() -> None:
    """The pod selects nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB; the GPU nodes GFD labelled carry another."""
    selector = {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}
    report = diagnosed(OPERATOR, pending_pod("infer-5d8f7c-x", AFFINITY_MSG, selector, owner="infer"))
    found = _one(report, "workload.node-selector")
    assert found.action is not None and found.action.target == "Deployment/ml/infer"
    product = found.action.changes["patch"]["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"]
    assert product != "NVIDIA-A100-SXM4-80GB" and product in found.fix
    assert any("GPU nodes carry nvidia.com/gpu.product" in e for e in found.evidence)


def test_a_selector_on_a_label_no_gpu_node_has_labels_the_gpu_nodes() -> None:
    selector = {"nodeSelector": {"pool": "gpu"}}
    report = diagnosed(OPERATOR, pending_pod("job", AFFINITY_MSG, selector))
    found = _one(report, "workload.node-selector")
    assert found.fix == "kubectl label node gpu-0 gpu-1 pool=gpu --overwrite"


CLAIMS_MSG = (
    "0/2 nodes are available: 2 cannot allocate all claims. preemption: 0/2 nodes are available: 2 Preemption is "
    "not helpful for scheduling."
)
CLAIM = {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}


def _claim_pod(name: str) -> Any:
    """A pod whose GPU is a ResourceClaim (no nvidia.com/gpu limit), Pending on its claims."""

    def edit(sim: SimCluster) -> None:
        pending_pod(name, CLAIMS_MSG, CLAIM)(sim)
        containers = [
            {"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "resources": {"claims": [{"name": "gpu"}]}}
        ]
        sim.cluster.patch(POD, name=name, patch={"spec": {"containers": containers}}, namespace="ml")

    return edit


def test_claims_no_dra_driver_publishes_for_get_the_dra_driver_installed() -> None:
    report = diagnosed(OPERATOR, _claim_pod("claim"))
    found = _one(report, "workload.dra-unpublished")
    assert found.link == "device-plugin" and found.root
    assert found.fix.startswith("helm install nvidia-dra-driver-gpu nvidia/nvidia-dra-driver-gpu")
    assert "--set nvidiaDriverRoot=/run/nvidia/driver" in found.fix


def test_claims_every_published_device_of_which_is_tainted_get_the_toleration_or_the_taint_removed() -> None:
    def slices(sim: SimCluster) -> None:
        for node in ("gpu-0", "gpu-1"):
            device = {"name": "gpu-0", "taints": [{"key": "gpu.gpuchain.io/unhealthy", "effect": "NoSchedule"}]}
            sim.cluster.create(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceSlice",
                    "metadata": {"name": f"{node}-gpu.gpuchain.io"},
                    "spec": {
                        "driver": "gpu.gpuchain.io",
                        "nodeName": node,
                        "devices": [device],
                        "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    },
                }
            )

    report = diagnosed(OPERATOR, slices, _claim_pod("claim"))
    found = _one(report, "workload.dra-devices-tainted")
    assert "gpu.gpuchain.io/unhealthy:NoSchedule (2)" in " ".join(found.evidence)
    assert '"key":"gpu.gpuchain.io/unhealthy","operator":"Exists","effect":"NoSchedule"' in found.fix
