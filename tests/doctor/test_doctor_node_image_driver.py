"""A managed cloud's node image and the GPU Operator's driver switch, read from the node's labels and nodeInfo
(gpuchain.doctor.node_image, whose docstring names the sources): the operator's driver container on an image
that already brings a driver is turned off (driver.enabled=false, GKE's driver root where GKE installs it),
and the driver container off on an image that brings none gets the cloud's own install.

Node facts as the clouds write them: AKS labels GPU nodes ``kubernetes.azure.com/accelerator=nvidia`` and
``kubernetes.azure.com/node-image-version=AKSUbuntu-2204gen2containerd-<date>`` on kernels ``5.15.0-*-azure``;
GKE labels ``cloud.google.com/gke-accelerator`` and ``cloud.google.com/gke-gpu-driver-version``
(default/latest/disabled), osImage ``Container-Optimized OS from Google`` or Ubuntu; Bottlerocket's osImage
names its variant (``Bottlerocket OS 1.26.2 (aws-k8s-1.31-nvidia)``), Amazon Linux's its release."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import crash_looping, diagnosed, no_gpus

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, FixOp, Report
from gpuchain.doctor.node_image import node_image, os_tag

AKS_LABELS = (
    "{kubernetes.azure.com/accelerator: nvidia, "
    "kubernetes.azure.com/node-image-version: AKSUbuntu-2204gen2containerd-202501.12.0}"
)


def _node(name: str, os_image: str, kernel: str, labels: str = "{}") -> str:
    return f"  - name: {name}\n    osImage: {os_image}\n    kernel: {kernel}\n    labels: {labels}\n"


def _aks(name: str) -> str:
    return _node(name, "Ubuntu 22.04.5 LTS", "5.15.0-1079-azure", AKS_LABELS)


def _operator(*nodes: str, policy: str = "") -> str:
    return f"name: t\nstack: gpu-operator\n{policy}nodes:\n" + "".join(nodes)


def _driver_crash(node: str, log: str = "") -> dict[str, Any]:
    return {
        "do": "pod",
        "daemonset": "nvidia-driver-daemonset",
        "node": node,
        "containers": [crash_looping("nvidia-driver-ctr", 11)],
        "logs": {"nvidia-driver-ctr": log},
    }


def _roots(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def test_the_operators_driver_failing_on_an_aks_gpu_image_is_turned_off_in_the_policy() -> None:
    (root,) = _roots(diagnosed(_operator(_aks("a1")), no_gpus("a1"), _driver_crash("a1")))
    assert (root.id, root.link, root.node) == ("driver.host-driver-conflict", "driver", "a1")
    assert root.action is not None and root.action.changes == {"spec": {"driver": {"enabled": False}}}
    assert "driver.enabled=false" in root.fix and "--skip-gpu-driver-install" in root.fix
    assert "label kubernetes.azure.com/accelerator=nvidia" in root.evidence


def test_a_driver_that_cannot_unload_on_every_aks_node_goes_off_for_the_cluster_not_node_by_node() -> None:
    line = "Could not unload NVIDIA driver kernel modules, driver is in use\n"
    report = diagnosed(
        _operator(_aks("a1"), _aks("a2")),
        no_gpus("a1"),
        no_gpus("a2"),
        _driver_crash("a1", line),
        _driver_crash("a2", line),
    )
    roots = _roots(report)
    assert {f.node for f in roots} == {"a1", "a2"}
    for root in roots:
        assert root.id == "driver.host-driver-conflict"
        assert root.action is not None and root.action.op is FixOp.PATCH_POLICY


def test_beside_nodes_whose_operator_driver_runs_only_the_aks_node_opts_out() -> None:
    report = diagnosed(
        _operator(_aks("a1"), _node("u1", "Ubuntu 22.04.4 LTS", "5.15.0-105-generic")),
        no_gpus("a1"),
        _driver_crash("a1"),
    )
    (root,) = _roots(report)
    assert root.node == "a1" and root.action is not None
    assert root.action.changes == {"nvidia.com/gpu.deploy.driver": "false"}


def test_the_operators_driver_on_a_node_gke_installs_a_driver_on_uses_gkes_driver_root() -> None:
    labels = "{cloud.google.com/gke-accelerator: nvidia-l4, cloud.google.com/gke-gpu-driver-version: default}"
    scenario = _operator(_node("g1", "Ubuntu 22.04.5 LTS", "6.8.0-1019-gke", labels))
    (root,) = _roots(diagnosed(scenario, no_gpus("g1"), _driver_crash("g1")))
    assert root.link == "driver" and root.action is not None
    assert root.action.changes == {
        "spec": {"driver": {"enabled": False}, "hostPaths": {"driverInstallDir": "/home/kubernetes/bin/nvidia"}}
    }
    assert "hostPaths.driverInstallDir=/home/kubernetes/bin/nvidia" in root.fix


def test_the_operators_driver_on_bottlerocket_goes_off_with_its_toolkit() -> None:
    scenario = _operator(_node("b1", "Bottlerocket OS 1.26.2 (aws-k8s-1.31-nvidia)", "6.1.115"))
    (root,) = _roots(diagnosed(scenario, no_gpus("b1"), _driver_crash("b1")))
    assert root.link == "driver" and root.action is not None
    assert root.action.changes == {"spec": {"driver": {"enabled": False}, "toolkit": {"enabled": False}}}


def test_a_driver_failing_on_a_node_of_the_users_own_image_is_not_called_a_managed_image() -> None:
    scenario = _operator(_node("u1", "Ubuntu 22.04.4 LTS", "5.15.0-105-generic"))
    (root,) = _roots(diagnosed(scenario, no_gpus("u1"), _driver_crash("u1")))
    assert root.id == "driver.not-ready"


def test_the_driver_off_on_a_gke_cos_node_without_gkes_driver_gets_gkes_install() -> None:
    """NVIDIA has no driver container for COS: turning the operator's on would not help."""
    labels = "{cloud.google.com/gke-accelerator: nvidia-l4, cloud.google.com/gke-gpu-driver-version: disabled}"
    scenario = _operator(
        _node("g1", "Container-Optimized OS from Google", "6.1.100+", labels),
        policy="policy: {driver: {enabled: false}}\n",
    )
    (root,) = _roots(diagnosed(scenario, no_gpus("g1")))
    assert (root.id, root.link) == ("driver.missing", "driver")
    assert root.action is not None and root.action.op is FixOp.NODE
    assert "gpu-driver-version=default" in root.fix and "type=nvidia-l4" in root.fix
    assert '"enabled":true' not in root.fix


def test_the_driver_off_on_an_amazon_linux_node_gets_the_accelerated_ami() -> None:
    scenario = _operator(
        _node("e1", "Amazon Linux 2023.6.20241212", "6.1.119-129.201.amzn2023.x86_64"),
        policy="policy: {driver: {enabled: false}}\n",
    )
    (root,) = _roots(diagnosed(scenario, no_gpus("e1")))
    assert (root.id, root.link) == ("driver.missing", "driver")
    assert "accelerated AMI" in root.fix


def test_the_os_tag_is_the_operators() -> None:
    """ID then VERSION_ID, the major number alone for rhel (state_manager.go getGPUNodeOSInfo)."""
    nfd = {
        "metadata": {
            "labels": {
                "feature.node.kubernetes.io/system-os_release.ID": "rhel",
                "feature.node.kubernetes.io/system-os_release.VERSION_ID": "9.4",
            }
        }
    }
    assert os_tag(nfd) == "rhel9"
    rhcos = {"status": {"nodeInfo": {"osImage": "Red Hat Enterprise Linux CoreOS 416.94.202410211619-0"}}}
    assert os_tag(rhcos) == "rhcos4.16"
    assert os_tag({"status": {"nodeInfo": {"osImage": "Ubuntu 24.04.1 LTS"}}}) == "ubuntu24.04"
    assert node_image({"status": {"nodeInfo": {"osImage": "Ubuntu 24.04.1 LTS"}}}) is None


def test_the_operators_driver_on_cos_without_gkes_label_goes_off_for_gkes_driver() -> None:
    """NVIDIA has no driver container for COS, so whatever installs the driver there, it is not the operator."""
    labels = "{cloud.google.com/gke-accelerator: nvidia-tesla-t4}"
    scenario = _operator(_node("g1", "Container-Optimized OS from Google", "6.1.100+", labels))
    (root,) = _roots(diagnosed(scenario, no_gpus("g1"), _driver_crash("g1")))
    assert (root.id, root.link) == ("driver.host-driver-conflict", "driver")
    assert root.action is not None and root.action.changes["spec"]["driver"] == {"enabled": False}
    assert "gpu-driver-version=default" in root.cause + root.fix
