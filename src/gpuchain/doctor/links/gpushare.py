"""Pods sharing a GPU through ACK's cGPU that cannot start: more pods on one card than cGPU serves, or a cGPU release
that fails on the node's OS image.

ACK's gpushare device plugin hands out ``aliyun.com/gpu-mem`` and writes the card it chose into each pod's
``ALIYUN_COM_GPU_MEM_IDX`` annotation; cGPU, the kernel module ack-ai-installer's cgpu-installer loads, makes an
isolated instance for each of those pods as its container starts (stacks/ack.py). Alibaba Cloud's pages (ack.yaml, with
their words) give two ways that start fails while the scheduler and the plugin did their part: a card already serving
cGPU's limit of pods (20), where each further pod "fail[s] to run"; and a cGPU release with a known defect on the
node's OS image (cGPU 1.5.18 and earlier on ContainerOS, repaired by ack-ai-installer 1.12.6). Both are the sharing
layer's, so the device-plugin link is the root, and the repair is the sharing layer's: fewer pods on the card, or the
installer release whose cGPU works there. A node labelled for cGPU whose allocatable shows no ``aliyun.com/gpu-mem``
has a gpushare plugin that is not registered (the kubelet holds no registration of it), and its pod restarted registers
anew. A card at its limit whose pods all run is healthy, and so is a pod failing for a reason of its own on a card
under the limit and an OS the defects do not name.
"""

from __future__ import annotations

from collections import defaultdict

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.pods import pod_state
from gpuchain.doctor.scheduling import owner_of
from gpuchain.doctor.stacks import ack
from gpuchain.doctor.stacks.base import images_of
from gpuchain.kube.objects import Obj, name_of, namespace_of

#: The container states of a container the runtime could not start (the kubelet's waiting reasons, runc's StartError).
START_FAILED = frozenset({"RunContainerError", "CreateContainerError", "StartError"})


def shares_gpu(pod: Obj) -> bool:
    """Does ``pod`` ask for a share of GPU memory from the gpushare plugin (aliyun.com/gpu-mem)?"""
    spec = pod.get("spec") or {}
    return any(
        ack.GPU_MEM in ((c.get("resources") or {}).get("limits") or {})
        for c in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    )


def start_failure(pod: Obj) -> str:
    """The message of a container of ``pod`` the runtime failed to start ("" where none did): a waiting reason or
    last terminated reason in START_FAILED."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or ():
        waiting = (cs.get("state") or {}).get("waiting") or {}
        last = (cs.get("lastState") or {}).get("terminated") or {}
        for state in (waiting, last):
            if state.get("reason") in START_FAILED:
                return str(state.get("message") or state.get("reason"))
    return ""


def _holds_card(pod: Obj) -> bool:
    """Is ``pod`` one the card serves or will serve (neither Succeeded nor Failed)?"""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _cgpu_on(ctx: Context, view: NodeView) -> tuple[str, str]:
    """The cGPU release the node's cgpu-installer loads and the ack-ai-installer release behind it: its pod on the node,
    else its DaemonSet's template ("" where neither is read)."""
    pod = next((p for p in view.workloads if ack.is_cgpu_installer(p)), None)
    ds = next((d for d in ctx.snapshot.daemonsets if ack.is_cgpu_installer(d)), None)
    cgpu = ack.cgpu_release(pod) or ack.cgpu_release(ds)
    return cgpu, ack.installer_release(ds)


def _over_limit(ctx: Context, view: NodeView, shared: list[Obj], failing: dict[str, str]) -> Finding | None:
    """A card holding more pods than cGPU serves, some of them failing to start."""
    limit = ack.facts().pods_per_gpu
    cards: dict[str, list[Obj]] = defaultdict(list)
    for pod in shared:
        index = str(((pod.get("metadata") or {}).get("annotations") or {}).get(ack.GPU_INDEX, ""))
        if index and _holds_card(pod):
            cards[index].append(pod)
    card, pods = max(cards.items(), key=lambda kv: len(kv[1]), default=("", []))
    stuck = [p for p in pods if name_of(p) in failing]
    if len(pods) <= limit or not stuck:
        return None
    excess = len(pods) - limit
    owner = owner_of(stuck[0])
    mine = [p for p in shared if owner_of(p) == owner]
    if owner.kind in ("Deployment", "StatefulSet") and len(mine) > excess:
        action = Fix(
            FixOp.PATCH_WORKLOAD,
            owner.ref,
            {"patch": {"spec": {"replicas": len(mine) - excess}}, NOT_SIMULATED: "a user's workload is not simulated"},
        )
        how = f"scale {owner.kind} {owner.namespace}/{owner.name} down by {excess} (the replicas over the limit)"
    else:
        action = Fix.delete_pod(
            namespace_of(stuck[0]) or "default", name_of(stuck[0]), **{NOT_SIMULATED: "a user's pod is not simulated"}
        )
        how = f"delete the {excess} pod(s) over the limit"
    message = ack.facts().over_limit_message
    said = next((m for m in failing.values() if message in m), "")
    return node_finding(
        view,
        fid="device-plugin.cgpu-pod-limit",
        sev=Severity.ERROR,
        link="device-plugin",
        cause=f"{len(pods)} pods share GPU {card} of this node through cGPU, which serves at most {limit} pods on one "
        f"card: the scheduler placed them by aliyun.com/gpu-mem alone, and cGPU creates no instance for the pods "
        "beyond its limit, so they cannot start.",
        evidence=[
            f"pods with {ack.GPU_INDEX}={card}: {len(pods)} (limit {limit} per card, Alibaba Cloud's cGPU FAQ)",
            *(f"pod {namespace_of(p)}/{name_of(p)} cannot start: {failing[name_of(p)][:160]}" for p in stuck[:3]),
            f"cGPU's words for it: {message}" if said else "",
        ],
        fix=f"{ctx.stack.render(action)}   # keep at most {limit} pods on one GPU card under cGPU: {how}, or raise "
        f"each pod's {ack.GPU_MEM} request (or add GPU nodes) so the scheduler puts fewer pods on a card",
        action=action,
    )


def _os_defect(ctx: Context, view: NodeView, failing: dict[str, str], shared: list[Obj]) -> Finding | None:
    """A cGPU release with a known defect on this node's OS image, a shared pod failing to start."""
    cgpu, installer = _cgpu_on(ctx, view)
    defect = next((d for d in ack.facts().os_defects if d.hits(view.node, cgpu)), None)
    stuck = [p for p in shared if name_of(p) in failing]
    if defect is None or not stuck:
        return None
    info = (view.node.get("status") or {}).get("nodeInfo") or {}
    again = " && ".join(f"kubectl delete pod -n {namespace_of(p)} {name_of(p)}" for p in stuck[:3])
    return node_finding(
        view,
        fid="device-plugin.cgpu-os-defect",
        sev=Severity.ERROR,
        link="device-plugin",
        cause=f"this node runs {defect.title} with cGPU {cgpu}, a release Alibaba Cloud names as failing there "
        f'("{defect.says}"), and a pod sharing its GPU cannot start: the sharing layer\'s release is the fault, '
        "not the pod.",
        evidence=[
            f"node OS: {info.get('osImage', '?')} (kernel {info.get('kernelVersion', '?')})",
            f"cGPU {cgpu} (cgpu-installer image), ack-ai-installer {installer or '(release not read)'}",
            *(f"pod {namespace_of(p)}/{name_of(p)} cannot start: {failing[name_of(p)][:160]}" for p in stuck[:3]),
            f"known issue: {defect.source}",
        ],
        fix=f"# upgrade the shared GPU scheduling component ack-ai-installer to {defect.installer_fixed} or later (ACK "
        "console: the cluster's Applications > Cloud-native AI Suite or Add-ons, ack-ai-installer, Upgrade), whose "
        f"cGPU is newer than {'.'.join(map(str, defect.cgpu_through))}; then {again}",
    )


def _unannounced(ctx: Context, view: NodeView) -> Finding | None:
    """A cGPU node whose allocatable shows no ``aliyun.com/gpu-mem``: the gpushare plugin on it did not register with
    the kubelet (or runs no pod there), so no shared-GPU pod can be placed on it. Its pod restarted registers anew."""
    allocatable = ((view.node.get("status") or {}).get("allocatable") or {}).get(ack.GPU_MEM)
    if str(allocatable or "0") not in ("0", ""):
        return None
    plugin = next((p for p in view.workloads if ack.PLUGIN_IMAGE in images_of(p)), None)
    state = pod_state(plugin) if plugin is not None else None
    action = (
        Fix.delete_pod(namespace_of(plugin) or "kube-system", name_of(plugin), **{NOT_SIMULATED: "ACK's plugin"})
        if plugin is not None
        else None
    )
    fix = (
        f"{ctx.stack.render(action)}   # its DaemonSet starts it again and it registers {ack.GPU_MEM} anew"
        if action is not None
        else f"# no gpushare device plugin pod runs on {view.name}: the {ack.PLUGIN_DS} DaemonSet (ack-ai-installer) "
        "must place one on every node labelled for shared GPU scheduling; reinstall or upgrade ack-ai-installer"
    )
    return node_finding(
        view,
        fid="device-plugin.gpushare-unannounced",
        sev=Severity.ERROR,
        link="device-plugin",
        cause=f"this node is labelled for cGPU sharing but announces no {ack.GPU_MEM}: ACK's gpushare device plugin "
        "is not registered with its kubelet, so no pod asking for a GPU share can be placed here.",
        evidence=[
            f"node allocatable {ack.GPU_MEM}: {allocatable or 'none'}",
            state.describe() if state is not None else f"no pod of {ack.PLUGIN_DS} on the node",
        ],
        fix=fix,
        action=action,
    )


def cgpu_unstarted(ctx: Context, view: NodeView, apps: list[Obj]) -> list[Finding]:
    """Shared-GPU pods on a cGPU node that cannot start for the sharing layer's known reasons (the module docstring),
    and a cGPU node whose plugin announces nothing."""
    if not ack.under_cgpu(view.node):
        return []
    unannounced = _unannounced(ctx, view)
    if unannounced is not None:
        return [unannounced]
    shared = [p for p in apps if shares_gpu(p)]
    failing = {name_of(p): m for p in shared if (m := start_failure(p))}
    if not failing:
        return []
    found = [_over_limit(ctx, view, shared, failing), _os_defect(ctx, view, failing, shared)]
    return [f for f in found if f is not None]
