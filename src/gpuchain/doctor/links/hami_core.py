"""GPU workloads refused memory by HAMi-core for a usage no GPU has: the library's count is wrong, not the workload.

HAMi's device plugin mounts HAMi-core into every GPU container it serves; HAMi-core checks each CUDA allocation
against the container's limit (its nvidia.com/gpumem slice) and refuses it with "Device <n> OOM <counted+asked> /
<limit>" (Project-HAMi/HAMi-core src/allocator/allocator.c, oom_check). Every allocation it let through was under the
limit, so a true refusal names at most the limit plus one allocation, and no allocation exceeds the GPU's memory: a
figure beyond the limit by more than the largest GPU's memory is a count gone wrong (a counter driven below zero),
which only a HAMi release whose HAMi-core counts right repairs (releases.yaml). A refusal within those bounds is the
workload outgrowing its slice, its own affair, and stays quiet here.
"""

from __future__ import annotations

import functools
import re

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.owners import HELM_RELEASE, owner_daemonset
from gpuchain.doctor.releases import showing
from gpuchain.doctor.stacks import hami
from gpuchain.gpu import catalog as gpus
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import Obj, labels_of, name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN

OOM = "hami-core.device-oom"
_FIGURES = re.compile(r"\bDevice (\d+) OOM (\d+) / (\d+)")
MIB = 1 << 20
#: GFD's labels of a node's GPU (MiB of memory, the product name), where feature discovery runs beside HAMi.
MEMORY_LABEL = "nvidia.com/gpu.memory"
PRODUCT_LABEL = "nvidia.com/gpu.product"


@functools.cache
def _largest_gpu() -> int:
    """The memory of the largest GPU gpuchain's GPU catalog knows, in bytes: no single allocation is larger."""
    return max(m.memory_mib for m in (*gpus.MODELS.values(), *gpus.VARIANTS.values())) * MIB


def gpu_memory(node: Obj) -> tuple[int, str]:
    """The memory of one of ``node``'s GPUs in bytes, and where that figure comes from: GFD's label, else the catalogued
    product its label names, else the largest GPU catalogued (an upper bound any GPU keeps under)."""
    labels = labels_of(node)
    mib = str(labels.get(MEMORY_LABEL, ""))
    if mib.isdigit():
        return int(mib) * MIB, f"label {MEMORY_LABEL}={mib}"
    product = str(labels.get(PRODUCT_LABEL, ""))
    model = gpus.model_for_name(product.replace("-", " ")) if product else None
    if model is not None:
        return model.memory_mib * MIB, f"{model.name} has {model.memory_mib} MiB"
    largest = _largest_gpu()
    return largest, f"no GPU gpuchain knows has more than {largest // MIB} MiB"


def impossible(line: str, *, memory: int) -> bool:
    """Does a HAMi-core refusal ``line`` name a counted usage no workload can have: beyond its limit by more than a
    GPU's ``memory`` (the most one allocation can ask)?"""
    found = _FIGURES.search(line)
    return found is not None and int(found.group(2)) > int(found.group(3)) + memory


def _running_release(ctx: Context, view: NodeView) -> str:
    """The HAMi release the node's device plugin runs: its pod's image tag, else its DaemonSet's template's (a pod
    read without its spec); "" where neither is HAMi's image with a release tag."""
    plugin = view.pod(DEVICE_PLUGIN)
    if plugin is None:
        return ""
    return hami.hami_version(plugin) or hami.hami_version(owner_daemonset(ctx, plugin))


def _helm_release(ctx: Context, view: NodeView) -> str:
    """The Helm release that installed the node's plugin DaemonSet (its app.kubernetes.io/instance label)."""
    plugin = view.pod(DEVICE_PLUGIN)
    ds = owner_daemonset(ctx, plugin) if plugin is not None else None
    return str(labels_of(ds or {}).get(HELM_RELEASE, ""))


def miscounted_memory(ctx: Context, view: NodeView, apps: list[Obj]) -> Finding | None:
    """GPU pods on ``view``'s node refused allocations by HAMi-core for a counted usage beyond any GPU's memory: the
    library HAMi's device plugin mounts miscounts, so the device-plugin link (HAMi's release) is the root; the fix is
    the HAMi release that fixed the count where the running one is known affected, else HAMi's upgrade."""
    memory, bound = gpu_memory(view.node)
    hit_pods: list[Obj] = []
    said: catalog.Match | None = None
    for pod in apps:
        if not pod_gpu_requests(pod):
            continue
        for c in (pod.get("spec") or {}).get("containers") or []:
            found = catalog.find(ctx.log(pod, str(c.get("name"))), OOM)
            if found is not None and impossible(found.line, memory=memory):
                hit_pods.append(pod)
                said = said or found
                break
    if said is None:
        return None
    running = _running_release(ctx, view)
    hit = next((d for d in showing("log", OOM) if running and d.covers(running, d.component)), None)
    again = " && ".join(f"kubectl delete pod -n {namespace_of(p)} {name_of(p)}" for p in hit_pods[:3])
    target = hit.fixed_in if hit is not None else ""
    # HAMi's own chart, whatever stack the doctor took the cluster for: only HAMi mounts HAMi-core.
    chart = hami.CHART
    plugin = view.pod(DEVICE_PLUGIN)
    flags = hami.upgrade_flags(target) if target else "--reuse-values"
    action = Fix(
        FixOp.INSTALL,
        "",
        {
            "release": _helm_release(ctx, view) or chart.release,
            "chart": chart.chart,
            "namespace": (namespace_of(plugin) if plugin is not None and running else "") or chart.namespace,
            "upgrade": True,
            "flags": flags,
            NOT_SIMULATED: "HAMi-core's count is not simulated",
        },
    )
    why = (
        f"HAMi {target}, whose HAMi-core counts device memory right"
        if hit is not None
        else f"HAMi's newest release (HAMi {running or 'of unknown release'} is not one gpuchain knows miscounts)"
    )
    fix = f"{ctx.stack.render(action)}   # {why}; then {again} (they load the new HAMi-core when they start)"
    refs = ", ".join(f"{namespace_of(p)}/{name_of(p)}" for p in hit_pods[:5])
    return node_finding(
        view,
        fid="device-plugin.hami-core-miscount",
        sev=Severity.ERROR,
        link="device-plugin",
        cause="GPU pods on this node are refused device memory by HAMi-core, the library HAMi's device plugin mounts "
        "into them, for a counted usage larger than their limit by more than the GPU's whole memory: no workload "
        "can use that much, so HAMi-core miscounted and its release is the fault, not the workload's size"
        + (f"; a known defect of HAMi {running}, fixed in {hit.fixed_in}: {hit.cause}" if hit is not None else "."),
        evidence=[
            f"GPU pods refused: {refs}",
            *said.evidence("pod says"),
            f"GPU memory bound: {bound}",
            f"HAMi release: {running}" if running else "",
            *((f"release note: {hit.line}", hit.cite()) if hit is not None else ()),
        ],
        fix=fix,
        action=action,
    )
