"""VM nodes of NVIDIA's GPU Operator in the simulator: a node group with ``workload: vm-passthrough`` or ``vm-vgpu``.

As NVIDIA/gpu-operator does (controllers/state_manager.go gpuStateLabels @v26.7.0): the node carries
``nvidia.com/gpu.workload.config``, the sandbox operands' deploy labels and none of the container operands', so no
driver, toolkit, device plugin, GFD, exporter or MIG manager runs there. The sandbox DaemonSets (the names of
`gpuchain.doctor.stacks.sandbox`) place a ready pod on each VM node, their validations done, and the sandbox device
plugin (NVIDIA/kubevirt-gpu-device-plugin) announces the GPUs under their PCI device name (passthrough) or the vGPU
devices under their type (vGPU), never ``nvidia.com/gpu``. The ClusterPolicy says ``sandboxWorkloads.enabled``.
"""

from __future__ import annotations

import re
from typing import Any

from gpuchain.common.labels import DEPLOY_PREFIX
from gpuchain.doctor.stacks.sandbox import DAEMONSETS, VGPU_CONFIG, VGPU_CONFIG_STATE, WORKLOAD_CONFIG
from gpuchain.gpu.topology import load_preset
from gpuchain.kube.objects import Obj
from gpuchain.operator.operands import OPERANDS
from gpuchain.sim.scenario import NodeGroup
from gpuchain.sim.shapes import completed_container, pod_status, running_container, unique_pod_name

CONTAINER = "container"
#: The operands each VM workload runs (gpuStateLabels; the kubevirt mode's device plugin), bottom-up.
CHAINS = {
    "vm-passthrough": ("vfio-manager", "sandbox-validator", "sandbox-device-plugin"),
    "vm-vgpu": ("vgpu-manager", "sandbox-validator", "vgpu-device-manager", "sandbox-device-plugin"),
}
#: Each sandbox operand's init containers and main container (the assets' names).
CONTAINERS: dict[str, tuple[tuple[str, ...], str]] = {
    "vfio-manager": (("k8s-driver-manager",), "nvidia-vfio-manager"),
    "vgpu-manager": (("k8s-driver-manager",), "nvidia-vgpu-manager-ctr"),
    "sandbox-validator": (
        ("cc-manager-validation", "vfio-pci-validation", "vgpu-manager-validation", "vgpu-devices-validation"),
        "nvidia-sandbox-validator",
    ),
    "vgpu-device-manager": (("vgpu-manager-validation",), "nvidia-vgpu-device-manager"),
    "sandbox-device-plugin": (("vfio-pci-validation", "vgpu-devices-validation"), "nvidia-sandbox-device-plugin-ctr"),
}
#: Each sandbox operand's image (stand-in tags; the vGPU manager's image is built by its user from NVIDIA's driver).
IMAGES = {
    "vfio-manager": "nvcr.io/nvidia/cuda:12.8.1-base-ubi9",
    "vgpu-manager": "registry.example.internal/nvidia/vgpu-manager:580.82.07",
    "sandbox-validator": "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v26.7.0",
    "vgpu-device-manager": "nvcr.io/nvidia/cloud-native/vgpu-device-manager:v0.4.1",
    "sandbox-device-plugin": "nvcr.io/nvidia/kubevirt-gpu-device-plugin:v1.4.0",
}
#: A vGPU type's framebuffer in GB: the number before its series letter (A100-4C, NVIDIA_H100-20C).
_FRAMEBUFFER = re.compile(r"-(\d+)[A-Z]$")
_MODEL_GB = re.compile(r"(\d+)GB")


def is_vm(group: NodeGroup) -> bool:
    """Whether the group's nodes serve VMs rather than containers."""
    return group.gpu and group.workload != CONTAINER


def container_opt_out(group: NodeGroup) -> frozenset[str]:
    """The container operands a VM node does not run (the operator removes their deploy labels)."""
    return frozenset(o.deploy for o in OPERANDS) if is_vm(group) else frozenset()


def vm_labels(group: NodeGroup, labels: dict[str, str]) -> dict[str, str]:
    """A VM node's labels: its workload and sandbox operands' deploy labels, none of the container operands' that
    the scenario did not opt out itself."""
    if not is_vm(group):
        return labels
    implied = {DEPLOY_PREFIX + s for s in container_opt_out(group) - set(group.opt_out)}
    out = {k: v for k, v in labels.items() if k not in implied}
    out[WORKLOAD_CONFIG] = group.workload
    out |= {DEPLOY_PREFIX + op: "true" for op in CHAINS[group.workload]}
    if group.workload == "vm-vgpu":
        out |= {VGPU_CONFIG: group.vgpu_type, VGPU_CONFIG_STATE: "success"}
    return out


def vm_capacity(group: NodeGroup) -> dict[str, int]:
    """What the sandbox device plugin announces: each GPU under its PCI device name, or the vGPU devices of the
    node's type (as many per GPU as the type's framebuffer fits in the GPU's)."""
    if not is_vm(group):
        return {}
    gpus = load_preset(group.preset).expanded()
    if group.workload == "vm-passthrough":
        name = group.pci_device_name or gpus[0].model.name.removeprefix("NVIDIA ").replace(" ", "_")
        return {f"nvidia.com/{name}": len(gpus)}
    per_gpu = 1
    size, model = _FRAMEBUFFER.search(group.vgpu_type), _MODEL_GB.search(gpus[0].model.key)
    if size and model and int(size.group(1)):
        per_gpu = max(1, int(model.group(1)) // int(size.group(1)))
    return {f"nvidia.com/{group.vgpu_type}": per_gpu * len(gpus)}


def _daemonset(ns: str, name: str, operand: str) -> Obj:
    inits, main = CONTAINERS[operand]
    labels = {"app": name}
    image = IMAGES[operand]
    spec: dict[str, Any] = {
        "nodeSelector": {DEPLOY_PREFIX + operand: "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "initContainers": [{"name": n, "image": image} for n in inits],
        "containers": [{"name": main, "image": image}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": spec}},
    }


def vm_objects(groups: dict[str, NodeGroup], *, namespace: str) -> list[Obj]:
    """The sandbox DaemonSets with a ready pod on each VM node (``groups``: node name -> its group)."""
    vms = {node: g for node, g in groups.items() if is_vm(g)}
    if not vms:
        return []
    out: list[Obj] = []
    taken: set[str] = set()
    for name, operand in DAEMONSETS.items():
        nodes = sorted(n for n, g in vms.items() if operand in CHAINS[g.workload])
        if not nodes:
            continue
        ds = _daemonset(namespace, name, operand)
        inits, main = CONTAINERS[operand]
        count = len(nodes)
        ds["status"] = {k: count for k in ("desiredNumberScheduled", "currentNumberScheduled", "numberReady")}
        ds["status"]["numberAvailable"] = count
        out.append(ds)
        for node in nodes:
            status = pod_status(
                "Running",
                inits=[completed_container(n) for n in inits],
                mains=[running_container(main)],
                node_ip="10.0.0.1",
            )
            pod_name = unique_pod_name(name, node=node, taken=taken)
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": pod_name,
                        "namespace": namespace,
                        "labels": {"app": name},
                        "ownerReferences": [
                            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": name, "uid": "", "controller": True}
                        ],
                    },
                    "spec": {**ds["spec"]["template"]["spec"], "nodeName": node},
                    "status": status,
                }
            )
    return out
