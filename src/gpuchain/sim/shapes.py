"""The shapes the simulated API server holds: pod and container statuses as the kubelet and
kube-scheduler write them, Events, DaemonSet-style pod names, and `Rendered`, what a render returns.

Every renderer of the simulated cluster (`sim.render`, `sim.nodes`, `sim.workloads`,
`sim.clusterpolicy`) builds on these, so one status looks the same wherever it is written.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from gpuchain.kube.objects import READY_TO_START, Obj

RUNTIME_ERROR = 'no runtime for "nvidia" is configured'
"""containerd's error for a RuntimeClass handler it has no runtime for (internal/cri/config/config.go@v2.2.9), which
the kubelet's FailedCreatePodSandBox Event carries wrapped (``sandbox_event``)."""

STAMP = "2026-06-05T18:00:00Z"

LogKey = tuple[str, str, str]  #: (namespace, pod, container)


@dataclass
class Rendered:
    """Everything the simulated API server holds: objects, and container logs (which ``build`` hands to
    ``MemoryCluster.set_logs``, so the doctor reads them through the port as on a live cluster)."""

    objects: list[Obj] = field(default_factory=list)
    logs: dict[LogKey, str] = field(default_factory=dict)
    placements: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    """(namespace, pod) -> (node, device ids) of every workload pod that got devices."""


#: The alphabet of generateName suffixes (k8s.io/apimachinery/pkg/util/rand: no vowels, no 0/1/3).
_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"


def pod_name(ds_name: str, *, node: str, attempt: int = 0) -> str:
    """A stable pod name like the DaemonSet controller's (name + 5 generateName characters); a
    later ``attempt`` gives another suffix, as the API server's retry on a taken name does."""
    n = int.from_bytes(hashlib.sha1(f"{node}/{attempt}".encode()).digest()[:8], "big")
    suffix = ""
    for _ in range(5):
        n, i = divmod(n, len(_SUFFIX))
        suffix += _SUFFIX[i]
    return f"{ds_name}-{suffix}"


def unique_pod_name(ds_name: str, *, node: str, taken: set[str]) -> str:
    """``pod_name``, drawn again while the name is ``taken`` (then recorded there): a cluster of
    thousands of nodes has colliding 5-character suffixes (27^5 names: a collision is more likely
    than not among 5,000 pods of one DaemonSet), which the real controller meets as AlreadyExists
    and retries with a fresh random suffix. The same nodes in the same order always get the same names."""
    attempt = 0
    name = pod_name(ds_name, node=node)
    while name in taken:
        attempt += 1
        name = pod_name(ds_name, node=node, attempt=attempt)
    taken.add(name)
    return name


def running_container(name: str, *, ready: bool = True, restarts: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "ready": ready,
        "started": True,
        "restartCount": restarts,
        "state": {"running": {"startedAt": STAMP}},
    }


def completed_container(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "ready": True,
        "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": STAMP}},
    }


def waiting_container(name: str, *, reason: str, message: str = "") -> dict[str, Any]:
    waiting = {"reason": reason, **({"message": message} if message else {})}
    return {"name": name, "ready": False, "restartCount": 0, "state": {"waiting": waiting}}


def crashloop_container(name: str, *, log: str, restarts: int = 37) -> dict[str, Any]:
    return {
        "name": name,
        "ready": False,
        "restartCount": restarts,
        "state": {
            "waiting": {"reason": "CrashLoopBackOff", "message": f"back-off 5m0s restarting failed container={name}"}
        },
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": log, "finishedAt": STAMP}},
    }


#: The reason the kubelet gives Ready and ContainersReady of a pod that has ended (generate.go@v1.37.2
#: generatePodReadyConditionForTerminalPhase: PodCompleted, PodFailed).
TERMINAL = {"Succeeded": "PodCompleted", "Failed": "PodFailed"}


def kubelet_conditions(
    phase: str, *, incomplete: list[str], unready: list[str], sandbox: bool | None = None
) -> list[dict[str, Any]]:
    """A pod's conditions in the order, and with the reasons and messages, that the kubelet writes them
    (kubernetes pkg/kubelet/status/generate.go and kubelet_pods.go generateAPIPodStatus@v1.37.2, checked against the
    real kubelet in tests/peers/test_real_node_sandbox.py): PodReadyToStartContainers where ``sandbox`` says whether
    the runtime made the pod's sandbox (None: a kubelet before 1.29, which writes no such condition), then
    Initialized (False while an init container in ``incomplete`` has not finished), Ready and ContainersReady (False
    while a container in ``unready`` is not ready, or the pod has ended: ``TERMINAL``'s reason) and PodScheduled.

    The doctor and the held-out harness read these; one derivation keeps the simulator's pods and a case's edited
    pods alike."""
    conditions: list[dict[str, Any]] = []
    if sandbox is not None:
        started = {"type": READY_TO_START, "status": "True" if sandbox else "False"}
        # kubelet/types/constants.go@v1.37.2: PodSandboxNotReadyReason, PodSandboxNotReadyMsgNoPodSandbox.
        conditions.append(
            started if sandbox else {**started, "reason": "PodSandboxNotReady", "message": "no pod sandbox exists"}
        )
    initialized: dict[str, Any] = {"type": "Initialized", "status": "True"}
    if phase == "Succeeded":
        initialized["reason"] = "PodCompleted"
    elif incomplete:
        initialized = {
            **initialized,
            "status": "False",
            "reason": "ContainersNotInitialized",
            "message": f"containers with incomplete status: [{' '.join(incomplete)}]",
        }
    ready: dict[str, Any] = {"status": "True"}
    if phase in TERMINAL:
        ready = {"status": "False", "reason": TERMINAL[phase]}
    elif unready or phase != "Running":
        ready = {"status": "False", "reason": "ContainersNotReady"}
        if unready:
            ready["message"] = f"containers with unready status: [{' '.join(unready)}]"
    conditions += [initialized, {"type": "Ready", **ready}, {"type": "ContainersReady", **ready}]
    return [*conditions, {"type": "PodScheduled", "status": "True"}]


def pod_status(
    phase: str, *, inits: list[dict[str, Any]], mains: list[dict[str, Any]], node_ip: str, sandbox: bool | None = None
) -> dict[str, Any]:
    """A bound pod's status as the kubelet writes it for these container statuses (``kubelet_conditions``)."""
    st: dict[str, Any] = {
        "phase": phase,
        "hostIP": node_ip,
        "conditions": kubelet_conditions(
            phase,
            incomplete=[c["name"] for c in inits if not c["ready"]],
            unready=[c["name"] for c in mains if not c["ready"]],
            sandbox=sandbox,
        ),
        "containerStatuses": mains,
    }
    if inits:
        st["initContainerStatuses"] = inits
    return st


def init_waiting(done: int, *, inits: list[str], mains: list[str], ip: str) -> dict[str, Any]:
    """Init:<done>/N: the first ``done`` init containers finished, the next one waits (for a ready
    file that never comes), the rest and the main containers have not started."""
    return pod_status(
        "Pending",
        inits=[
            *(completed_container(n) for n in inits[:done]),
            running_container(inits[done], ready=False),
            *(waiting_container(n, reason="PodInitializing") for n in inits[done + 1 :]),
        ],
        mains=[waiting_container(n, reason="PodInitializing") for n in mains],
        node_ip=ip,
    )


def no_sandbox(inits: list[str], *, mains: list[str], ip: str) -> dict[str, Any]:
    """A pod of the nvidia RuntimeClass on a node whose runtime lacks that handler: no sandbox, so every container
    keeps the kubelet's default waiting reason, PodInitializing where the pod has init containers, else
    ContainerCreating (kubernetes pkg/kubelet/kubelet_pods.go@v1.34.4 convertToAPIContainerStatuses), and
    PodReadyToStartContainers is False (the kubelet's FailedCreatePodSandBox Event says why)."""
    default = "PodInitializing" if inits else "ContainerCreating"
    return pod_status(
        "Pending",
        inits=[waiting_container(n, reason=default) for n in inits],
        mains=[waiting_container(n, reason=default) for n in mains],
        node_ip=ip,
        sandbox=False,
    )


def unschedulable(message: str) -> dict[str, Any]:
    """A pod's status as kube-scheduler leaves one it places on no node: Pending, PodScheduled False
    (Unschedulable) with its "0/N nodes are available: ..." message."""
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    return {"phase": "Pending", "conditions": [condition]}


def warning_event(namespace: str, *, involved: Obj, reason: str, message: str, component: str, n: int) -> Obj:
    meta = involved["metadata"]
    ref = {"apiVersion": involved["apiVersion"], "kind": involved["kind"], "name": meta["name"]}
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{n:016x}", "namespace": namespace},
        "involvedObject": ref,
        "reason": reason,
        "message": message,
        "type": "Warning",
        "source": {"component": component},
        "firstTimestamp": STAMP,
        "lastTimestamp": STAMP,
        "count": 12,
    }


def sandbox_event(namespace: str, *, pod: Obj, n: int, runtime: str = "") -> Obj:
    """The kubelet's Event for a pod of the nvidia RuntimeClass whose runtime lacks the handler, on a node whose
    ``containerRuntimeVersion`` is ``runtime``: containerd 2 names the sandbox it could not make
    (internal/cri/server/sandbox_run.go@v2.2.9, checked against the real containerd in
    tests/peers/test_real_node_sandbox.py), 1.x says it failed to get the sandbox runtime (pkg/cri/server/sandbox_run.go
    of 1.7, the wording NVIDIA/gpu-operator#730 quotes)."""
    major = runtime.partition("://")[2].split(".")[0]
    if major.isdigit() and int(major) >= 2:
        sandbox = hashlib.sha256(f"{namespace}/{pod['metadata']['name']}".encode()).hexdigest()
        error = f'unable to get OCI runtime for sandbox "{sandbox}": {RUNTIME_ERROR}'
    else:
        error = f"failed to get sandbox runtime: {RUNTIME_ERROR}"
    message = f"Failed to create pod sandbox: rpc error: code = Unknown desc = {error}"
    return warning_event(
        namespace, involved=pod, reason="FailedCreatePodSandBox", message=message, component="kubelet", n=n
    )
