"""A dcgm-exporter that runs and is ready but collects no GPU metric: it started before the node's driver was there.

dcgm-exporter loads NVML once, when it starts: a failed ``nvml.Init`` is logged ("Cannot init NVML library; err: %v")
and leaves its NVML provider uninitialised for the life of the process, which is not tried again (NVIDIA/dcgm-exporter
internal/pkg/nvmlprovider/provider.go newNVMLProvider@4.2.3-4.1.1), while its web server serves and its probes pass.
On a node whose driver comes up after boot (a managed image's driver installer, a driver container), an exporter that
started before it stays blind. What tells this from an exporter whose runtime injects no NVML at all is the node's own
device plugin: it found NVML, registered and announces the GPUs, and its container started after the exporter's.
A new exporter pod finds the driver; an init container that waits for the driver's library keeps new nodes from the
same race.
"""

from __future__ import annotations

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result, node_finding
from gpuchain.doctor.model import Fix, LinkState, Severity
from gpuchain.doctor.pods import first_running, pod_state
from gpuchain.kube.gpu_resources import offered_gpus
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.operator.operands import DCGM_EXPORTER, DEVICE_PLUGIN

#: dcgm-exporter's words for NVML it could not load (catalog.yaml).
NVML_INIT = "dcgm-exporter.nvml-init"


def started_before_driver(ctx: Context, view: NodeView) -> Result | None:
    """The exporter on ``view``'s node, ready, whose log says NVML could not be loaded, where the node's device plugin
    runs ready, announces GPUs and started after it: the exporter started before the driver. None otherwise."""
    pod = view.pod(DCGM_EXPORTER)
    container, began = first_running(pod)
    log = ctx.log(pod, container) if pod is not None and container else ""  # "" unless the gather step read it
    said = catalog.find(log, NVML_INIT) if log else None
    plugin = view.pod(DEVICE_PLUGIN)
    if pod is None or said is None or plugin is None or not (pod_state(pod).ready and pod_state(plugin).ready):
        return None
    _, plugin_began = first_running(plugin)
    offered = offered_gpus(view.node)
    if not offered or not began or not plugin_began or began >= plugin_began:
        return None
    ns = namespace_of(pod) or ctx.namespace
    action = Fix.delete_pod(ns, name_of(pod))
    root = f" ({ctx.stack.driver_root})" if ctx.stack.driver_root else ""
    finding = node_finding(
        view,
        fid="exporter.nvml-missed",
        sev=Severity.ERROR,
        link="exporter",
        cause=f"dcgm-exporter pod {name_of(pod)} runs and is ready but collects no GPU metric: it started before the "
        "node's driver was there, found no NVML, and loads it only once, at start. The node's device plugin, which "
        "started after it, found NVML and announces the GPUs, so the driver is there now.",
        evidence=[
            *said.evidence(),
            f"pod {name_of(pod)}: {container} running since {began}",
            f"device plugin pod {name_of(plugin)}: ready, running since {plugin_began}",
            f"node {view.name} offers {', '.join(f'{k} {v}' for k, v in sorted(offered.items()))}",
        ],
        fix=f"{ctx.stack.render(action)}   # its DaemonSet starts a new dcgm-exporter, which loads NVML now; to keep "
        "new nodes from the same race, give the exporter's DaemonSet an init container that waits for the driver's "
        f"libnvidia-ml.so.1{root} before it starts",
        action=action,
    )
    return Result(LinkState.BROKEN, "dcgm-exporter started before the driver: no GPU metrics", (finding,))
