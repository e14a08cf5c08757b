"""What a node's image says about its driver: the OS the GPU Operator names a driver image after, and whether
a managed cloud's node image already brings the NVIDIA driver (read from the node's labels and nodeInfo).

Facts, from their sources:

- the GPU Operator's driver image is ``<repository>/<image>:<version>-<os tag>``, the OS tag being NFD's
  ``feature.node.kubernetes.io/system-os_release.ID`` then ``VERSION_ID``, whose major number alone for
  ``rhel``, ``rocky`` and ``ol`` (NVIDIA/gpu-operator controllers/state_manager.go@a22dbf6
  ``getGPUNodeOSInfo``, controllers/object_controls.go ``resolveDriverTag``); precompiled drivers put the
  kernel between them (``<version>-<kernel>-<os tag>``);
- AKS installs the NVIDIA driver and runtime on GPU node pools unless the pool was created with
  ``--skip-gpu-driver-install``, and its driver and the operator's are mutually exclusive
  (azure.github.io/aks-rdma-infiniband, configurations/gpu-operator);
- GKE installs the driver itself on nodes labelled ``cloud.google.com/gke-gpu-driver-version`` (``default``,
  ``latest``; ``disabled`` installs none) under ``/home/kubernetes/bin/nvidia``, and NVIDIA's GKE guide runs
  the operator there with ``driver.enabled=false`` and ``hostPaths.driverInstallDir`` set to that directory;
- EKS's accelerated AMIs (AL2023 NVIDIA, Bottlerocket's ``-nvidia`` variants) carry the driver and runtime;
- NVIDIA publishes driver containers only for the OS families of `DRIVER_IMAGE_OS`
  (NVIDIA/gpu-driver-container), none for COS, Amazon Linux or Bottlerocket.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpuchain.doctor.node import node_info
from gpuchain.doctor.stacks.base import INSTANCE_TYPE
from gpuchain.doctor.stacks.gpu_operator import DRIVER_IMAGE_OS
from gpuchain.kube.objects import Obj, labels_of

OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
OS_VERSION = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
#: The operator keeps only the major version of these in the tag.
MAJOR_ONLY = ("rhel", "rocky", "ol")
#: osImage (the node's os-release PRETTY_NAME) -> os-release ID, for nodes NFD did not label.
OS_IMAGES = (
    (re.compile(r"^Ubuntu (\d+\.\d+)"), "ubuntu"),
    # 416.94 is 4.16, 46.82 (before 4.10) is 4.6
    (re.compile(r"^Red Hat Enterprise Linux CoreOS (\d)(\d{1,2})\."), "rhcos"),
    # OKD's CentOS Stream CoreOS, numbered as RHCOS is (417.9 is 4.17; os-release ID scos)
    (re.compile(r"^CentOS Stream CoreOS (\d)(\d{1,2})\."), "scos"),
    (re.compile(r"^Red Hat Enterprise Linux (?:Server )?(\d+(?:\.\d+)?)"), "rhel"),
    (re.compile(r"^Rocky Linux (\d+(?:\.\d+)?)"), "rocky"),
    (re.compile(r"^Oracle Linux Server (\d+(?:\.\d+)?)"), "ol"),
    (re.compile(r"^Amazon Linux (\d+)"), "amzn"),
    (re.compile(r"^Bottlerocket OS ()"), "bottlerocket"),
    (re.compile(r"^Container-Optimized OS()"), "cos"),
    (re.compile(r"^Flatcar Container Linux .*?(\d+\.\d+\.\d+)"), "flatcar"),
    (re.compile(r"^SUSE Linux Enterprise Server (\d+)(?: SP(\d+))?"), "sles"),
)
GKE_DRIVER = "cloud.google.com/gke-gpu-driver-version"
GKE_DRIVER_ROOT = "/home/kubernetes/bin/nvidia"
GKE_ACCELERATOR, GKE_COUNT = "cloud.google.com/gke-accelerator", "cloud.google.com/gke-accelerator-count"
AKS_ACCELERATOR = "kubernetes.azure.com/accelerator"
AKS_IMAGE = "kubernetes.azure.com/node-image-version"
#: The prefix of the labels AKS writes on each of its nodes (agentpool, node-image-version, cluster ...).
AKS_PREFIX = "kubernetes.azure.com/"
#: The node label that names the node's pool, as each cloud writes it: AKS's agent pool, GKE's node pool, an EKS
#: managed node group.
AKS_POOL, GKE_POOL, EKS_POOL = (
    "kubernetes.azure.com/agentpool",
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
)


def os_release(node: Obj) -> tuple[str, str]:
    """The node's os-release ID and VERSION_ID: NFD's labels, else read from ``osImage`` ("" where unknown)."""
    labels = labels_of(node)
    if labels.get(OS_ID):
        return labels[OS_ID], labels.get(OS_VERSION, "")
    image = node_info(node).get("osImage", "")
    for pattern, os_id in OS_IMAGES:
        found = pattern.match(image)
        if found is None:
            continue
        parts = [g for g in found.groups() if g]
        return os_id, ".".join(parts)
    return "", ""


def os_tag(node: Obj) -> str:
    """The OS tag the GPU Operator appends to the driver image for this node (``ubuntu22.04``, ``rhel9``,
    ``rhcos4.16``), "" where the OS is unknown."""
    os_id, version = os_release(node)
    if os_id in MAJOR_ONLY:
        version = version.split(".")[0]
    return f"{os_id}{version}" if os_id else ""


@dataclass(frozen=True, kw_only=True)
class NodeImage:
    """A managed cloud's node image, as it bears on the driver link."""

    cloud: str  #: AKS, GKE, EKS
    #: True: the image (or its cloud, at node creation) installs the driver; False: it installs none
    ships_driver: bool
    #: NVIDIA publishes a driver container for the node's OS, so the operator can install a driver there
    operator_driver: bool
    said: tuple[str, ...]  #: the node's facts that say so
    #: the ClusterPolicy spec that runs the operator over the image's own driver
    keep: dict[str, Any]
    #: the cloud's way to put its driver on such a node
    install: str
    #: the cloud's way to have nodes without its driver, for the operator's ("" where the operator has none)
    without: str
    #: the cloud's command that moves the node's pool to its current node image, whose driver is the one the cloud
    #: ships now (a driver fault of the image is repaired there, not on the node)
    upgrade: str = ""


def node_image(node: Obj) -> NodeImage | None:
    """What the node's labels and nodeInfo say of a managed cloud's image and its driver (None: not a managed
    image gpuchain knows, or nothing tells)."""
    labels = labels_of(node)
    image = node_info(node).get("osImage", "")
    os_id, _ = os_release(node)
    operator = bool(os_id) and os_id.startswith(DRIVER_IMAGE_OS)
    provider = str((node.get("spec") or {}).get("providerID") or "")
    if GKE_DRIVER in labels or os_id == "cos":
        # Without the label, GKE installs no driver itself (older node pools: Google's installer DaemonSet).
        version = labels.get(GKE_DRIVER, "")
        return NodeImage(
            cloud="GKE",
            ships_driver=version not in ("", "disabled"),
            operator_driver=operator,
            said=(f"label {GKE_DRIVER}={version}" if version else f"no label {GKE_DRIVER}", f"osImage {image}"),
            keep={"driver": {"enabled": False}, "hostPaths": {"driverInstallDir": GKE_DRIVER_ROOT}},
            install=f"recreate the node pool with --accelerator type={labels.get(GKE_ACCELERATOR) or '<gpu>'},count="
            f"{labels.get(GKE_COUNT) or '<n>'},gpu-driver-version=default (GKE installs the driver under "
            f"{GKE_DRIVER_ROOT}; the operator reads it there with hostPaths.driverInstallDir={GKE_DRIVER_ROOT})",
            without="an Ubuntu node pool with gpu-driver-version=disabled" if operator or os_id == "cos" else "",
            upgrade=f"gcloud container clusters upgrade <cluster> --node-pool {labels.get(GKE_POOL) or '<pool>'} "
            "(the pool's node image and driver of the cluster's GKE version; gpu-driver-version=latest on a new pool "
            "for the newest driver branch)",
        )
    aks = AKS_IMAGE in labels or (provider.startswith("azure://") and any(k.startswith(AKS_PREFIX) for k in labels))
    if labels.get(AKS_ACCELERATOR) == "nvidia" or aks:
        said = [f"label {k}={labels[k]}" for k in (AKS_ACCELERATOR, AKS_IMAGE) if k in labels]
        # AKS labels the GPU nodes it provisions (and gives a driver) accelerator=nvidia; a VM size it did not
        # provision as a GPU node has neither.
        provisioned = labels.get(AKS_ACCELERATOR) == "nvidia"
        missing = () if provisioned else (f"no label {AKS_ACCELERATOR}=nvidia: AKS did not provision it as a GPU node",)
        return NodeImage(
            cloud="AKS",
            ships_driver=provisioned,
            operator_driver=operator,
            said=(*said, *missing, f"osImage {image}"),
            keep={"driver": {"enabled": False}},
            install="upgrade the node pool to the latest AKS node image (az aks nodepool upgrade --node-image-only), "
            "or recreate it with a GPU VM size AKS provisions as one, without --skip-gpu-driver-install, so AKS "
            "installs the NVIDIA driver and runtime",
            without="a node pool created with --skip-gpu-driver-install",
            upgrade="az aks nodepool upgrade --resource-group <resource group> --cluster-name <cluster> --name "
            f"{labels.get(AKS_POOL) or '<pool>'} --node-image-only (the pool's latest AKS node image and its GPU "
            "driver)",
        )
    if os_id in ("bottlerocket", "amzn"):
        ships = "nvidia" in image.lower() if os_id == "bottlerocket" else True
        return NodeImage(
            cloud="EKS",
            ships_driver=ships,
            operator_driver=False,
            said=(f"osImage {image}",),
            keep={"driver": {"enabled": False}, "toolkit": {"enabled": False}},
            install="the EKS accelerated AMI for the node group (AL2023 NVIDIA, or Bottlerocket's -nvidia variant), "
            "which carries the driver and runtime",
            without="",
            upgrade="aws eks update-nodegroup-version --cluster-name <cluster> --nodegroup-name "
            f"{labels.get(EKS_POOL) or '<node group>'} (the latest accelerated AMI release for the cluster's "
            "Kubernetes version, with its driver; a self-managed group: its launch template's AMI)",
        )
    return None


#: The instance families for which nodeadm (the AL2023 EKS AMIs' node bootstrap) made nvidia containerd's default
#: runtime while it chose by a fixed list (awslabs/amazon-eks-ami nodeadm/internal/containerd/runtime_config.go
#: @2ffb0d5 nvidiaInstances); later releases make it the default wherever /usr/bin/nvidia-container-runtime is
#: installed (runtime_config_nvidia.go@ed5cea8), so any family of the accelerated AMI gets it.
NODEADM_NVIDIA_FAMILIES = ("p3", "p3dn", "p4d", "p4de", "p5", "p5e", "p5en", "g4", "g4dn", "g5", "g6", "g6e", "g5g")


def nodeadm_left_runc(node: Obj) -> str:
    """Where an AL2023 EKS node of an NVIDIA instance family outside nodeadm's fixed list runs the accelerated AMI,
    what left containerd's default runtime runc, and its repair ("" for any other node): the node's state is the
    same as a standard AMI's (no NVML in the plugin), so this is said beside the node image's repair."""
    os_id, version = os_release(node)
    family = labels_of(node).get(INSTANCE_TYPE, "").split(".")[0]
    if os_id != "amzn" or not version.startswith("2023") or not family or family in NODEADM_NVIDIA_FAMILIES:
        return ""
    return (
        f"; if the node already runs the accelerated AMI, its nodeadm chose nvidia as containerd's default runtime "
        f"only for the instance families of a fixed list ({', '.join(NODEADM_NVIDIA_FAMILIES)}), not {family}, "
        'so runc is the default: set default_runtime_name = "nvidia" (nvidia-ctk runtime configure '
        "--runtime=containerd --set-as-default, then restart containerd), or move to an AMI release whose nodeadm "
        "makes nvidia the default wherever nvidia-container-runtime is installed"
    )
