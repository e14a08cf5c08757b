"""Two device plugin DaemonSets running on one node that register the same resource name: the kubelet keeps one
endpoint per name (kubernetes pkg/kubelet/cm/devicemanager/manager.go: PluginConnected replaces
``m.endpoints[resourceName]``; addEndpoint "always accepts newest device plugin" before v1.25), so the node's count is
the last registration's (gpuchain.doctor.links.plugin_pair).

Fixtures: HAMi's plugin DaemonSet as its chart renders it (Project-HAMi/HAMi charts/hami/templates/device-plugin/
daemonsetnvidia.yaml@v2.5.1: ``hami-device-plugin``, component label ``hami-device-plugin``, containers
``device-plugin`` and ``vgpu-monitor``, image ``projecthami/hami``; values.yaml resourceName ``nvidia.com/gpu``;
scheduler/device-configmap.yaml ``nvidia.resourceCountName``). The case it generalises is tests/sim/heldout34 h34-04
(k3s, one node, HAMi v2.3.13 beside the GPU Operator's plugin); these use other nodes, releases and stacks."""

from __future__ import annotations

from typing import Any

import pytest
from doctor.small_cluster import diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import FixOp, Report

OPERATOR = "name: t\nstack: gpu-operator\nnodes:\n  - {name: dgx-03, preset: a100-40gb-x8, labels: {gpu: 'on'}}\n"
TWO_NODES = (
    "name: t\nstack: gpu-operator\nnodes:\n  - {name: node-a, preset: t4-x4}\n"
    "  - {name: node-b, preset: t4-x4, labels: {gpu: 'on'}}\n"
)


def _hami(nodes: list[str], version: str = "v2.4.1", namespace: str = "kube-system") -> dict[str, Any]:
    return {
        "do": "add-daemonset",
        "namespace": namespace,
        "name": "hami-device-plugin",
        "labels": {"app.kubernetes.io/component": "hami-device-plugin", "app.kubernetes.io/name": "hami"},
        "containers": ["device-plugin", "vgpu-monitor"],
        "image": f"projecthami/hami:{version}",
        "nodeSelector": {"gpu": "on"},
        "nodes": nodes,
    }


def _capacity(node: str, count: int) -> dict[str, Any]:
    return {"do": "node", "node": node, "capacity": {"nvidia.com/gpu": count}, "allocatable": {"nvidia.com/gpu": count}}


def _roots(report: Report) -> list[Any]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def test_hami_beside_the_operators_plugin_on_every_node_it_serves_turns_the_operators_plugin_off() -> None:
    (root,) = _roots(diagnosed(OPERATOR, _hami(["dgx-03"]), _capacity("dgx-03", 8)))
    assert (root.id, root.link, root.node) == ("device-plugin.duplicate-resource", "device-plugin", "dgx-03")
    assert root.action is not None and root.action.changes == {"spec": {"devicePlugin": {"enabled": False}}}
    assert "resourceName" in root.fix and "hami-device-plugin" in root.fix


def test_hami_on_one_of_two_operator_nodes_opts_that_node_out_of_the_operators_plugin() -> None:
    report = diagnosed(TWO_NODES, _hami(["node-b"], "v2.6.0"), _capacity("node-b", 4))
    (root,) = _roots(report)
    assert (root.id, root.node) == ("device-plugin.duplicate-resource", "node-b")
    assert root.action is not None and root.action.op is FixOp.LABEL_NODE
    assert root.action.changes == {"nvidia.com/gpu.deploy.device-plugin": "false"}


def test_nvidias_chart_beside_hami_is_kept_off_hamis_node() -> None:
    # HAMi is the stack here (its adapter is asked before the standalone chart's); NVIDIA's chart runs beside it.
    scenario = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: rtx-box, preset: l4-x2, hostDriver: 550.127.05, labels: {gpu: 'on'}}\n"
    (root,) = _roots(diagnosed(scenario, _hami(["rtx-box"], "v2.5.1"), _capacity("rtx-box", 20)))
    assert (root.id, root.node) == ("device-plugin.duplicate-resource", "rtx-box")
    assert "nvidia-device-plugin-daemonset" in root.fix and "hami-device-plugin" in root.fix


def test_one_plugin_per_node_is_quiet() -> None:
    # The operator's plugin alone; and HAMi only on a node the operator's plugin does not serve is not this finding.
    assert not [f for f in diagnosed(OPERATOR).findings if f.id == "device-plugin.duplicate-resource"]
    off = {"do": "delete-daemonset", "namespace": "gpu-operator", "name": "nvidia-device-plugin-daemonset"}
    report = diagnosed(OPERATOR, off, _hami(["dgx-03"]), _capacity("dgx-03", 80))
    assert not [f for f in report.findings if f.id == "device-plugin.duplicate-resource"]


def test_hami_under_a_resource_name_of_its_own_is_quiet_beside_nvidias_chart() -> None:
    # HAMi's device config names the resource it serves (charts/hami/templates/scheduler/device-configmap.yaml@v2.5.1,
    # the chart's resourceName set to nvidia.com/vgpu): the two plugins register different names.
    from sim.heldout9 import harness as ninth

    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "hami-scheduler-device", "namespace": "kube-system"},
        "data": {"device-config.yaml": "nvidia:\n  resourceCountName: nvidia.com/vgpu\n  resourceMemoryName: x\n"},
    }
    scenario = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: rtx-box, preset: l4-x2, hostDriver: 550.127.05, labels: {gpu: 'on'}}\n"
    report = diagnosed(
        scenario,
        _hami(["rtx-box"], "v2.5.1"),
        lambda sim: ninth._apply(sim.cluster, {"do": "create", "object": config}),
    )
    assert not [f for f in report.findings if f.id == "device-plugin.duplicate-resource"]


def test_applied_the_label_leaves_the_node_to_hamis_plugin_alone() -> None:
    from doctor.small_cluster import built

    from gpuchain.doctor import run_doctor
    from gpuchain.kube import NODE, POD
    from gpuchain.kube.objects import name_of, namespace_of

    sim = built(TWO_NODES, _hami(["node-b"], "v2.6.0"), _capacity("node-b", 40))
    (root,) = _roots(run_doctor(sim.cluster, reader=sim.read_log))
    assert root.action is not None and root.action.op is FixOp.LABEL_NODE
    sim.cluster.patch(NODE, name=root.action.target, patch={"metadata": {"labels": root.action.changes}})
    # The operator's DaemonSet no longer selects the node (its nodeAffinity on the deploy label): its pod goes.
    for pod in sim.cluster.list(POD):
        if pod["spec"].get("nodeName") == "node-b" and name_of(pod).startswith("nvidia-device-plugin-daemonset"):
            sim.cluster.delete(POD, name=name_of(pod), namespace=namespace_of(pod))
    after = run_doctor(sim.cluster, reader=sim.read_log)
    assert not [f for f in after.findings if f.id == "device-plugin.duplicate-resource"]


#: NVIDIA's plugin code in HAMi's image, finding no NVML in its container (k8s-device-plugin internal/rm/factory.go).
NO_NVML = (
    "I0627 07:24:10.122031       1 factory.go:107] Detected non-NVML platform: could not load NVML library: "
    "libnvidia-ml.so.1: cannot open shared object file: No such file or directory\n"
)
GKE = "name: t\nstack: gke\nnodes:\n  - {name: gke-pool-a1b2, preset: t4-x4, labels: {gpu: 'on'}}\n"


def _crashing(node: str, log: str) -> dict[str, Any]:
    """HAMi's plugin on ``node`` exiting at every start with ``log``."""
    looping = {"name": "device-plugin", "restarts": 14, "state": {"waiting": "CrashLoopBackOff"}}
    looping["last"] = {"terminated": "Error", "exitCode": 1}
    running = {"name": "vgpu-monitor", "state": {"running": True}}
    return {
        "do": "pod",
        "daemonset": "hami-device-plugin",
        "namespace": "kube-system",
        "node": node,
        "containers": [looping, running],
        "logs": {"device-plugin": log},
    }


def test_hami_without_nvml_on_gke_mounts_the_node_images_driver_directory() -> None:
    """Project-HAMi/HAMi#1153: GKE installs the driver under /home/kubernetes/bin/nvidia and no NVIDIA toolkit
    injects it, so HAMi's plugin finds no NVML until its DaemonSet mounts that directory, as GKE's own plugin does."""
    report = diagnosed(
        GKE, _hami(["gke-pool-a1b2"]), _capacity("gke-pool-a1b2", 4), _crashing("gke-pool-a1b2", NO_NVML)
    )
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("device-plugin.not-ready", "device-plugin", "gke-pool-a1b2")
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET
    assert root.action.target == "kube-system/hami-device-plugin"
    assert "/home/kubernetes/bin/nvidia" in root.fix and "LD_LIBRARY_PATH" in root.fix


def test_hami_without_nvml_where_the_stack_keeps_no_driver_directory_is_not_told_to_mount_one() -> None:
    report = diagnosed(OPERATOR, _hami(["dgx-03"]), _capacity("dgx-03", 8), _crashing("dgx-03", NO_NVML))
    assert not any("/home/kubernetes/bin/nvidia" in f.fix for f in report.findings)
    assert "device-plugin.duplicate-resource" in report.ids


EKS = "name: t\nstack: eks\nnodes:\n  - {name: ip-10-0-3-17.ec2.internal, preset: t4-x4}\n"


def _beside(name: str, image: str) -> dict[str, Any]:
    return {
        "do": "add-daemonset",
        "namespace": "kube-system",
        "name": name,
        "labels": {"name": name},
        "containers": [name],
        "image": image,
        "nodes": ["ip-10-0-3-17.ec2.internal"],
    }


@pytest.mark.parametrize(
    "name, image",
    [
        # AWS's EFA plugin (aws/eks-charts stable/aws-efa-k8s-device-plugin): vpc.amazonaws.com/efa, not GPUs.
        (
            "aws-efa-k8s-device-plugin-daemonset",
            "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.6",
        ),
        # AMD's (ROCm/k8s-device-plugin k8s-ds-amdgpu-dp.yaml): amd.com/gpu under the same image name.
        ("amdgpu-device-plugin-daemonset", "rocm/k8s-device-plugin:1.31.0.6"),
    ],
)
def test_a_plugin_whose_image_only_resembles_nvidias_is_no_second_gpu_plugin(name: str, image: str) -> None:
    report = diagnosed(EKS, _beside(name, image))
    assert not [f for f in report.findings if f.id == "device-plugin.duplicate-resource"]


def test_nvidias_plugin_from_a_mirror_is_still_nvidias() -> None:
    report = diagnosed(EKS, _beside("gpu-plugin-mirror", "harbor.example.com/nvidia/k8s-device-plugin:v0.17.0"))
    assert [f.node for f in report.findings if f.id == "device-plugin.duplicate-resource"] == [
        "ip-10-0-3-17.ec2.internal"
    ]
