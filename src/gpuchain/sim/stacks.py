"""Each stack's own object names in the simulated cluster.

The chain is planned once, stack-free (`gpuchain.sim.chain`); this module renders it the way
each stack's real objects look: NVIDIA's GPU Operator keeps the operand DaemonSet names (they are
NVIDIA's) but its own container names, labels, images and a ``nvidia.com/v1`` ClusterPolicy;
NVIDIA's standalone device plugin (and EKS/AKS, which run it on their GPU images) is one
DaemonSet in ``kube-system`` over a host driver, with no policy; GKE runs Google's device plugin
DaemonSet. Nodes get each cloud's providerID, instance type and accelerator labels. Names are
the ones `gpuchain.doctor.stacks` documents with their upstream sources.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from gpuchain.doctor.stacks import device_plugin as dp_stack
from gpuchain.doctor.stacks import gke as gke_stack
from gpuchain.doctor.stacks import gpu_operator as op_stack
from gpuchain.gpu.topology import load_preset
from gpuchain.kube.objects import Obj
from gpuchain.operator.operands import Operand, image_of
from gpuchain.operator.policy import ClusterPolicySpec
from gpuchain.sim.nvidia_operands import nvidia_rendered

#: Stacks whose nodes come with the driver and the NVIDIA runtime from their image.
HOST_STACKS = frozenset({"nvidia-device-plugin", "eks", "aks", "gke"})
#: What NVIDIA's standalone plugin manifest and GKE's plugin tolerate.
HOST_TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
#: What the device plugin DaemonSet of AKS' GPU guide tolerates besides: the sku=gpu taint the guide puts on GPU node
#: pools (learn.microsoft.com/azure/aks/gpu-cluster, nvidia-device-plugin-ds.yaml and az aks nodepool add
#: --node-taints sku=gpu:NoSchedule).
AKS_TOLERATIONS = [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
#: Driver version the host-driver stacks' node images carry unless a scenario says otherwise.
HOST_DRIVER = "550.90.07"

NVIDIA_IMAGES = {
    "driver": "nvcr.io/nvidia/driver:550.90.07-ubuntu22.04",
    "container-toolkit": "nvcr.io/nvidia/k8s/container-toolkit:v1.17.0-ubuntu20.04",
    "operator-validation": "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v24.9.0",
    "device-plugin": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
    "gpu-feature-discovery": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
    "dcgm-exporter": "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04",
    "mig-manager": "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.10.0-ubuntu20.04",
}

#: (instance type, providerID prefix, extra labels) of one GPU node per cloud, for the default preset (8 x H100).
CLOUD_NODE: dict[str, tuple[str, str, dict[str, str]]] = {
    "eks": ("p5.48xlarge", "aws:///us-east-1a/i-0", {"eks.amazonaws.com/nodegroup": "gpu"}),
    "aks": (
        "Standard_ND96isr_H100_v5",
        "azure:///subscriptions/0/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachineScaleSets/aks-gpu/",
        {"kubernetes.azure.com/accelerator": "nvidia", "kubernetes.azure.com/agentpool": "gpu"},
    ),
    "gke": (
        "a3-highgpu-8g",
        "gce://project/us-central1-a/gke-gpu-",
        {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb", "cloud.google.com/gke-gpu-driver-version": "default"},
    ),
}
#: The machine type carrying a preset's GPUs on each cloud (and, on GKE, its accelerator label), from the providers'
#: instance type pages (aws.amazon.com/ec2/instance-types, learn.microsoft.com/azure/virtual-machines/sizes/
#: gpu-accelerated, cloud.google.com/compute/docs/gpus): a node of four T4s is not labelled an eight-H100 machine.
#: GKE attaches T4s to an N1 machine, whose type names no GPU; a preset a cloud has no machine for keeps the default.
CLOUD_MACHINES: dict[str, dict[str, tuple[str, str]]] = {
    "eks": {
        "a100-40gb-x8": ("p4d.24xlarge", ""),
        "a100-80gb-x8": ("p4de.24xlarge", ""),
        "h200-141gb-x8": ("p5e.48xlarge", ""),
        "t4-x4": ("g4dn.12xlarge", ""),
    },
    "aks": {
        "a100-40gb-x8": ("Standard_ND96asr_v4", ""),
        "a100-80gb-x8": ("Standard_ND96amsr_A100_v4", ""),
        "h200-141gb-x8": ("Standard_ND96isr_H200_v5", ""),
        "t4-x4": ("Standard_NC64as_T4_v3", ""),
    },
    "gke": {
        "a100-40gb-x8": ("a2-highgpu-8g", "nvidia-tesla-a100"),
        "a100-80gb-x8": ("a2-ultragpu-8g", "nvidia-a100-80gb"),
        "h200-141gb-x8": ("a3-ultragpu-8g", "nvidia-h200-141gb"),
        "l4-x2": ("g2-standard-24", "nvidia-l4"),
        "t4-x4": ("n1-standard-32", "nvidia-tesla-t4"),
    },
}


def operand_image(stack: str, *, raw_policy: dict[str, Any], policy: ClusterPolicySpec, operand: Operand) -> str:
    """The image reference the operand's pods run on this stack: gpuchain's from its policy; NVIDIA's
    own image for the GPU Operator (and the standalone plugin), with the tag a policy ``version``
    overrides."""
    if stack == "gpuchain":
        return image_of(policy, operand).image_ref()
    default = NVIDIA_IMAGES.get(operand.state, "")
    version = str((raw_policy.get(operand.spec_key) or {}).get("version") or "")
    if not default or not version or stack != "gpu-operator":
        return default
    return f"{default.rpartition(':')[0]}:{version}"


def namespace_for(stack: str, scenario_namespace: str) -> str:
    """Where the stack's DaemonSets live."""
    return "kube-system" if stack in HOST_STACKS else scenario_namespace


def policy_api(stack: str) -> str | None:
    """The ClusterPolicy apiVersion of the stack, None when it has none."""
    return {"gpuchain": "gpuchain.io/v1", "gpu-operator": "nvidia.com/v1"}.get(stack)


def host_tolerations(stack: str) -> list[dict[str, str]]:
    """The tolerations of the device plugin DaemonSet a host-driver stack runs: NVIDIA's manifest's, and on AKS
    also its GPU guide's sku=gpu."""
    return [dict(t) for t in (*HOST_TOLERATIONS, *(AKS_TOLERATIONS if stack == "aks" else ()))]


#: What GKE's device plugin pod mounts (GoogleCloudPlatform/container-engine-accelerators cmd/nvidia_gpu/
#: device-plugin.yaml, whose header says GKE's own copy is the source of truth): the kubelet's device-plugins
#: directory, /dev, the driver GKE's installer writes under /home/kubernetes/bin/nvidia (at /usr/local/nvidia, on the
#: plugin's LD_LIBRARY_PATH), the pod-resources socket, /proc and /etc/nvidia. The repository's copy makes the driver
#: directory DirectoryOrCreate; GKE's own has been type Directory, whose check users meet on a pool with no driver
#: installed ("hostPath type check failed: /home/kubernetes/bin/nvidia is not a directory", the kubelet's
#: pkg/volume/hostpath/host_path.go message).
GKE_PLUGIN_VOLUMES = [
    {"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
    {"name": "dev", "hostPath": {"path": "/dev"}},
    {"name": "nvidia", "hostPath": {"path": gke_stack.DRIVER_ROOT, "type": "Directory"}},
    {"name": "pod-resources", "hostPath": {"path": "/var/lib/kubelet/pod-resources"}},
    {"name": "proc", "hostPath": {"path": "/proc"}},
    {"name": "nvidia-config", "hostPath": {"path": "/etc/nvidia"}},
]
GKE_PLUGIN_MOUNTS = [
    {"name": "device-plugin", "mountPath": "/device-plugin"},
    {"name": "dev", "mountPath": "/dev"},
    {"name": "nvidia", "mountPath": "/usr/local/nvidia"},
    {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources"},
    {"name": "proc", "mountPath": "/proc"},
    {"name": "nvidia-config", "mountPath": "/etc/nvidia"},
]
GKE_PLUGIN_ENV = [
    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"},
]


def _rename_container(spec: dict[str, Any], name: str, image: str | None) -> None:
    main = spec["containers"][0]
    main["name"] = name
    if image:
        main["image"] = image


def restyle_daemonset(
    stack: str, *, state: str, ds: Obj, image: str = "", nvidia_spec: dict[str, Any] | None = None
) -> Obj:
    """The operand's DaemonSet as ``stack`` names it (gpuchain's own is returned unchanged);
    ``image``: the reference its container runs (default: NVIDIA's released image); ``nvidia_spec``: the GPU
    Operator's ClusterPolicy spec, whose keys NVIDIA's operator renders into the DaemonSet (`nvidia_rendered`)."""
    if stack == "gpuchain":
        return ds
    ds = copy.deepcopy(ds)
    meta, template = ds["metadata"], ds["spec"]["template"]
    spec = template["spec"]
    if stack == "gpu-operator":
        labels = {k: v for k, v in meta.get("labels", {}).items() if not k.startswith("app.kubernetes.io/")}
        meta["labels"] = {**labels, "app.kubernetes.io/part-of": "gpu-operator"}
        _rename_container(spec, op_stack.CONTAINERS[state], image or NVIDIA_IMAGES.get(state))
        meta.pop("ownerReferences", None)
        return ds if nvidia_spec is None else nvidia_rendered(ds, state=state, spec=nvidia_spec)
    if stack == "gke":
        name, container, labels = (
            gke_stack.PLUGIN_PREFIX + "-large-cos",
            gke_stack.PLUGIN_PREFIX,
            {"k8s-app": gke_stack.PLUGIN_PREFIX},
        )
        image = "gke.gcr.io/nvidia-gpu-device-plugin:v1.0.0-gke.2"
    else:
        name, container, labels = (
            "nvidia-device-plugin-daemonset",
            dp_stack.CONTAINER,
            {"name": "nvidia-device-plugin-ds"},
        )
        image = NVIDIA_IMAGES["device-plugin"]
    meta.update({"name": name, "namespace": "kube-system", "labels": dict(labels)})
    meta.pop("ownerReferences", None)
    template["metadata"]["labels"] = dict(labels)
    ds["spec"]["selector"] = {"matchLabels": dict(labels)}
    spec.pop("runtimeClassName", None)  # the node image's default runtime is NVIDIA's
    spec.pop("initContainers", None)
    spec["tolerations"] = host_tolerations(stack)
    _rename_container(spec, container, image)
    if stack == "gke":
        spec["volumes"] = copy.deepcopy(GKE_PLUGIN_VOLUMES)
        main = spec["containers"][0]
        main["volumeMounts"], main["env"] = copy.deepcopy(GKE_PLUGIN_MOUNTS), copy.deepcopy(GKE_PLUGIN_ENV)
    return ds


@functools.cache
def _gpu_count(preset: str) -> int:
    return load_preset(preset).gpu_count


def node_extras(stack: str, node: str, preset: str = "") -> tuple[dict[str, str], str, list[dict[str, str]]]:
    """Labels, providerID and taints a GPU node of this stack's platform carries, its machine type the one
    that holds the node's preset of GPUs."""
    if stack not in CLOUD_NODE:
        return {}, "", []
    instance, provider, labels = CLOUD_NODE[stack]
    machine, accelerator = CLOUD_MACHINES[stack].get(preset, (instance, ""))
    labels = {**labels, "cloud.google.com/gke-accelerator": accelerator} if accelerator else labels
    if stack == "gke" and preset:
        # GKE labels each GPU node with its pool's accelerator count (a GPU pod's nodeSelector may name it).
        labels = {**labels, "cloud.google.com/gke-accelerator-count": str(_gpu_count(preset))}
    taints = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}] if stack == "gke" else []
    return {"node.kubernetes.io/instance-type": machine, **labels}, provider + node, taints
