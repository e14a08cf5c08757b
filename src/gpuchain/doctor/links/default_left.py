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
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.node import distribution_of
from gpuchain.doctor.pods import start_refused
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import labels_of, name_of, namespace_of

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
    out = []
    for view in ctx.views:
        refused = _refused(view)
        if not refused:
            continue
        microk8s = labels_of(view.node).get(MICROK8S) == "true"
        dist = distribution_of(view.node)
        config = MICROK8S_CONFIG if microk8s else dist.containerd_config
        restart = MICROK8S_RESTART if microk8s else dist.restart
        action = (
            f'set default_runtime_name = "runc" in the [plugins."io.containerd.grpc.v1.cri".containerd] section of '
            f"{config} (the nvidia runtime a former GPU stack made the default; or restore the file it backed up), "
            f"then {restart}, then delete the refused pods"
        )
        fix = Fix(FixOp.NODE, view.name, {"action": action, NOT_SIMULATED: "containerd's default runtime is no fact"})
        found = node_finding(
            view,
            fid="toolkit.default-runtime-left",
            sev=Severity.ERROR,
            link="toolkit",
            cause="containerd on this node runs every container with the nvidia runtime (its default), though no "
            "GPU stack runs in the cluster any more: pods that ask for no GPU go through the NVIDIA hook, which "
            "fails without the driver, so they never start.",
            evidence=[
                *(f"pod {ref} (no GPU, no runtimeClassName) refused: {said[:240]}" for ref, said in refused[:3]),
                "no GPU stack (operator, device plugin) in the cluster",
            ],
            fix=ctx.stack.render(fix),
            action=fix,
        )
        out.append(dataclasses.replace(found, root=True))
    return out
