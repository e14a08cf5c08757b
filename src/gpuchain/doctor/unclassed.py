"""GPU pods that run, ready, with no RuntimeClass: which of their containers' logs the gather step reads.

A container is given the node's driver (libcuda, libnvidia-ml, nvidia-smi) by the NVIDIA runtime, which runs it only
where the pod names its RuntimeClass (``runtimeClassName: nvidia``) or nvidia is the node's default runtime. Where it
is not -- k3s and RKE2 add the nvidia runtime to the containerd config they write but keep runc the default (k3s-io/k3s
pkg/agent/containerd/runtimes.go; the ``--default-runtime`` agent option changes it) -- a pod that requests a GPU and
names no class is still admitted and runs: the device plugin's Allocate answer (NVIDIA_VISIBLE_DEVICES, NVIDIA/
k8s-device-plugin internal/plugin/server.go) is an environment only the NVIDIA runtime acts on, and runc ignores it.
Nothing in the pod's status says so (it is Running and ready); its log does (torch.cuda.is_available() False,
"nvidia-smi: command not found"). A device plugin pod that names a RuntimeClass is the node's sign that the cluster
hands out the driver through the class (the GPU Operator's, which names it on every node, is not), and so is a k3s
or RKE2 node: the GPU pods there that name none are the ones worth a log read.
"""

from __future__ import annotations

from gpuchain.doctor.node import KUBEADM, distribution_of, runtime_scheme
from gpuchain.doctor.structs import LogKey
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import Obj, name_of, namespace_of


def keeps_runc_nodes(nodes: list[Obj]) -> set[str]:
    """The k3s and RKE2 nodes whose pods reach containerd (not Docker): runc stays its default runtime unless the
    agent's --default-runtime or its config template says otherwise, which the cluster's objects do not show."""
    return {str(name_of(n)) for n in nodes if distribution_of(n) is not KUBEADM and runtime_scheme(n) != "docker"}


def classed_daemonsets(daemonsets: list[Obj]) -> set[tuple[str, str]]:
    """(namespace, name) of the DaemonSets whose pod template names a RuntimeClass: a pod of one that the template
    changed after it was created may not name it yet, and still says how the cluster runs that operand."""
    return {
        (str(namespace_of(ds)), str(name_of(ds)))
        for ds in daemonsets
        if (((ds.get("spec") or {}).get("template") or {}).get("spec") or {}).get("runtimeClassName")
    }


def running_unclassed(pod: Obj) -> list[tuple[str, tuple[LogKey, Obj]]]:
    """The running, ready containers of ``pod`` with their node, where the pod requests a GPU, runs and names no
    RuntimeClass ([] otherwise): the gather step reads them where that node's device plugin names a RuntimeClass."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if spec.get("runtimeClassName") or status.get("phase") != "Running" or not pod_gpu_requests(pod):
        return []
    meta = pod.get("metadata") or {}
    key = (str(meta.get("namespace") or "default"), str(meta.get("name")))
    return [
        (str(spec.get("nodeName")), ((*key, str(cs.get("name"))), cs))
        for cs in status.get("containerStatuses") or []
        if (cs.get("state") or {}).get("running") and cs.get("ready")
    ]
