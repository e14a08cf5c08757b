"""GPU workload pods that ended Failed: the pod list the checks read leaves finished pods out, yet a workload that
fails at its first run and is not restarted (``restartPolicy: Never``: a Job's, a training trial's pod) never
crash-loops, so its Failed state and its log are all that says why its GPUs did not work (a CUDA release newer than
the node's driver, catalog.yaml's cuda.insufficient-driver entries). The doctor keeps the newest few of them on GPU
nodes, from the pod list it reads anyway, and reads their failed containers' logs as it reads a crash-looping
workload's (snapshot._log_candidates), so the node's workload checks see them."""

from __future__ import annotations

from gpuchain.doctor.admission_reasons import rejected_by_kubelet
from gpuchain.doctor.stacks.base import is_gpu_node
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import Obj, name_of

#: The most Failed GPU pods kept (the newest): enough to show a failure that repeats on a node, few enough that a
#: cluster keeping thousands of failed Job pods pays nothing for them.
MAX_FINISHED = 8
#: The field selector of the doctor's pod list: every pod but those that completed (a Failed pod is split off).
NOT_SUCCEEDED = "status.phase!=Succeeded"


def failed_containers(pod: Obj) -> list[Obj]:
    """The container statuses of ``pod`` that ended with an error (a non-zero exit code)."""
    return [
        cs
        for cs in (pod.get("status") or {}).get("containerStatuses") or []
        if ((cs.get("state") or {}).get("terminated") or {}).get("exitCode") not in (None, 0)
    ]


def _finished_at(pod: Obj) -> str:
    """When the pod's last container ended (RFC 3339 sorts as text; "" where no status says)."""
    return max(
        (
            str(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt") or "")
            for cs in (pod.get("status") or {}).get("containerStatuses") or []
        ),
        default="",
    )


def split_finished(pods: list[Obj], nodes: list[Obj]) -> tuple[list[Obj], list[Obj]]:
    """``pods`` less the finished ones (Succeeded, Failed: what the checks read), and the Failed GPU workload pods
    among them whose containers ended in error on a GPU node, the newest `MAX_FINISHED`, then at most as many the
    node's kubelet refused at admission (`split_finished` reads each pod's phase once; only a Failed pod is looked
    at further)."""
    live, failed = [], []
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase")
        if phase == "Failed":
            failed.append(pod)
        elif phase != "Succeeded":
            live.append(pod)
    if not failed:
        return live, []
    gpu_nodes = {name_of(n) for n in nodes if is_gpu_node(n)}
    on_gpu_nodes = [p for p in failed if (p.get("spec") or {}).get("nodeName") in gpu_nodes]
    kept = [p for p in on_gpu_nodes if pod_gpu_requests(p) and failed_containers(p)]
    # A pod the kubelet refused at admission ran no container: its status keeps the refusal the kubelet's Event
    # said, after the Event is gone (`admission_reasons.rejection_event`). Any pod's on a GPU node: the refusal's
    # message names the resource (a pod that asked for a GPU through a claim or an extended resource of its own
    # shows no nvidia.com/gpu request).
    refused = [p for p in on_gpu_nodes if rejected_by_kubelet(p)]
    return live, sorted(kept, key=_finished_at, reverse=True)[:MAX_FINISHED] + refused[:MAX_FINISHED]
