"""Host driver releases with a known defect that leaves GPU pods waiting with nothing failing.

The 570 branch before 570.172.08 hangs the device plugin's allocation on MIG-enabled GPUs: the kubelet's Allocate
call into the plugin never returns, so GPU pods on such a node stay in ContainerCreating with no Event and no error
anywhere, while pods without GPUs start (NVIDIA/gpu-operator#1361, kubernetes/kubernetes#130855; the maintainers:
fixed in 570.172.08 and 580.65.06, and the kubelet is restarted after the upgrade, since its calls may still hang).
The driver's version is the one GPU feature discovery labels the node with; MIG is on where the node shows a MIG layout
(`snapshot.mig_in_use`), not where GFD only labels a MIG strategy, which it does for GPUs in either mode.
"""

from __future__ import annotations

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result, node_finding
from gpuchain.doctor.links.driver_graphics import graphics_missing
from gpuchain.doctor.links.host_plugin import check_driver_under_host_plugin
from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp, LinkState, Severity
from gpuchain.doctor.snapshot import mig_in_use
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.operator.operands import DRIVER

#: GFD's label of the node's full driver version.
DRIVER_FULL = "nvidia.com/cuda.driver-version.full"
#: [first, fixed): the releases that hang allocation on MIG, and the first fixed one of the branch.
HANG_ON_MIG = ((570, 0, 0), (570, 172, 8))


def _version(text: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(p) for p in text.split("."))
    except ValueError:
        return None


def check_driver_defects(ctx: Context, view: NodeView) -> Result:
    """The driver link's checks and its known release defects, then, on a driver that works, a precompiled image
    without the graphics libraries a failing graphics pod here needs (links/driver_graphics)."""
    result = _release_defects(ctx, view)
    if result.state is LinkState.BROKEN:
        return result
    graphics = graphics_missing(ctx, view)
    if graphics is None:
        return result
    return Result(LinkState.DEGRADED, "precompiled driver without graphics libraries", (*result.findings, graphics))


def _release_defects(ctx: Context, view: NodeView) -> Result:
    """The driver link's checks, then a driver release known to hang GPU pods' allocation on this node's MIG."""
    result = check_driver_under_host_plugin(ctx, view)
    version = _version(view.labels.get(DRIVER_FULL, ""))
    if result.state is LinkState.BROKEN or version is None or not HANG_ON_MIG[0] <= version < HANG_ON_MIG[1]:
        return result
    mig = mig_in_use(view.node)
    if not mig:
        return result
    evented = {str((e.get("involvedObject") or {}).get("name")) for e in view.events}
    waiting = [
        p
        for p in view.workloads
        if pod_gpu_requests(p)
        and name_of(p) not in evented
        and any(
            ((cs.get("state") or {}).get("waiting") or {}).get("reason") == "ContainerCreating"
            for cs in (p.get("status") or {}).get("containerStatuses") or []
        )
    ]
    if not waiting:
        return result
    fixed = ".".join(str(n) for n in HANG_ON_MIG[1][:2]) + f".{HANG_ON_MIG[1][2]:02d}"
    where = (
        f"ClusterPolicy {ctx.policy_name} spec.driver.version {fixed}"
        if ctx.deploys(DRIVER)
        else "the host's NVIDIA driver packages"
    )
    action = (
        f"upgrade the driver to {fixed} or later (or 580.65.06 or later) on this node ({where}; 560.35.05 is the "
        "previous branch without the hang), then systemctl restart kubelet so its hung device plugin calls clear"
    )
    fix = Fix(FixOp.NODE, view.name, {"action": action, NOT_SIMULATED: "a driver release's defect is no fact"})
    finding = node_finding(
        view,
        fid="driver.mig-allocation-hang",
        sev=Severity.ERROR,
        link="driver",
        cause=f"driver {view.labels.get(DRIVER_FULL)} hangs the device plugin's allocation of MIG devices, so the "
        "kubelet never finishes setting up GPU pods on this node: they wait in ContainerCreating with no Event.",
        evidence=[
            f"label {DRIVER_FULL}={view.labels.get(DRIVER_FULL)}; MIG on: {mig}",
            "GPU pods in ContainerCreating with no Event: "
            + ", ".join(f"{namespace_of(p)}/{name_of(p)}" for p in waiting[:5]),
            "NVIDIA/gpu-operator#1361 (fixed in 570.172.08, 580.65.06)",
        ],
        fix=ctx.stack.render(fix),
        action=fix,
    )
    return Result(LinkState.BROKEN, "driver release that hangs MIG allocation", (finding,))
