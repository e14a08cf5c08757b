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
from gpuchain.doctor.stacks.base import is_gpu_node
from gpuchain.doctor.structs import LogKey, Stack
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import TOOLKIT, enabled


def keeps_runc_nodes(nodes: list[Obj]) -> set[str]:
    """The k3s and RKE2 nodes whose pods reach containerd (not Docker): runc stays its default runtime unless the
    agent's --default-runtime or its config template says otherwise, which the cluster's objects do not show."""
    return {str(name_of(n)) for n in nodes if distribution_of(n) is not KUBEADM and runtime_scheme(n) != "docker"}


#: The toolkit installer's flag that makes the nvidia runtime the container runtime's default, by the variables it is
#: read from; it is on unless one says false (NVIDIA/nvidia-container-toolkit cmd/nvidia-ctk-installer/container/
#: runtime/runtime.go@0a5f2ec8: set-as-default, defaultSetAsDefault = true, EnvVars NVIDIA_RUNTIME_SET_AS_DEFAULT,
#: CONTAINERD_SET_AS_DEFAULT, DOCKER_SET_AS_DEFAULT).
SET_AS_DEFAULT = ("NVIDIA_RUNTIME_SET_AS_DEFAULT", "CONTAINERD_SET_AS_DEFAULT", "DOCKER_SET_AS_DEFAULT")
#: What Go's strconv.ParseBool reads as false (the flag library parses the variable with it).
FALSE = frozenset({"0", "f", "F", "false", "FALSE", "False"})


def toolkit_not_default(env: dict[str, str]) -> str:
    """``NAME=value`` of the toolkit's env variable that keeps nvidia from being the runtime's default ("" where none
    does: then the toolkit makes it the default)."""
    return next((f"{k}={env[k]}" for k in SET_AS_DEFAULT if k in env and env[k].strip() in FALSE), "")


def not_default_nodes(stack: Stack, nodes: list[Obj]) -> set[str]:
    """The GPU nodes whose runtime the stack's toolkit configures without making nvidia its default (its policy's
    toolkit env says so): a GPU pod there that names no RuntimeClass runs under runc, with no driver."""
    env = {e.name: str(e.value) for e in stack.policy.toolkit.env} if stack.policy_obj is not None else {}
    if not enabled(stack.policy, TOOLKIT) or not toolkit_not_default(env):
        return set()
    return {str(name_of(n)) for n in nodes if is_gpu_node(n)}


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
