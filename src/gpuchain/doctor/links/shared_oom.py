"""GPU pods whose CUDA allocations fail on a time-sliced GPU: a co-tenant holds the card's memory.

Time-slicing interleaves the workloads granted replicas of one GPU but "nothing special is done to isolate" them:
"each workload has access to the GPU memory" (NVIDIA/k8s-device-plugin README.md@v0.17.0). A tenant that keeps a
large allocation (a model it never unloads, a framework's memory arena that only grows) leaves the next tenant's
allocation to fail with CUDA's out-of-memory error, although every link of the chain is healthy and the scheduler
counted one replica each. The device plugin's sharing is the link that let them share without limits; what frees the
memory now is restarting the co-tenant that holds it (the tenants are the node's other running GPU pods; nvidia-smi
on the node shows which holds how much), and what keeps it from coming back is a GPU of its own for the workload,
or MPS sharing (``sharing.mps``), which partitions memory and "enforces these limits per workload" (the same README),
or a memory cap in the co-tenant itself. On a GPU of its own the error is the workload's own size, and stays quiet
here; HAMi's per-container limit has its own words (`links.hami_core`).

Where the source has none of the device plugin's ConfigMaps (a plain ``kubectl cluster-info dump``) and GFD labels no
sharing, the plugin's own log says it: at each start it prints the config it runs as indented JSON after "Running
with config:" (NVIDIA/k8s-device-plugin cmd/nvidia-device-plugin/main.go@v0.17.0 ``klog.Infof("\nRunning with
config:\n%v", configJSON)``), its ``sharing.timeSlicing`` included.
"""

from __future__ import annotations

import json

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding, said_by
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.ready_gpu_logs import OUT_OF_MEMORY
from gpuchain.doctor.scheduling import owner_of
from gpuchain.doctor.shared_gpu import STRATEGY, time_sliced, time_sliced_replicas
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN

#: The most co-tenants a fix names one by one.
MAX_NAMED = 6
#: What the device plugin writes before the config it runs (cmd/nvidia-device-plugin/main.go@v0.17.0).
RUNNING_WITH = "Running with config:"


def _config_printed(ctx: Context, view: NodeView) -> str:
    """How the node's device plugin says, in its log, that it shares the GPUs by time-slicing (an evidence line),
    "" where it runs no such config or printed none: the last config its log prints, as the one it runs now."""
    plugin = view.pod(DEVICE_PLUGIN)
    if plugin is None:
        return ""
    for container in (plugin.get("spec") or {}).get("containers") or []:
        log = ctx.log(plugin, str(container.get("name", "")))
        at = log.rfind(RUNNING_WITH)
        if at < 0:
            continue
        try:
            config, _ = json.JSONDecoder().raw_decode(log[at + len(RUNNING_WITH) :].lstrip())
        except ValueError:
            continue
        replicas = time_sliced_replicas(json.dumps(config)) if isinstance(config, dict) else 0
        if replicas > 1:
            return f"device plugin {name_of(plugin)} log: {RUNNING_WITH} sharing.timeSlicing replicas {replicas}"
        return ""
    return ""


def _ref(pod: Obj) -> str:
    return f"{namespace_of(pod) or 'default'}/{name_of(pod)}"


def _restart(pod: Obj) -> str:
    """The command that restarts ``pod`` and frees what it holds: its Deployment's (or other controller's) rollout
    restart, else the pod's deletion (its controller, where it has one, starts it again)."""
    owner = owner_of(pod)
    if owner.kind in ("Deployment", "StatefulSet", "DaemonSet"):
        return f"kubectl -n {owner.namespace} rollout restart {owner.kind.lower()}/{owner.name}"
    return f"kubectl -n {namespace_of(pod) or 'default'} delete pod {name_of(pod)}"


def _running_gpu_pod(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and bool(pod_gpu_requests(pod))


def starved_by_cotenants(ctx: Context, view: NodeView, apps: list[Obj]) -> Finding | None:
    """The finding for GPU pods among ``apps`` whose CUDA allocation ran out of memory on a node whose GPUs the device
    plugin shares by time-slicing while other GPU pods run there; None where none says so, the node's GPUs are not
    time-sliced, or no co-tenant runs beside them."""
    hit: list[Obj] = []
    said: catalog.Match | None = None
    for pod in apps:
        if not pod_gpu_requests(pod):
            continue
        found = catalog.find(said_by(ctx, pod), OUT_OF_MEMORY)
        if found is not None:
            hit.append(pod)
            said = said or found
    if said is None:
        return None
    sharing = time_sliced(view.labels, ctx.plugin_configs() or {})
    if not sharing and STRATEGY not in view.labels:  # GFD labels no sharing: the plugin's own log may say it
        sharing = _config_printed(ctx, view)
    starved = {id(p) for p in hit}
    cotenants = sorted((p for p in apps if id(p) not in starved and _running_gpu_pod(p)), key=_ref)
    if not sharing or not cotenants:
        return None
    named = cotenants[:MAX_NAMED]
    more = f" (and {len(cotenants) - len(named)} more)" if len(cotenants) > len(named) else ""
    plugin = view.pod(DEVICE_PLUGIN)
    which = (
        f"kubectl -n {namespace_of(plugin)} exec {name_of(plugin)} -- nvidia-smi "
        "--query-compute-apps=pid,used_memory --format=csv"
        if plugin is not None
        else "nvidia-smi --query-compute-apps=pid,used_memory --format=csv on the node"
    )
    restarts = "; ".join(f"{_ref(p)}: {_restart(p)}" for p in named)
    again = " && ".join(_restart(p) for p in hit[:3])
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": f"free the shared GPU's memory a co-tenant holds: restart the tenant that holds it ({which} "
            f"shows each process's memory) - the GPU pods sharing it here: {restarts}{more}; keep it from filling "
            "the card again (cap or unload its model memory, e.g. a model idle timeout or a framework memory "
            "limit), or give the starved workload a GPU of its own, or share by MPS (sharing.mps in the device "
            "plugin config), which limits each tenant's memory; then restart the starved pods: " + again,
            "drain": False,
            NOT_SIMULATED: "the GPU memory each tenant holds is not a scenario fact",
        },
    )
    return node_finding(
        view,
        fid="device-plugin.time-sliced-oom",
        sev=Severity.ERROR,
        link="device-plugin",
        cause="GPU pods on this node fail CUDA allocations for want of device memory while other GPU pods share the "
        "same GPUs by the device plugin's time-slicing, which gives its replicas no memory isolation: a co-tenant "
        "holds the memory the failing pod needs; the driver, runtime and plugin are healthy.",
        evidence=[
            f"GPU pods out of GPU memory: {', '.join(_ref(p) for p in hit[:5])}",
            *said.evidence("pod says"),
            f"GPUs shared by time-slicing: {sharing}",
            f"co-tenants on {view.name}: {', '.join(_ref(p) for p in named)}{more}",
            "NVIDIA/k8s-device-plugin README.md@v0.17.0: time-slicing replicas get no memory isolation",
        ],
        fix=ctx.stack.render(action),
        action=action,
    )
