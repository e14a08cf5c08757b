"""GPUs held by native sidecars that dcgm-exporter cannot attribute to their pod.

In Kubernetes mode (DCGM_EXPORTER_KUBERNETES=true or -k; the dcgm-exporter chart and the GPU Operator set it, and mount
the kubelet's pod-resources directory for it) dcgm-exporter labels each GPU's metrics with the pod, namespace and
container the kubelet's pod-resources API says hold it. Releases before 4.2.3-4.1.3 ask that API's v1alpha1 List,
which leaves out restartable init containers (native sidecars: initContainers with restartPolicy: Always), so the
metrics of a GPU such a container holds carry no pod label while everything the cluster shows of the exporter is
well: it runs, is ready and logs nothing wrong (NVIDIA/dcgm-exporter#497, fixed by #498; releases.yaml
dcgm-exporter.sidecar-pod-labels). The running pods on the node whose native sidecar holds a GPU, and the exporter's
release, are all it takes to see it.
"""

from __future__ import annotations

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result, node_finding
from gpuchain.doctor.links.exporter_ready import COMPONENT, exporter_release
from gpuchain.doctor.links.releases import release_repair
from gpuchain.doctor.model import LinkState, Severity
from gpuchain.doctor.owners import owner_daemonset
from gpuchain.doctor.releases import defect
from gpuchain.kube.gpu_resources import is_gpu_resource
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DCGM_EXPORTER

SYMPTOM = "sidecar-unlabelled"
#: The switch of dcgm-exporter's Kubernetes mode (pkg/cmd/app.go@4.1.1-4.0.4, flag "kubernetes", -k) and the
#: directory of the kubelet's pod-resources socket it reads in that mode.
KUBERNETES_ENV, KUBERNETES_ARGS = "DCGM_EXPORTER_KUBERNETES", ("-k", "--kubernetes", "--kubernetes=true")
POD_RESOURCES = "/pod-resources"
#: The words Go's strconv.ParseBool (urfave/cli's boolean env) reads as true and as false.
TRUE, FALSE = ("1", "t", "T", "true", "TRUE", "True"), ("0", "f", "F", "false", "FALSE", "False")


def sidecar_gpus(view: NodeView) -> list[str]:
    """The running pods on the node whose native sidecar (a restartable init container) holds a GPU, as
    ``namespace/pod (container: resources)``."""
    held = []
    for pod in view.workloads:
        if (pod.get("status") or {}).get("phase") != "Running":
            continue
        for container in (pod.get("spec") or {}).get("initContainers") or []:
            if container.get("restartPolicy") != "Always":
                continue
            resources = container.get("resources") or {}
            names = sorted(
                {
                    str(k)
                    for part in ("limits", "requests")
                    for k, v in (resources.get(part) or {}).items()
                    if is_gpu_resource(str(k)) and str(v).isdigit() and int(str(v)) > 0
                }
            )
            if names:
                held.append(f"{namespace_of(pod)}/{name_of(pod)} ({container.get('name')}: {', '.join(names)})")
    return held


def _kubernetes_mode(ctx: Context, pod: Obj) -> str:
    """What shows the exporter runs in Kubernetes mode (its env or flag, or its mount of the kubelet's
    pod-resources directory), from the pod and its DaemonSet's template; "" where nothing does or it is off."""
    template = ((owner_daemonset(ctx, pod).get("spec") or {}).get("template") or {}).get("spec") or {}
    specs = [pod.get("spec") or {}, template]
    containers = [c for s in specs for c in s.get("containers") or []]
    for c in containers:
        value = next((str(e.get("value")) for e in c.get("env") or [] if e.get("name") == KUBERNETES_ENV), None)
        if value in FALSE:
            return ""
        if value in TRUE:
            return f"{KUBERNETES_ENV}={value}"
        flag = next((a for a in [*(c.get("command") or []), *(c.get("args") or [])] if a in KUBERNETES_ARGS), "")
        if flag:
            return f"flag {flag}"
    for s in specs:
        for volume in s.get("volumes") or []:
            path = str((volume.get("hostPath") or {}).get("path") or "").rstrip("/")
            if path.endswith(POD_RESOURCES):
                return f"mounts the kubelet's {path}"
    return ""


def sidecar_unlabelled(ctx: Context, view: NodeView) -> Result | None:
    """The exporter on ``view``'s node, a release that cannot see native sidecars, beside running pods whose GPU a
    native sidecar holds: their GPUs' metrics carry no pod labels. None where any of that is not so."""
    pod = view.pod(DCGM_EXPORTER)
    if pod is None:
        return None
    release = exporter_release(pod)
    hit = defect(COMPONENT, release, SYMPTOM) if release else None
    if hit is None:
        return None
    held = sidecar_gpus(view)
    mode = _kubernetes_mode(ctx, pod) if held else ""
    if not mode:
        return None
    repair = release_repair(ctx, view=view, pod=pod, operand=DCGM_EXPORTER, shown=(hit,))
    if repair is None:
        return None
    cause = (
        "GPUs on this node are held by native sidecars (init containers with restartPolicy: Always) that the node's "
        f"dcgm-exporter cannot see, so nothing tells which workload uses them. {repair.cause}"
    )
    fix = (
        f"{repair.fix}; its kubelet pod-resources v1 client lists native sidecars. Until then, run the GPU process "
        "as an ordinary container of the pod (spec.containers) instead of a native sidecar"
    )
    finding = node_finding(
        view,
        fid="exporter.sidecar-unlabelled",
        sev=Severity.ERROR,
        link="exporter",
        cause=cause,
        evidence=[
            *(f"native sidecar holds a GPU: {h}" for h in held),
            f"pod {name_of(pod)}: dcgm-exporter {release}, Kubernetes mode ({mode})",
            *repair.evidence,
        ],
        fix=fix,
        action=repair.action,
    )
    return Result(LinkState.BROKEN, "dcgm-exporter cannot label GPUs held by native sidecars", (finding,))
