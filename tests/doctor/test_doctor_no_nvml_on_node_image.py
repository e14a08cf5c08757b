"""A device plugin that cannot load NVML on a managed node image (issue 26): the plugin's own hint ("did you set
the docker default runtime") names the runtime, but on a stack whose node image is meant to carry both the driver
and the nvidia runtime, the same words come from a node the image gave no driver. The link is decided from what
the node says of a driver (the labels its cloud writes on the nodes it gives one), and never from the hint alone."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed, no_gpus

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, Report

#: NVIDIA/k8s-device-plugin main.go@v0.9.0: the plugin logs NVML's init failure and its hints, then waits
#: (``select {}``) instead of exiting, so its pod runs ready and announces nothing. go-nvml's error text for a
#: libnvidia-ml.so.1 it cannot dlopen is "could not load NVML library".
WAITING_PLUGIN_LOG = (
    "2021/03/02 10:00:00 Loading NVML\n"
    "2021/03/02 10:00:00 Failed to initialize NVML: could not load NVML library.\n"
    "2021/03/02 10:00:00 If this is a GPU node, did you set the docker default runtime to `nvidia`?\n"
    "2021/03/02 10:00:00 You can check the prerequisites at: https://github.com/NVIDIA/k8s-device-plugin#prerequisites\n"
)
NODE = "aks-gpupool-12345678-vmss000000"


def _running_plugin(log: str) -> dict[str, Any]:
    running = {"name": "nvidia-device-plugin-ctr", "ready": True, "state": {"running": True}}
    return {
        "do": "pod",
        "daemonset": "nvidia-device-plugin-daemonset",
        "node": NODE,
        "containers": [running],
        "logs": {"nvidia-device-plugin-ctr": log},
    }


def _roots(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def test_a_plugin_left_waiting_without_nvml_on_an_aks_node_no_driver_was_given_is_the_node_image() -> None:
    """AKS labels the GPU nodes it provisions kubernetes.azure.com/accelerator=nvidia (and installs their driver
    and runtime); a GPU VM size it did not provision as such has neither."""
    report = diagnosed(
        f"name: t\nstack: aks\nnodes:\n  - {{name: {NODE}, preset: t4-x4, labels: "
        "{node.kubernetes.io/instance-type: Standard_NC6s_v3}}\n",
        {"do": "node", "node": NODE, "labels": {"kubernetes.azure.com/accelerator": None}},
        no_gpus(NODE),
        _running_plugin(WAITING_PLUGIN_LOG),
    )
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("driver.missing", "driver", NODE)
    assert "node pool" in root.fix and "default runtime" not in root.fix
    assert any("kubernetes.azure.com/accelerator" in e for e in root.evidence)
    assert "toolkit.runtime-not-default" not in report.ids


def test_the_same_on_an_aks_node_under_the_standalone_plugin_is_read_from_the_nodes_aks_labels() -> None:
    """AKS writes kubernetes.azure.com/node-image-version on every node it makes: the node is AKS's whatever stack
    adapter the cluster's DaemonSets pick."""
    report = diagnosed(
        f"name: t\nstack: nvidia-device-plugin\nnodes:\n  - {{name: {NODE}, preset: t4-x4, labels: "
        "{kubernetes.azure.com/node-image-version: AKSUbuntu-2204gen2containerd-202402.07.0}}\n",
        no_gpus(NODE),
        _running_plugin(WAITING_PLUGIN_LOG),
    )
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("driver.missing", "driver", NODE)
    assert "az aks nodepool upgrade" in root.fix


def test_the_same_words_on_an_aks_node_provisioned_as_a_gpu_node_are_the_runtime_not_the_image() -> None:
    """The node AKS labelled accelerator=nvidia got the driver: a plugin without NVML there runs without the
    nvidia runtime (NVIDIA/k8s-device-plugin#444's AKS pool with containerd reconfigured)."""
    report = diagnosed(
        f"name: t\nstack: aks\nnodes:\n  - {{name: {NODE}, preset: t4-x4}}\n",
        no_gpus(NODE),
        _running_plugin(WAITING_PLUGIN_LOG),
    )
    (root,) = _roots(report)
    assert (root.id, root.link) == ("toolkit.runtime-not-default", "toolkit")
