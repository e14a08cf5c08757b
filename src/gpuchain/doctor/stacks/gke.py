"""Google GKE: Google's own device plugin and (on COS/Ubuntu images) its driver installer.

Names as GKE runs them in ``kube-system`` (seen in public reports, e.g. rapidsai/deployment#572,
NVIDIA/k8s-device-plugin#96): DaemonSets ``nvidia-gpu-device-plugin-<size>-<os>`` (older:
``nvidia-gpu-device-plugin``) and ``nvidia-driver-installer`` (its work is the init container
``nvidia-driver-installer``); nodes carry ``cloud.google.com/gke-accelerator``.
"""

from __future__ import annotations

from gpuchain.doctor.structs import Snapshot, Stack
from gpuchain.kube.objects import labels_of, name_of, namespace_of
from gpuchain.operator.policy import ClusterPolicySpec

NAMESPACE = "kube-system"
PLUGIN_PREFIX = "nvidia-gpu-device-plugin"
INSTALLER = "nvidia-driver-installer"
ACCELERATOR = "cloud.google.com/gke-accelerator"
#: Where GKE installs the driver on the host (its docs and NVIDIA/dcgm-exporter#59).
DRIVER_ROOT = "/home/kubernetes/bin/nvidia"


def detect(snapshot: Snapshot) -> Stack | None:
    """Google's device plugin DaemonSet, or GPU nodes labelled by GKE."""
    ds = [d for d in snapshot.daemonsets if namespace_of(d) == NAMESPACE]
    plugin = next((name_of(d) for d in ds if name_of(d).startswith(PLUGIN_PREFIX)), None)
    gke_nodes = any(ACCELERATOR in labels_of(n) for n in snapshot.nodes)
    if plugin is None and not gke_nodes:
        return None
    installer = next((name_of(d) for d in ds if name_of(d).startswith(INSTALLER)), None)
    spec = ClusterPolicySpec.model_validate(
        {
            "driver": {"enabled": installer is not None},
            "toolkit": {"enabled": False},
            "validator": {"enabled": False},
            "dcgmExporter": {"enabled": False},
            "gfd": {"enabled": False},
            "migManager": {"enabled": False},
        }
    )
    daemonsets = {"device-plugin": plugin or PLUGIN_PREFIX}
    containers = {"device-plugin": PLUGIN_PREFIX}
    if installer:
        daemonsets["driver"] = installer
        containers["driver"] = INSTALLER
    return Stack(
        id="gke",
        title="Google GKE (GKE's device plugin" + (" and driver installer)" if installer else ", GKE-managed driver)"),
        namespace=NAMESPACE,
        daemonsets=daemonsets,
        containers=containers,
        policy=spec,
        host_driver=installer is None,
        prefixes={PLUGIN_PREFIX: "device-plugin"},
        # An operand of another release must mount the driver root to load NVML.
        driver_root=DRIVER_ROOT,
        # GKE's documented ways to get the driver onto a GPU node pool (cloud.google.com/kubernetes-engine/
        # docs/how-to/gpus): the pool's gpu-driver-version, the node label that asks node auto-provisioning for a
        # pool with one (the installer DaemonSets select nodes without it: container-engine-accelerators
        # nvidia-driver-installer/cos/daemonset-preloaded.yaml), or the driver installer DaemonSet.
        driver_install="install the NVIDIA driver on the node: recreate its node pool with --accelerator "
        "...,gpu-driver-version=default (latest for a GPU the default driver branch does not support); for a pool "
        "node auto-provisioning creates, give the GPU pods the nodeSelector cloud.google.com/gke-gpu-driver-version: "
        "default (or latest), so the pools it makes install the driver; or kubectl "
        "apply -f https://raw.githubusercontent.com/GoogleCloudPlatform/container-engine-accelerators/master/"
        "nvidia-driver-installer/cos/daemonset-preloaded.yaml (daemonset-preloaded-latest.yaml for the latest "
        "driver; ubuntu/daemonset-preloaded.yaml on Ubuntu node images); where such an installer DaemonSet runs "
        "and fails, update the driver installer DaemonSet's image to the cos-gpu-installer release the node's COS "
        "milestone's release notes list (an older installer does not know the newer milestone's kernel)",
        # GKE deploys its device plugin DaemonSet as an addon of the cluster, no operator in it: where it is missing,
        # the Kubernetes addon it comes from (kubernetes cluster/addons/device-plugins/nvidia-gpu/daemonset.yaml,
        # the same DaemonSet name, kube-system) runs the plugin on the nodes with cloud.google.com/gke-accelerator.
        operand_install={
            "device-plugin": "deploy the GPU device plugin DaemonSet GKE runs on GPU node pools: kubectl apply -f "
            "https://raw.githubusercontent.com/kubernetes/kubernetes/master/cluster/addons/device-plugins/nvidia-gpu/"
            "daemonset.yaml (it selects the nodes labelled cloud.google.com/gke-accelerator; the addon manager keeps "
            "it from then on, its mode EnsureExists)"
        },
        # GKE's API server runs ExtendedResourceToleration: pods that request nvidia.com/gpu get the toleration of
        # the nvidia.com/gpu taint GKE puts on GPU node pools (cloud.google.com/kubernetes-engine/docs/concepts/gpus).
        extended_resource_toleration=True,
    )
