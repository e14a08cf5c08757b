"""Pods placed for a GPU that ask for none: which of their containers' logs the gather step reads.

A container gets a GPU, and with it the driver's libraries and device nodes, only through an allocation: the kubelet
asks the device plugin for the devices of the ``nvidia.com/gpu`` the container requests and applies its answer
(k8s.io/kubelet pkg/apis/deviceplugin/v1beta1 api.proto ContainerAllocateResponse: envs, mounts, devices). GKE's
plugin mounts the driver it installed (/home/kubernetes/bin/nvidia) and the /dev/nvidia* nodes into allocated
containers only (GoogleCloudPlatform/container-engine-accelerators pkg/gpu/nvidia/manager.go); NVIDIA's plugin hands
its runtime the device list the same way. A pod that requests none runs, is ready, and finds no libcuda.so.1 or
no device: nothing in its status says so, its log does.

Reading every pod's log is not affordable on a big cluster, so only pods that say they were meant for a GPU node are
read: those that tolerate the ``nvidia.com/gpu`` taint (GKE taints its GPU nodes with it, and the
ExtendedResourceToleration admission plugin adds the toleration only to pods that request the resource, so a pod
carrying it by hand without the request asked for the node, not the GPU) or select the node by a GPU label
(GKE's ``cloud.google.com/gke-accelerator``, NVIDIA GFD's ``nvidia.com/gpu.*``), and run on a node that announces
GPUs, and are no DaemonSet's node agent: at most `MAX_WORKLOAD_LOGS` of them. Of the other pods on such a node
that request no GPU, only containers that failed are read: few on any cluster, and where the node's runtime hands
every container the GPUs its image names, one that found its GPU taken says so (`links/unallocated_gpu.py`).
"""

from __future__ import annotations

from gpuchain.doctor.structs import LogKey
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import Obj

#: The taint key GKE puts on GPU nodes and the extended resource of the device plugins.
GPU_TAINT = "nvidia.com/gpu"
#: Node labels that select a GPU node: GKE's accelerator type, and GFD's labels.
GPU_LABELS = ("cloud.google.com/gke-accelerator", "nvidia.com/gpu.")


def aimed_at_gpu(spec: Obj) -> bool:
    """Does the pod spec tolerate the GPU taint by name or select its node by a GPU label?"""
    if any(t.get("key") == GPU_TAINT for t in spec.get("tolerations") or ()):
        return True
    return any(str(k).startswith(GPU_LABELS) for k in spec.get("nodeSelector") or {})


def _failed(cs: Obj) -> bool:
    """A container that exited in error or waits to be restarted after it did."""
    state = cs.get("state") or {}
    ended = state.get("terminated") or {}
    return bool(ended and ended.get("exitCode")) or (state.get("waiting") or {}).get("reason") == "CrashLoopBackOff"


def running_unrequested(pod: Obj, gpu_nodes: set[str]) -> list[tuple[str, tuple[LogKey, Obj]]]:
    """The containers of a running ``pod`` on one of ``gpu_nodes`` (nodes that announce GPUs) that requests no GPU,
    with their node ([] otherwise): where it is aimed at a GPU node (`aimed_at_gpu`), its running or crash-looping
    containers; where it is not, only those that failed, since a pod no selector sent there may still use the GPUs a
    runtime defaulting to nvidia hands every container, and one that fails for it says so in its log."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if status.get("phase") != "Running" or str(spec.get("nodeName")) not in gpu_nodes:
        return []
    statuses = status.get("containerStatuses") or []
    if aimed_at_gpu(spec):
        chosen = [
            cs
            for cs in statuses
            if (cs.get("state") or {}).get("running")
            or ((cs.get("state") or {}).get("waiting") or {}).get("reason") == "CrashLoopBackOff"
        ]
    else:
        chosen = [cs for cs in statuses if _failed(cs)]
    if not chosen:
        return []
    meta = pod.get("metadata") or {}
    # A DaemonSet's pod is a node agent (an exporter, a monitor), placed on every GPU node by design, not a workload.
    if any(ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or ()):
        return []
    if pod_gpu_requests(pod) or spec.get("resourceClaims"):
        return []
    key = (str(meta.get("namespace") or "default"), str(meta.get("name")))
    return [(str(spec.get("nodeName")), ((*key, str(cs.get("name"))), cs)) for cs in chosen]
