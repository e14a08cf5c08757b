"""The ready driver containers whose log a diagnosis reads for Fabric Manager's words.

The GPU Operator's driver container starts Fabric Manager (and NVLSM) on NVSwitch nodes
(NVIDIA/gpu-driver-container ubuntu22.04/nvidia-driver@06a208c `_start_daemons`), and images before 223687f reach
Ready whatever Fabric Manager said, so a node whose fabric never came up shows a ready driver pod and a CUDA
validation that fails with "system not yet initialized". The gather step reads the logs of containers that fail;
this adds, for each node whose CUDA validation fails, the driver container there, whose log holds the line that
names the repair (links/fabric.py). Nodes whose validation passes cost no read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpuchain.doctor.owners import owner_ds
from gpuchain.doctor.structs import LogKey
from gpuchain.kube.objects import Obj, name_of, namespace_of

#: The validator's init container that runs a CUDA workload on the node (NVIDIA/gpu-operator validator
#: cuda-validation), the one that reports the fabric's "system not yet initialized".
CUDA_VALIDATION = "cuda-validation"
#: At most this many driver logs for it: a fabric fault on many nodes shows the same line on each.
MAX_FABRIC_LOGS = 2


def _failed(status: Obj) -> bool:
    """Whether a container status shows a run that failed: crash-looping, or last terminated with an error."""
    waiting = ((status.get("state") or {}).get("waiting") or {}).get("reason")
    last = ((status.get("lastState") or {}).get("terminated") or {}).get("reason")
    return waiting == "CrashLoopBackOff" or last not in (None, "Completed")


def fabric_log_candidates(
    pods: Iterable[Obj], *, namespace: str, is_driver: Callable[[str, str], bool]
) -> list[tuple[LogKey, Obj]]:
    """The ready driver containers (key and status) on the nodes whose CUDA validation failed, one per node, at
    most `MAX_FABRIC_LOGS`; ``is_driver`` tells the stack's driver DaemonSets by namespace and name."""
    pods = list(pods)
    failing = {
        str((p.get("spec") or {}).get("nodeName"))
        for p in pods
        if namespace_of(p) == namespace
        and any(
            cs.get("name") == CUDA_VALIDATION and _failed(cs)
            for cs in (p.get("status") or {}).get("initContainerStatuses") or ()
        )
    }
    out: dict[str, tuple[LogKey, Obj]] = {}
    for pod in pods if failing else ():
        node = str((pod.get("spec") or {}).get("nodeName"))
        daemonset = owner_ds(pod)
        if node not in failing or node in out or not daemonset or not is_driver(namespace_of(pod) or "", daemonset):
            continue
        # The pod's first container is the driver's own (its sidecars, nvidia-peermem or GDS, come after it).
        first = str((((pod.get("spec") or {}).get("containers") or [{}])[0]).get("name", ""))
        for cs in (pod.get("status") or {}).get("containerStatuses") or ():
            if cs.get("name") == first and cs.get("ready") and "running" in (cs.get("state") or {}):
                out[node] = ((str(namespace_of(pod) or namespace), name_of(pod), first), cs)
    return [out[n] for n in sorted(out)][:MAX_FABRIC_LOGS]
