"""What any stack adapter reads of a cluster: which nodes have NVIDIA GPUs, which cloud runs them, the
DaemonSets of a namespace."""

from __future__ import annotations

import re

from gpuchain.common.labels import GPU_PRESENT
from gpuchain.common.remember import remembered
from gpuchain.doctor.structs import Snapshot
from gpuchain.kube.gpu_resources import GPU, MIG_PREFIX, VOLCANO_VGPU
from gpuchain.kube.objects import Obj, labels_of, name_of
from gpuchain.operator.operands import NFD_GPU_LABELS

#: Node labels that say "this node has NVIDIA GPUs" whichever stack runs it.
GPU_NODE_LABELS = (
    *NFD_GPU_LABELS,
    GPU_PRESENT,
    "cloud.google.com/gke-accelerator",
    "k8s.amazonaws.com/accelerator",
    "karpenter.k8s.aws/instance-gpu-manufacturer",
    "kubernetes.azure.com/accelerator",
    "accelerator",
    "nvidia.com/gpu.count",
    "nvidia.com/gpu.product",
)


#: Extended resources that are NVIDIA GPUs in a node's capacity: NVIDIA's plugin's (whole, shared, renamed, MIG) and
#: the vGPUs HAMi's plugin for Volcano announces (Project-HAMi/volcano-vgpu-device-plugin values.yaml
#: resourceCountName).
GPU_CAPACITY = (GPU, MIG_PREFIX, VOLCANO_VGPU)
#: Cloud instance types that come with NVIDIA GPUs (AWS p/g families from g3's Tesla M60 on, but not
#: g4ad's AMD Radeon, with gr6's L4 and p6's hyphenated families such as p6-b200; Azure NC/ND/NV, GCP a2/a3/g2).
GPU_INSTANCE = re.compile(r"^(p[2-6][a-z0-9-]*\.|g[3-7](?!ad)[a-z]*\.|gr6[a-z]*\.|Standard_N[CDV]|a[23]-|g2-)")


#: The kubelet's label of a node's machine type (well-known label node.kubernetes.io/instance-type).
INSTANCE_TYPE = "node.kubernetes.io/instance-type"


def gpu_node_term(gpu_nodes: list[Obj], node: Obj) -> dict[str, object] | None:
    """A node affinity term every one of ``gpu_nodes`` matches and ``node`` does not: a GPU label they all carry,
    else their instance types; None where nothing tells ``node`` apart from them (it may well have GPUs itself)."""
    for key in GPU_NODE_LABELS:
        if all(labels_of(n).get(key) for n in gpu_nodes) and not labels_of(node).get(key):
            return {"key": key, "operator": "Exists"}
    types = sorted({labels_of(n).get(INSTANCE_TYPE, "") for n in gpu_nodes} - {""})
    if types and labels_of(node).get(INSTANCE_TYPE) not in types:
        return {"key": INSTANCE_TYPE, "operator": "In", "values": types}
    return None


def is_gpu_node(node: Obj) -> bool:
    """Any stack's sign of NVIDIA GPUs: detection labels, cloud accelerator labels, or GPU capacity."""
    labels = (node.get("metadata") or {}).get("labels") or {}  # read only: labels_of's copy is not needed
    if any(labels.get(k) not in (None, "", "false") for k in GPU_NODE_LABELS if k != "accelerator"):
        return True
    if labels.get("accelerator", "").startswith("nvidia"):
        return True
    if GPU_INSTANCE.match(labels.get("node.kubernetes.io/instance-type", "")):
        return True
    capacity = (node.get("status") or {}).get("capacity") or {}
    return any(str(k).startswith(GPU_CAPACITY) for k in capacity)


#: Image repository names of NVIDIA's DRA driver (nvcr.io/nvidia/k8s-dra-driver-gpu; later releases
#: dra-driver-nvidia-gpu; its first release v0.1.0 was nvcr.io/nvidia/cloud-native/k8s-dra-driver, the repository's
#: name before the -gpu suffix): its kubelet plugin publishes a node's GPUs as ResourceSlices, the device-plugin
#: link's counterpart where GPUs are allocated through DRA (NVIDIA/k8s-dra-driver-gpu deployments/helm values.yaml).
DRA_PLUGIN_IMAGES = ("k8s-dra-driver-gpu", "dra-driver-nvidia-gpu", "/k8s-dra-driver:")


def split_image(ref: str) -> tuple[str, str, str]:
    """``repository``, ``image`` and ``version`` of an image reference, as ``gpuv1.ImagePath`` joins them
    (NVIDIA/gpu-operator api/nvidia/v1/clusterpolicy_types.go@v26.7.0 ``imagePath``: ``repo/image:version``, or
    ``repo/image@version`` where the version is a digest); "" for a part the reference lacks."""
    path, at, digest = ref.partition("@")
    version = digest if at else ""
    if not at:
        slash = path.rfind("/")
        colon = path.rfind(":")
        if colon > slash:
            path, version = path[:colon], path[colon + 1 :]
    repository, _, image = path.rpartition("/")
    return repository, image, version


#: The image names NVIDIA's device plugin ships under (its chart's and the GPU Operator's
#: nvcr.io/nvidia/k8s-device-plugin, GKE's gke.gcr.io/nvidia-gpu-device-plugin); other plugins' names only contain
#: them (AWS's aws-efa-k8s-device-plugin).
NVIDIA_PLUGIN_NAMES = frozenset({"k8s-device-plugin", "nvidia-gpu-device-plugin"})
#: Repositories of other vendors' plugins of the same image name (AMD's rocm/k8s-device-plugin).
OTHER_VENDORS = re.compile(r"(^|/)(rocm|amd|intel)(/|$)", re.IGNORECASE)


def runs_nvidia_plugin(obj: Obj, names: frozenset[str] = NVIDIA_PLUGIN_NAMES) -> bool:
    """Does this pod (or DaemonSet) run NVIDIA's device plugin image (one of ``names``), by the image's own name? A
    name that merely contains it (aws-efa-k8s-device-plugin serves EFA, not GPUs) or another vendor's image of the same
    name is not."""
    for ref in images_of(obj).split():
        repository, image, _ = split_image(ref)
        if image in names and not OTHER_VENDORS.search(repository):
            return True
    return False


def images_of(obj: Obj) -> str:
    """Every container image a pod, or a DaemonSet's pod template, runs (init containers too), space-separated."""
    spec = obj.get("spec") or {}
    spec = ((spec.get("template") or {}).get("spec") or {}) if "template" in spec else spec
    return " ".join(
        str(c.get("image", "")) for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    )


@remembered
def is_dra_plugin(obj: Obj | None) -> bool:
    """Does this pod (or DaemonSet) run NVIDIA's DRA driver kubelet plugin, by its image? (Asked of each
    device plugin pod by several checks: answered once a pod in a diagnosis.)"""
    return obj is not None and any(marker in images_of(obj) for marker in DRA_PLUGIN_IMAGES)


def provider_of(nodes: list[Obj]) -> str:
    """eks, aks, gke or "" from the nodes' providerID (aws://, azure://, gce://)."""
    for node in nodes:
        pid = str((node.get("spec") or {}).get("providerID") or "")
        for prefix, provider in (("aws://", "eks"), ("azure://", "aks"), ("gce://", "gke")):
            if pid.startswith(prefix):
                return provider
    return ""


def daemonsets_in(snapshot: Snapshot, namespace: str) -> dict[str, Obj]:
    """The snapshot's DaemonSets of one namespace by name."""
    return {name_of(d): d for d in snapshot.daemonsets if (d.get("metadata") or {}).get("namespace") == namespace}
