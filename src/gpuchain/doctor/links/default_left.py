"""The nvidia runtime left as containerd's default on a node where no GPU stack runs any more.

NVIDIA's toolkit makes ``nvidia`` containerd's default runtime (``nvidia-ctk runtime configure --set-as-default``; the
GPU Operator's toolkit container sets ``default_runtime_name = "nvidia"`` in the config it is given, MicroK8s'
containerd-template.toml included) and restores the config only when its container is stopped cleanly; a removal that
skips that leaves the node's containerd running every container through the NVIDIA hook (NVIDIA/gpu-operator#188).
A pod that asks for no GPU and names no RuntimeClass then has its start refused by nvidia-container-cli once the driver
it needs is gone: the proof that ``nvidia`` is the node's default runtime, where nothing of a GPU stack is there to
want it. The repair is the node's containerd default back to runc.
"""

from __future__ import annotations

import dataclasses
import re

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding, off_gpu_nodes
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.node import distribution_of
from gpuchain.doctor.owners import owner_ds
from gpuchain.doctor.pods import start_refused
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import Obj, labels_of, name_of, namespace_of

#: The NVIDIA hook's words in a runtime's refusal (nvidia-container-cli, also as its .real binary, or the hook).
NVIDIA_HOOK = re.compile(r"nvidia-container-(cli(\.real)?|runtime-hook)\b[^:]*:", re.IGNORECASE)
#: The label MicroK8s puts on its nodes, and where its containerd's config and restart are (the GPU Operator's
#: MicroK8s settings: CONTAINERD_CONFIG /var/snap/microk8s/current/args/containerd-template.toml).
MICROK8S = "microk8s.io/cluster"
MICROK8S_CONFIG = "/var/snap/microk8s/current/args/containerd-template.toml"
MICROK8S_RESTART = "snap restart microk8s.daemon-containerd"


def _refused(view: NodeView) -> list[tuple[str, str]]:
    """(namespace/name, refusal) of pods here that ask for no GPU, name no RuntimeClass, and the NVIDIA hook refused."""
    out = []
    for pod in view.workloads:
        if pod_gpu_requests(pod) or (pod.get("spec") or {}).get("runtimeClassName"):
            continue
        said = start_refused(pod)
        if said and NVIDIA_HOOK.search(said):
            out.append((f"{namespace_of(pod)}/{name_of(pod)}", said))
    return out


def default_left(ctx: Context) -> list[Finding]:
    """A toolkit finding for each GPU node whose pods without GPUs the NVIDIA hook refuses, where no GPU stack runs."""
    cause = (
        "containerd on this node runs every container with the nvidia runtime (its default), though no GPU stack "
        "runs in the cluster any more: pods that ask for no GPU go through the NVIDIA hook, which fails without the "
        "driver, so they never start."
    )
    found = [(view, refused) for view in ctx.views if (refused := _refused(view))]
    return [
        _finding(ctx, view, refused, cause, "no GPU stack (operator, device plugin) in the cluster")
        for view, refused in found
    ]


def default_off_gpu_nodes(ctx: Context) -> list[Finding]:
    """A toolkit finding for each node with no NVIDIA GPU whose pods without GPUs the NVIDIA hook refuses, whatever
    stack runs: nvidia is that node's default runtime (set there by hand, by a config management run meant for the GPU
    nodes, or by a toolkit placed on it), and with no driver on the node its hook refuses every container
    (nvidia-container-cli: "driver not loaded", "driver error"), as Project-HAMi/HAMi#715's control-plane node shows.
    The GPU nodes' own pods are the walk's."""
    others, placed = off_gpu_nodes(ctx)
    on: dict[str, list[Obj]] = {}
    for pod in placed:
        node = (pod.get("spec") or {}).get("nodeName")
        if start_refused(pod):
            owner = owner_ds(pod)
            # a GPU operand the stack placed here is the placement's finding (device-plugin.off-gpu-node)
            if owner and ctx.stack.operands_in(namespace_of(pod) or "", owner):
                continue
            on.setdefault(str(node), []).append(pod)
    out = []
    for node, pods in sorted(on.items()):
        view = NodeView(
            name=node, node=others[node], labels=labels_of(others[node]), operand_pods={}, workloads=pods, events=[]
        )
        refused = _refused(view)
        if refused:
            cause = (
                "containerd on this node, which has no NVIDIA GPU, runs every container with the nvidia runtime (its "
                "default): pods that ask for no GPU go through the NVIDIA hook, which finds no driver here, so they "
                "never start. The NVIDIA runtime belongs on the GPU nodes only."
            )
            out.append(
                _finding(ctx, view, refused, cause, "the node announces no NVIDIA GPU (no GPU label or capacity)")
            )
    return out


def _finding(ctx: Context, view: NodeView, refused: list[tuple[str, str]], cause: str, why: str) -> Finding:
    """The toolkit finding on ``view``'s node: its containerd's default runtime back to runc, then the refused pods."""
    microk8s = labels_of(view.node).get(MICROK8S) == "true"
    dist = distribution_of(view.node)
    config = MICROK8S_CONFIG if microk8s else dist.containerd_config
    restart = MICROK8S_RESTART if microk8s else dist.restart
    action = (
        f'set default_runtime_name = "runc" in the [plugins."io.containerd.grpc.v1.cri".containerd] section of '
        f"{config} (the nvidia runtime a GPU stack or a config run made the default; or restore the file it backed "
        f"up), then {restart}, then delete the refused pods"
    )
    fix = Fix(FixOp.NODE, view.name, {"action": action, NOT_SIMULATED: "containerd's default runtime is no fact"})
    found = node_finding(
        view,
        fid="toolkit.default-runtime-left",
        sev=Severity.ERROR,
        link="toolkit",
        cause=cause,
        evidence=[
            *(f"pod {ref} (no GPU, no runtimeClassName) refused: {said[:240]}" for ref, said in refused[:3]),
            why,
        ],
        fix=ctx.stack.render(fix),
        action=fix,
    )
    return dataclasses.replace(found, root=True)
