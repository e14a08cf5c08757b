"""A device plugin placed on no node because its DaemonSet requires labels that nothing in the cluster writes.

NVIDIA's device plugin chart (from v0.15) gives its DaemonSet a required node affinity on labels only Node Feature
Discovery or GPU feature discovery write: ``feature.node.kubernetes.io/pci-10de.present``,
``feature.node.kubernetes.io/cpu-model.vendor_id=NVIDIA`` or ``nvidia.com/gpu.present`` (NVIDIA/k8s-device-plugin
deployments/helm/nvidia-device-plugin/values.yaml ``affinity``). Installed without ``gfd.enabled`` (which brings NFD
as its subchart: Chart.yaml ``condition: nfd.enabled,gfd.enabled``) on nodes with no cloud accelerator label, no
node carries them: the DaemonSet wants 0 pods, no GPU is ever announced, and GPU pods wait on "Insufficient
nvidia.com/gpu" as if the cluster had no GPU node (reported in NVIDIA/k8s-device-plugin#708 and NVIDIA/nvkind#20,
repaired by labelling the GPU nodes or enabling GFD). Nothing here says which nodes have GPUs, so the finding needs
Pending GPU pods (GPUs are wanted) and no NFD or GFD in the cluster (with NFD running, nodes without its label have
no NVIDIA PCI device: a pool scaled to zero).
"""

from __future__ import annotations

from gpuchain.common.labels import GPU_PRESENT
from gpuchain.doctor.context import Context
from gpuchain.doctor.links.common import operand_daemonset
from gpuchain.doctor.model import Finding, Fix, FixOp, Severity
from gpuchain.doctor.pods import unschedulable_message
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import Obj, labels_of, name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN, NFD_GPU_LABELS

#: The labels only NFD (its PCI and CPU sources) or GPU feature discovery write.
DISCOVERED = (*NFD_GPU_LABELS, "feature.node.kubernetes.io/cpu-model.vendor_id", GPU_PRESENT)
#: The role labels of control-plane nodes (kubeadm's, and the older master's), which are not where GPUs are labelled.
CONTROL_PLANE = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
#: What NFD's and GFD's workloads are called or run (their charts' names and images).
DISCOVERY = ("node-feature-discovery", "gpu-feature-discovery")


def _required_keys(ds: Obj) -> list[str]:
    """The label keys of the DaemonSet's required node affinity terms ([] where a term is on anything else, or none)."""
    spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    keys = []
    for term in required.get("nodeSelectorTerms") or []:
        exprs = term.get("matchExpressions") or []
        if not exprs or term.get("matchFields"):
            return []
        keys += [str(e.get("key")) for e in exprs]
    return keys


def _discovery_running(ctx: Context) -> bool:
    for ds in ctx.snapshot.daemonsets:
        containers = (((ds.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
        said = " ".join([name_of(ds), *(str(c.get("image", "")) for c in containers)])
        if any(d in said for d in DISCOVERY):
            return True
    return False


def _serving_exporter_on(ctx: Context, keys: list[str]) -> list[str]:
    """The worker nodes without any of ``keys`` where a dcgm-exporter pod runs ready: it serves only after DCGM
    found the node's GPUs through the driver, so those nodes have GPUs the detection labels do not show."""
    bare = {
        name_of(n)
        for n in ctx.snapshot.nodes
        if not any(k in labels_of(n) for k in keys) and not any(r in labels_of(n) for r in CONTROL_PLANE)
    }
    found = set()
    for pod in ctx.snapshot.pods:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        statuses = status.get("containerStatuses") or []
        images = " ".join(str(c.get("image", "")) for c in spec.get("containers") or [])
        ready = bool(statuses) and all(cs.get("ready") for cs in statuses)
        if spec.get("nodeName") in bare and "dcgm-exporter" in images and ready:
            found.add(str(spec["nodeName"]))
    return sorted(found)


def placed_nowhere(ctx: Context) -> tuple[list[Finding], set[int]]:
    """The findings for a device plugin DaemonSet whose required affinity only NFD/GFD labels meet, with neither
    running: on each node that has GPUs (a ready dcgm-exporter says so) but not the labels, else, with no GPU node
    known and no node labelled, once for the cluster (GPU pods waiting on Insufficient GPUs, where there are, are
    its consequence); and those pods (by id)."""
    ds = operand_daemonset(ctx, DEVICE_PLUGIN)
    if ds is None:
        return [], set()
    keys = _required_keys(ds)
    if not keys or any(k not in DISCOVERED for k in keys) or _discovery_running(ctx):
        return [], set()
    unlabelled = _serving_exporter_on(ctx, keys)
    if not unlabelled and (ctx.views or any(k in labels_of(n) for n in ctx.snapshot.nodes for k in keys)):
        return [], set()
    waiting = [
        p for p in ctx.pending if pod_gpu_requests(p) and "Insufficient nvidia.com/" in (unschedulable_message(p) or "")
    ]
    ns, name = namespace_of(ds) or ctx.namespace, name_of(ds)
    desired = (ds.get("status") or {}).get("desiredNumberScheduled", 0)
    release = labels_of(ds).get("app.kubernetes.io/instance", "<release>")
    workers = unlabelled or [
        name_of(n) for n in ctx.snapshot.nodes if not any(r in labels_of(n) for r in CONTROL_PLANE)
    ]
    gfd = (
        f"let GFD and NFD write the labels: helm upgrade {release} nvdp/nvidia-device-plugin -n {ns} --reuse-values "
        "--set gfd.enabled=true"
    )
    required = ", ".join(sorted(set(keys)))
    refs = ", ".join(f"{namespace_of(p)}/{name_of(p)}" for p in waiting[:5])
    evidence = (
        f"DaemonSet {ns}/{name}: desired {desired}; its required affinity: {required}",
        "no Node Feature Discovery or GPU feature discovery DaemonSet in the cluster",
        *([f"GPU pods Pending on Insufficient GPUs: {refs}"] if waiting else []),
    )
    cause = (
        f"the device plugin's DaemonSet {ns}/{name} requires node labels that only Node Feature Discovery or GPU "
        f"feature discovery write ({required}) and neither runs in this cluster"
    )
    if unlabelled:
        findings = []
        for node in unlabelled:
            action = Fix(FixOp.LABEL_NODE, node, {GPU_PRESENT: "true"})
            findings.append(
                Finding(
                    id="device-plugin.placed-nowhere",
                    severity=Severity.ERROR,
                    link="device-plugin",
                    node=node,
                    cause=f"{cause}; {node} has GPUs (its dcgm-exporter serves their metrics) but none of those "
                    "labels, so the plugin is not placed there and the node announces no GPU.",
                    evidence=(*evidence, f"dcgm-exporter runs ready on {node}; {node} has none of the labels"),
                    fix=ctx.stack.render(action) + f"   # or {gfd}",
                    root=True,
                    action=action,
                )
            )
        return findings, {id(p) for p in waiting}
    action = Fix(FixOp.LABEL_NODE, workers[0] if workers else "<GPU node>", {GPU_PRESENT: "true"})
    fix = (
        ctx.stack.render(action)
        + f"   # on each node with an NVIDIA GPU (workers here: {', '.join(workers[:8]) or 'none'}); or {gfd}"
    )
    finding = Finding(
        id="device-plugin.placed-nowhere",
        severity=Severity.ERROR,
        link="device-plugin",
        cause=f"{cause}, and no node carries them, so the plugin runs on no node and no GPU is announced: GPU pods "
        "wait as if there were no GPU node, and a GPU node added later gets no plugin either, unless it comes with "
        "one of those labels.",
        evidence=(*evidence, "no node has those labels"),
        fix=fix,
        root=True,
        action=action,
    )
    return [finding], {id(p) for p in waiting}
