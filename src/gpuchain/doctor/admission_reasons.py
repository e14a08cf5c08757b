"""The kubelet's admission refusals, as data: each reason the kubelet gives a pod it refuses (the family kubernetes
pkg/kubelet/kubelet.go admissionRejectionReasons lists, and the predicate names of pkg/kubelet/lifecycle/predicate.go)
with what on the node refused the pod and the change that lets it in; and the one read of the stack's refused pods,
which the doctor's pod list (no Failed pods) leaves out. `gpuchain.doctor.admission` judges them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from gpuchain.doctor.stacks.base import is_gpu_node
from gpuchain.kube import POD, Cluster
from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.kube.objects import Obj, name_of, namespace_of

#: Prefix of the reason for a resource the node lacked at admission (predicate.go InsufficientResourcePrefix).
OUT_OF = "OutOf"
#: The kubelet config file kubeadm and most installers write (a flag of the same name on the kubelet's command line
#: overrides it).
KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"


@dataclass(frozen=True)
class Refusal:
    """What on the node refuses a pod for one admission reason, and the change that lets the pod in."""

    what: str
    repair: str


#: The kubelet's admission reasons (kubelet.go admissionRejectionReasons and the predicate names of predicate.go's
#: generalFilter) that say why a pod of the chain cannot start on the node. OutOf<resource> is read by its prefix.
REFUSALS: dict[str, Refusal] = {
    "TopologyAffinityError": Refusal(
        "the kubelet's Topology Manager (topologyManagerPolicy restricted or single-numa-node) found no NUMA "
        "alignment for the pod's resources",
        f"set topologyManagerPolicy: best-effort (or none) in the kubelet's config ({KUBELET_CONFIG}, flag "
        "--topology-manager-policy) and restart the kubelet, or keep single-numa-node only on nodes whose pods fit one "
        "NUMA node",
    ),
    "SMTAlignmentError": Refusal(
        "the kubelet's CPU manager (cpuManagerPolicy static with the full-pcpus-only option) refused a CPU request "
        "that is not whole physical cores",
        f"remove full-pcpus-only from cpuManagerPolicyOptions in the kubelet's config ({KUBELET_CONFIG}) and restart "
        "the kubelet, or give the pod's Guaranteed containers a CPU count of whole cores",
    ),
    "Evicted": Refusal(
        "the kubelet's eviction manager refuses new pods while the node is under resource pressure",
        "relieve the node's pressure (its condition names the resource: memory, disk or PIDs)",
    ),
    "NodeShutdown": Refusal(
        "the kubelet refuses pods while the node shuts down (graceful node shutdown)",
        "let the node finish its shutdown and start again, or cancel the shutdown; the DaemonSet then places its pod",
    ),
    "SysctlForbidden": Refusal(
        "the kubelet refused a sysctl the pod sets that its allowedUnsafeSysctls does not list",
        f"add the sysctl to allowedUnsafeSysctls in the kubelet's config ({KUBELET_CONFIG}) and restart the kubelet, "
        "or remove it from the pod",
    ),
    "NodeAffinity": Refusal(
        "the node's labels no longer matched the pod's node selector or affinity when the kubelet admitted it",
        "delete the refused pod so its DaemonSet places a new one by the node's current labels",
    ),
    "PodOSSelectorNodeLabelDoesNotMatch": Refusal(
        "the pod's kubernetes.io/os label names another OS than the node runs",
        "keep the operand's DaemonSet on Linux nodes (nodeSelector kubernetes.io/os: linux)",
    ),
    "NodePorts": Refusal(
        "another pod on the node already holds a hostPort the pod asks for",
        "free the hostPort on the node (the other pod that holds it) or change the operand's port",
    ),
    "TaintToleration": Refusal(
        "the node carries a NoExecute taint the pod does not tolerate",
        "add the toleration to the operand's DaemonSet, or remove the taint from the node",
    ),
}


def refusal(reason: str) -> Refusal | None:
    """What refused a pod for the kubelet's admission ``reason``, and its repair (None: not a refusal read here)."""
    if reason.startswith(OUT_OF) and reason != OUT_OF:
        resource = reason.removeprefix(OUT_OF)
        return Refusal(
            f"the node had no {resource} left for the pod when the kubelet admitted it",
            f"free {resource} on the node (move or shrink its other pods"
            + (", or raise the kubelet's maxPods" if resource == "pods" else "")
            + "), and give the operand's DaemonSet priorityClassName system-node-critical so the kubelet makes room "
            "for it at admission",
        )
    return REFUSALS.get(reason)


#: The device manager's refusal of a pod whose devices it cannot allocate at admission (kubernetes
#: pkg/kubelet/lifecycle/predicate.go: UnexpectedAdmissionError for an error of an admit handler).
UNEXPECTED_ADMISSION = "UnexpectedAdmissionError"
#: What the kubelet puts before its message in a refused pod's status ("Pod was rejected: " from Kubernetes 1.26,
#: "Pod " before: pkg/kubelet/kubelet.go rejectPod@v1.34.4 and @v1.20.15).
_REJECTED_PREFIXES = ("Pod was rejected: ", "Pod ")


def rejected_by_kubelet(pod: Obj) -> bool:
    """Did the node's kubelet refuse ``pod`` at admission: Failed, with one of its admission reasons."""
    status = pod.get("status") or {}
    reason = str(status.get("reason") or "")
    return status.get("phase") == "Failed" and (reason == UNEXPECTED_ADMISSION or refusal(reason) is not None)


def rejection_event(pod: Obj) -> Obj:
    """The Warning Event the kubelet recorded when it refused ``pod`` (`rejected_by_kubelet`), read back from the
    pod's status: rejectPod writes the same reason and message to both (kubernetes pkg/kubelet/kubelet.go@v1.34.4),
    and the API server drops Events after an hour (--event-ttl) while the Failed pod stays."""
    status = pod.get("status") or {}
    message = str(status.get("message") or "")
    for prefix in _REJECTED_PREFIXES:
        if message.startswith(prefix):
            message = message.removeprefix(prefix)
            break
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    return {
        "type": "Warning",
        "reason": str(status.get("reason") or ""),
        "message": message,
        "involvedObject": {"kind": "Pod", "name": name_of(pod), "namespace": namespace_of(pod) or "default"},
        "source": {"component": "kubelet", "host": node},
        "metadata": {"name": f"{name_of(pod)}.status", "namespace": namespace_of(pod) or "default"},
    }


def refusals_worth_reading(*, nodes: list[Obj], pods: list[Obj], daemonsets: list[Obj], namespace: str) -> bool:
    """Are the stack's Failed pods worth a list call (the doctor's pod list leaves them out)? Only where a GPU node
    announces no GPU and a DaemonSet of the stack's namespace counts more pods scheduled than are listed (the
    DaemonSet controller counts a pod the kubelet refused, Failed, until it replaces it): a healthy cluster, or one
    whose pods all live, pays nothing for them."""
    if not any(is_gpu_node(n) and not any(v > 0 for v in node_gpu_resources(n).values()) for n in nodes):
        return False
    listed = Counter(
        str(ref.get("name"))
        for p in pods
        if (p.get("metadata") or {}).get("namespace") == namespace
        for ref in (p.get("metadata") or {}).get("ownerReferences") or []
        if ref.get("kind") == "DaemonSet"
    )
    return any(
        int((ds.get("status") or {}).get("currentNumberScheduled") or 0) > listed[name_of(ds)]
        for ds in daemonsets
        if namespace_of(ds) == namespace
    )


def read_refused(cluster: Cluster, namespace: str) -> list[Obj]:
    """The Failed pods of ``namespace`` whose reason is a kubelet admission refusal."""
    return refused_in(cluster.list_readonly(POD, namespace=namespace, field_selector="status.phase=Failed"), namespace)


def refused_in(pods: list[Obj], namespace: str) -> list[Obj]:
    """The pods of ``namespace`` among ``pods`` (a dump's, which keeps finished ones) that the kubelet refused at
    admission: Failed, with a reason of the family."""
    return [
        p
        for p in pods
        if namespace_of(p) == namespace
        and (p.get("status") or {}).get("phase") == "Failed"
        and refusal(str((p.get("status") or {}).get("reason") or "")) is not None
    ]
