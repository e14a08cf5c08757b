"""Pods that use CUDA on a GPU node without asking for a GPU: no allocation, so no driver and no device.

The device plugin is the only path by which a container gets a GPU, and with it the driver's libraries and device
nodes: the kubelet applies the plugin's Allocate answer (mounts, device nodes, the device list the NVIDIA runtime
reads) to the containers that request its resource, and to no other (k8s.io/kubelet pkg/apis/deviceplugin/v1beta1
api.proto ContainerAllocateResponse; GKE's plugin mounts /home/kubernetes/bin/nvidia and /dev/nvidia* this way,
GoogleCloudPlatform/container-engine-accelerators pkg/gpu/nvidia/manager.go). A pod placed on a GPU node (it
tolerates the GPU taint or selects a GPU label, `gpuchain.doctor.unallocated`) that requests no ``nvidia.com/gpu``
runs and is ready, and its CUDA library finds no libcuda.so.1 or no device. The repair is the request in the
container's limits; the node and its chain are fine.

The other face of it: where nvidia is the node's default runtime, a container whose image sets NVIDIA_VISIBLE_DEVICES
(vLLM's and CUDA's images set ``all``) gets every GPU of the node without an allocation, wherever it was placed. Such
pods, a chart's replicas among them, all start on the first GPU while the others stay unallocated, and the one that
finds its GPU's memory taken says so (vLLM's start-up memory check). The repair is the same request, one GPU each.
"""

from __future__ import annotations

from typing import Any

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding, said_by
from gpuchain.doctor.model import Finding, Severity
from gpuchain.doctor.scheduling import owner_of, resources_fix
from gpuchain.doctor.unallocated import aimed_at_gpu
from gpuchain.kube.gpu_resources import node_gpu_resources, pod_gpu_requests
from gpuchain.kube.objects import Obj, name_of, namespace_of

#: What a CUDA workload says with no driver library or no device in its container (catalog.yaml): the loader's,
#: PyTorch's, NVML's, vLLM's and the CUDA runtime's words.
NO_GPU_WORDS = (
    "loader.no-driver-library",
    "pytorch.no-driver",
    "nvml.library-not-found",
    "vllm.no-platform",
    "vllm.unspecified-platform",
    "cuda.no-device",
)
#: What a GPU workload says when the GPU it uses, given it without an allocation, is already used by others.
TAKEN_WORDS = ("vllm.gpu-memory-taken",)
RESOURCE = "nvidia.com/gpu"


def limit_ops(pod: Obj, owner_kind: str, saying: set[str]) -> list[dict[str, Any]]:
    """JSON-patch ops that add one ``nvidia.com/gpu`` to the limits of each container that said so (the limit alone
    is enough: a request of an extended resource defaults to its limit)."""
    base = "/spec" if owner_kind == "Pod" else "/spec/template/spec"
    key = RESOURCE.replace("/", "~1")
    ops: list[dict[str, Any]] = []
    for i, c in enumerate((pod.get("spec") or {}).get("containers") or []):
        if c.get("name") not in saying:
            continue
        resources = c.get("resources") or {}
        path = f"{base}/containers/{i}/resources"
        if "limits" in resources:
            ops.append({"op": "add", "path": f"{path}/limits/{key}", "value": "1"})
        elif resources:
            ops.append({"op": "add", "path": f"{path}/limits", "value": {RESOURCE: "1"}})
        else:
            ops.append({"op": "add", "path": path, "value": {"limits": {RESOURCE: "1"}}})
    return ops


def _taken(ctx: Context, view: NodeView, pod: Obj, found: catalog.Match, saying: set[str], announced: int) -> Finding:
    """``pod`` requests no GPU yet says the GPU it uses is taken: the runtime gave it GPUs never allocated to it."""
    spec = pod.get("spec") or {}
    owner = owner_of(pod)
    ops = limit_ops(pod, owner.kind, saying or {str(c.get("name")) for c in spec.get("containers") or []})
    action = resources_fix(owner, ops)
    ref = f"{namespace_of(pod)}/{name_of(pod)}"
    held = sum(sum(pod_gpu_requests(p).values()) for p in view.workloads)
    return node_finding(
        view,
        fid="workload.gpu-used-unrequested",
        sev=Severity.ERROR,
        link="device-plugin",
        cause=f"{ref} requests no {RESOURCE}, yet uses a GPU whose memory other processes already hold: the device "
        "plugin allocated it none, so the runtime gave it the GPUs its image names (NVIDIA_VISIBLE_DEVICES) and pods "
        f"like it start on the same GPU while the node's other GPUs stay unallocated ({held} of {announced} "
        "allocated).",
        evidence=[
            f"{ref}: no {RESOURCE} in any container's limits or requests",
            *found.evidence("pod says"),
            f"node allocatable {RESOURCE}: {announced}, requested by pods on it: {held}",
        ],
        fix=ctx.stack.render(action)
        + f"   # add {RESOURCE} to the container's resource limits (one GPU per replica, a whole number: a fraction "
        f"is no request at all); the {owner.kind} then rolls out pods the device plugin gives a GPU each",
        action=action,
    )


def unallocated_gpu(ctx: Context, view: NodeView, apps: list[Obj]) -> Finding | None:
    """Pods aimed at this GPU node that request no GPU and say their container has no driver or no device."""
    announced = node_gpu_resources(view.node, "allocatable").get(RESOURCE, 0)
    if announced <= 0:
        return None
    for pod in apps:
        spec = pod.get("spec") or {}
        if pod_gpu_requests(pod) or spec.get("resourceClaims"):
            continue
        # A GPU taken by others proves the container got one without a request; a missing driver counts only where
        # the pod was meant for a GPU node.
        words = (*NO_GPU_WORDS, *TAKEN_WORDS) if aimed_at_gpu(spec) else TAKEN_WORDS
        saying = {
            str(cs.get("name"))
            for cs in (pod.get("status") or {}).get("containerStatuses") or []
            if catalog.find(ctx.log(pod, str(cs.get("name"))), *words) is not None
        }
        found = catalog.find(said_by(ctx, pod), *words)
        if found is None:
            continue
        if found.entry.id in TAKEN_WORDS:
            return _taken(ctx, view, pod, found, saying, announced)
        owner = owner_of(pod)
        ops = limit_ops(pod, owner.kind, saying or {str(c.get("name")) for c in spec.get("containers") or []})
        action = resources_fix(owner, ops)
        ref = f"{namespace_of(pod)}/{name_of(pod)}"
        return node_finding(
            view,
            fid="workload.gpu-not-requested",
            sev=Severity.ERROR,
            link="device-plugin",
            cause=f"{ref} runs on this GPU node but requests no {RESOURCE}, so the device plugin allocated it no GPU "
            "and its containers were given neither the driver's libraries nor a GPU device: the container only "
            f"gets them with an allocation. The node announces {announced} GPU(s) and its chain is not at fault.",
            evidence=[
                f"{ref}: no {RESOURCE} in any container's limits or requests, and it is placed for a GPU node "
                "(the nvidia.com/gpu toleration or a GPU node selector)",
                *found.evidence("pod says"),
                f"node allocatable {RESOURCE}: {announced}",
            ],
            fix=ctx.stack.render(action)
            + f"   # add {RESOURCE} to the container's resource limits (as many as it uses, up to the node's "
            f"{announced}); the {owner.kind} then rolls out a pod the device plugin gives its GPUs",
            action=action,
        )
    return None
