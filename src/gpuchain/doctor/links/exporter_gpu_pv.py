"""The exporter link on a node whose GPU is paravirtualised (Hyper-V GPU-PV or WSL2): the Linux node runs Microsoft's
WSL2 kernel and reaches the host's GPU through dxcore (/dev/dxg and the libraries under /usr/lib/wsl/lib), where CUDA
and NVIDIA's device plugin work but NVML, which DCGM needs, is not available. So a dcgm-exporter there cannot start
whatever its configuration, while the GPU serves pods: the exporter is to be left off such nodes, not the driver
repaired. K2s, a Kubernetes distribution for Windows hosts whose gpu-node addon gives its Linux node the WSL2 kernel,
made the exporter's failure non-fatal there ("DCGM-Exporter requires NVML which is not available with GPU
paravirtualization (Hyper-V GPU-PV)", Siemens-Healthineers/K2s#1835 for #1463) and later stopped deploying it ("It
requires the native NVML library which is unavailable on the dxcore/D3D12 driver path used by both WSL2 and Hyper-V
GPU-PV. Deploying it would only produce a crash-looping pod", K2s commit aa2a1ffeb, addons/gpu-node/Enable.ps1)."""

from __future__ import annotations

from collections.abc import Callable

from gpuchain.doctor.bottlerocket import away_from
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result, node_finding, operand_log, said_in
from gpuchain.doctor.model import Fix, FixOp, LinkState, Severity
from gpuchain.doctor.owners import owner_daemonset
from gpuchain.doctor.pods import pod_state
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DCGM_EXPORTER

Check = Callable[[Context, NodeView], Result]

#: The kernel Microsoft builds for WSL2 (kernelVersion ``<version>-microsoft-standard-WSL2``), the one a GPU-PV Linux
#: node runs: its dxgkrnl driver is the only way to the host's GPU there.
WSL2_KERNEL = "microsoft-standard-wsl2"
#: K2s' gpu-node addon's namespace (Siemens-Healthineers/K2s addons/gpu-node/manifests).
K2S_NAMESPACE = "gpu-node"


def gpu_pv(node: Obj) -> bool:
    """Does ``node`` reach its GPU through dxcore (it runs the WSL2 kernel)?"""
    info = (node.get("status") or {}).get("nodeInfo") or {}
    return WSL2_KERNEL in str(info.get("kernelVersion", "")).lower()


def _keep_off(ctx: Context, ds: Obj) -> tuple[Fix, str]:
    """Delete the exporter's DaemonSet where every GPU node it serves is GPU-PV, else keep it off those nodes."""
    ns, name = namespace_of(ds), name_of(ds)
    pv = sorted(v.name for v in ctx.views if gpu_pv(v.node))
    if all(gpu_pv(v.node) for v in ctx.views):
        action = Fix(FixOp.DELETE, f"{ns}/{name}", {"kind": "DaemonSet", "namespace": ns, "name": name})
        return action, "no GPU node here can run it"
    return away_from(ds, {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": pv}), (
        "it keeps serving the GPU nodes with a native driver"
    )


def on_gpu_pv(check: Check) -> Check:
    """``check`` (the exporter link's) with, first, a failing exporter on a GPU-PV node: DCGM cannot run there, so
    the repair leaves the exporter off the node and touches neither the driver nor the plugin."""

    def checked(ctx: Context, view: NodeView) -> Result:
        pod = view.pod(DCGM_EXPORTER)
        if pod is None or not gpu_pv(view.node):
            return check(ctx, view)
        state = pod_state(pod)
        ds = owner_daemonset(ctx, pod) if state.failing else None
        if not ds:
            return check(ctx, view)
        action, why = _keep_off(ctx, ds)
        log = operand_log(ctx, view=view, operand=DCGM_EXPORTER, container=state.container, last=state.last_log)
        k2s = (
            "; on K2s, a release whose gpu-node addon no longer deploys the exporter (it is optional there since "
            "#1835), then k2s addons disable gpu-node and k2s addons enable gpu-node"
            if namespace_of(ds) == K2S_NAMESPACE
            else ""
        )
        kernel = str(((view.node.get("status") or {}).get("nodeInfo") or {}).get("kernelVersion", ""))
        finding = node_finding(
            view,
            fid="exporter.gpu-pv",
            sev=Severity.ERROR,
            link="exporter",
            cause=f"the node runs the WSL2 kernel ({kernel}): its GPU is paravirtualised through dxcore (Hyper-V "
            "GPU-PV or WSL2), where NVML is not available, so DCGM cannot initialise and the exporter cannot start "
            "here whatever its settings; CUDA and the device plugin work on that path, and GPU pods are not affected.",
            evidence=[
                state.describe(),
                f"kernel {kernel}",
                f"DaemonSet {namespace_of(ds)}/{name_of(ds)}",
                *said_in(log),
            ],
            fix=ctx.stack.render(action) + f"   # the exporter is optional on dxcore (GPU-PV/WSL2) nodes, where DCGM "
            f"cannot run: leave it off this node ({why}){k2s}",
            action=action,
        )
        return Result(LinkState.BROKEN, "dcgm-exporter cannot run on a GPU-PV node", (finding,))

    return checked
